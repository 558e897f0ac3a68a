// Numeric CSV parsing for the GMM: strict about every field, so a bad row is named, not guessed.
#include "detect/csv_matrix.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "util/error.h"

namespace eacgm::detect {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Fills `fields` (reused across lines: no allocation per row once it has grown).
void split_fields(std::string_view line, std::vector<std::string_view>& fields) {
  fields.clear();
  size_t start = 0;
  for (;;) {
    size_t comma = line.find(',', start);
    fields.push_back(
        trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) return;
    start = comma + 1;
  }
}

// True when the whole field is a number (finite or not).
bool parse_number(std::string_view field, double& out) {
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);  // from_chars rejects '+'
  if (field.empty()) return false;
  auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  if (end != field.data() + field.size()) return false;
  // Out of range is still a number: strtod says which (infinity, rejected later, or a tiny value).
  if (ec == std::errc::result_out_of_range) out = std::strtod(std::string(field).c_str(), nullptr);
  return ec == std::errc() || ec == std::errc::result_out_of_range;
}

}  // namespace

NumericTable parse_numeric_csv(const std::string& text, const std::string& source) {
  NumericTable table;
  std::vector<double> row_major;
  std::vector<std::string_view> fields;
  size_t columns = 0, first_line = 0, line_no = 0, rows = 0;
  std::string_view rest(text);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (trim(line).empty()) continue;
    split_fields(line, fields);
    if (columns == 0) {
      columns = fields.size();
      first_line = line_no;
      size_t numeric = 0;
      double ignored;
      for (auto f : fields) numeric += parse_number(f, ignored);
      if (numeric == 0) {  // a header: keep the names, data starts on the next line
        for (auto f : fields) table.column_names.emplace_back(f);
        continue;
      }
      if (numeric != fields.size())
        fail(
            "{} line {}: mixes numbers and text (a header row must hold only names, a data row "
            "only numbers)",
            source, line_no);
    }
    if (fields.size() != columns)
      fail(
          "{} line {}: {} columns, but line {} has {} (every row needs the same number of "
          "columns)",
          source, line_no, fields.size(), first_line, columns);
    for (size_t c = 0; c < fields.size(); ++c) {
      double v;
      if (!parse_number(fields[c], v))
        fail(
            "{} line {}, column {}: '{}' is not a number (every row after the optional header "
            "must hold only numbers)",
            source, line_no, c + 1, fields[c]);
      if (!std::isfinite(v))
        fail(
            "{} line {}, column {}: '{}' is not finite (NaN and infinity cannot be fitted; drop "
            "or impute that row)",
            source, line_no, c + 1, fields[c]);
      row_major.push_back(v);
    }
    ++rows;
  }
  if (rows == 0)
    fail(
        "{}: no data rows (the file is empty or holds only a header; give at least one row of "
        "numbers)",
        source);
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  table.values =
      Eigen::Map<const RowMajor>(row_major.data(), Eigen::Index(rows), Eigen::Index(columns));
  return table;
}

NumericTable read_numeric_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}: {} (check the path)", path, errno_text(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail("cannot read {}: {} (check the file)", path, errno_text(errno));
  return parse_numeric_csv(buf.str(), path);
}

}  // namespace eacgm::detect
