// Reading a numeric CSV (optional header row) into an Eigen matrix, one row per sample.
#pragma once
#include <Eigen/Core>
#include <string>
#include <vector>

namespace eacgm::detect {

// A table of finite numbers: values(i, j) is row i, column j (column-major storage, so one
// feature of consecutive samples is contiguous: the layout the GMM kernels stream over).
struct NumericTable {
  std::vector<std::string> column_names;  // from the header row; empty when the file had none
  Eigen::MatrixXd values;
};

// Parses CSV text. `source` names the input in error messages (a path, or "<test>").
// The first non-blank row is a header when none of its fields is a number. Blank lines are
// skipped. Throws eacgm::Error naming the line (1-based) of a bad row: a non-numeric field, a
// NaN or infinity, a column count unlike the first row's, or a file with no data rows.
NumericTable parse_numeric_csv(const std::string& text, const std::string& source);

// Reads and parses a file; throws eacgm::Error when it cannot be read.
NumericTable read_numeric_csv(const std::string& path);

}  // namespace eacgm::detect
