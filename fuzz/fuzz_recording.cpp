// Recordings opened by `report`, `export` and `detect` may be damaged (a full disk, a copy cut
// short, a hand edit) or not ours at all: whatever they hold, each of those commands must either
// do its work or stop with eacgm::Error (one clear line), never crash, hang, or fail with a raw
// library exception ("stoll", "bad_alloc"): those reach the user as "internal error".
//
// Random bytes are almost never an SQLite file, so each input damages a small valid recording
// instead, built here from the real schema (kRecordingSchema) with a few rows in every table:
//   byte 0 (mode): bit 0 set: apply SQL mutations, read from the following bytes, 5 at a time:
//     op, table, column, row, value: set a cell to NULL, 0, -1, the int64 extremes, +-1e308,
//     infinity, '' or text/blob from the input; drop a table or a column; rename a column;
//     delete or change a meta key; double a table's rows;
//   bit 1 set: then overwrite bytes of the file itself (SQLite pages) at offsets from the input
//     (4 bytes: offset, then the new byte).
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "detect/detector.h"
#include "detect/features.h"
#include "export/exporter.h"
#include "report/collectives.h"
#include "report/html_report.h"
#include "report/report.h"
#include "store/reader.h"
#include "store/recording.h"
#include "util/error.h"

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
};

// What a real recording's meta holds (values typical of a short CUDA run).
const char* const kMeta[][2] = {
    {"eacgm_version", "0.2.0"},        {"command", "./train --steps 10"},
    {"hostname", "node-1"},            {"layers", "cuda,comm,torch,python,host,gpu"},
    {"start_monotonic_ns", "1000000"}, {"end_monotonic_ns", "3000001000"},
    {"start_realtime_ns", "1760000000000000000"},
    {"monotonic_to_realtime_ns", "1759999999999000000"},
    {"events", "40"},                  {"dropped_events", "0"},
    {"exit_status", "0"},              {"recording_state", "complete"},
    {"sample_interval_ms", "100"},     {"recorder_cpu_seconds", "0.5"},
    {"detect_anomalies", "1"},         {"netns", "4026531840"},
    {"sample_hz", "99"},
};

void exec(sqlite3* db, const std::string& sql) { sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr); }

std::vector<std::string> tables_of(sqlite3* db) {
  std::vector<std::string> out;
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name", -1, &s, nullptr);
  while (sqlite3_step(s) == SQLITE_ROW) out.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  sqlite3_finalize(s);
  return out;
}

std::vector<std::pair<std::string, std::string>> columns_of(sqlite3* db, const std::string& table) {
  std::vector<std::pair<std::string, std::string>> out;  // name, declared type
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, ("SELECT name, type FROM pragma_table_info('" + table + "')").c_str(), -1, &s, nullptr);
  while (sqlite3_step(s) == SQLITE_ROW)
    out.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)),
                     reinterpret_cast<const char*>(sqlite3_column_text(s, 1)));
  sqlite3_finalize(s);
  return out;
}

// Plausible rows: times inside the meta's span, a few pids and threads, names of real
// operations, small sizes; enough alike across tables that collectives match and windows fill.
std::string cell(const std::string& column, const std::string& type, int row) {
  auto has = [&](const char* s) { return column.find(s) != std::string::npos; };
  if (type.find("INT") != std::string::npos) {
    if (has("ts") || has("_ns") && !has("dur") && !has("runq")) return std::to_string(1'000'000 + row * 100'000'000LL);
    if (has("dur") || has("runq")) return std::to_string(1'000'000 + row * 37'000);
    if (has("pid")) return std::to_string(100 + row % 2);
    if (has("tid")) return std::to_string(100 + row % 3);
    if (has("rank")) return std::to_string(row % 2);
    if (has("size") || has("bytes") || has("world")) return std::to_string(2 + row % 2);
    return std::to_string(row + 1);
  }
  if (type.find("REAL") != std::string::npos) return std::to_string(0.5 + row);
  static const char* names[] = {"'cudaMalloc'", "'ncclAllReduce'", "'aten::mm'", "'gloo:all_reduce'"};
  if (has("name") || has("op") || has("kernel")) return names[row % 4];
  return "'x" + std::to_string(row) + "'";
}

void build_template(sqlite3* db) {
  exec(db, eacgm::kRecordingSchema);
  exec(db, "BEGIN");
  for (const auto& kv : kMeta)
    exec(db, std::string("INSERT OR REPLACE INTO meta VALUES ('") + kv[0] + "', '" + kv[1] + "')");
  for (const auto& t : tables_of(db)) {
    if (t == "meta") continue;
    auto cols = columns_of(db, t);
    for (int r = 0; r < 8; ++r) {
      std::string values;
      for (const auto& [name, type] : cols) values += (values.empty() ? "" : ", ") + cell(name, type, r);
      exec(db, "INSERT OR IGNORE INTO " + t + " VALUES (" + values + ")");
    }
  }
  exec(db, "COMMIT");
}

std::string sql_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string value_from(Input& in) {
  switch (in.byte() % 11) {
    case 0: return "NULL";
    case 1: return "0";
    case 2: return "-1";
    case 3: return "9223372036854775807";
    case 4: return "-9223372036854775808";
    case 5: return "1e308";
    case 6: return "-1e308";
    case 7: return "9e999";  // infinity
    case 8: return "''";
    case 9: return "x'00ff'";
    default: {
      std::string s;
      for (uint8_t k = in.byte() % 12; k > 0 && !in.empty(); --k) s += char(in.byte());
      return sql_quoted(s);
    }
  }
}

void mutate(sqlite3* db, Input& in) {
  for (int ops = 0; ops < 24 && !in.empty(); ++ops) {
    auto tables = tables_of(db);
    if (tables.empty()) return;
    uint8_t op = in.byte() % 8;
    const std::string& t = tables[in.byte() % tables.size()];
    auto cols = columns_of(db, t);
    std::string c = cols.empty() ? "rowid" : cols[in.byte() % cols.size()].first;
    int row = in.byte() % 10;  // 0: every row
    std::string where = row ? " WHERE rowid = " + std::to_string(row) : "";
    switch (op) {
      case 0:
      case 1: exec(db, "UPDATE " + t + " SET " + c + " = " + value_from(in) + where); break;
      case 2: exec(db, "DROP TABLE " + t); break;
      case 3: exec(db, "ALTER TABLE " + t + " DROP COLUMN " + c); break;
      case 4: exec(db, "ALTER TABLE " + t + " RENAME COLUMN " + c + " TO renamed_" + c); break;
      case 5: exec(db, std::string("DELETE FROM meta WHERE key = '") + kMeta[row % std::size(kMeta)][0] + "'"); break;
      case 6:
        exec(db, std::string("UPDATE meta SET value = ") + value_from(in) + " WHERE key = '" +
                     kMeta[(row + in.byte()) % std::size(kMeta)][0] + "'");
        break;
      default: exec(db, "INSERT INTO " + t + " SELECT * FROM " + t + " LIMIT 64"); break;
    }
  }
}

void corrupt(const std::string& path, Input& in) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  auto size = uint64_t(f.tellg());
  if (!size) return;
  for (int k = 0; k < 16 && in.n >= 4; ++k) {
    uint32_t off = uint32_t(in.byte()) << 16 | uint32_t(in.byte()) << 8 | in.byte();
    f.seekp(std::streamoff(off % size));
    f.put(char(in.byte()));
  }
}

// What the commands do with a recording, each to the end or to eacgm::Error.
template <typename F>
void as_a_command(F&& f) {
  try {
    f();
  } catch (const eacgm::Error&) {
  }
  // anything else escapes to libFuzzer: an uncaught exception is a finding
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = "/tmp/eacgm-fuzz-recording-" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::string db_path = dir + "/r.eacgm.db", out = dir + "/out";
  Input in{data, size};
  uint8_t mode = in.byte();
  std::filesystem::remove(db_path);
  sqlite3* db = nullptr;
  if (sqlite3_open(db_path.c_str(), &db) != SQLITE_OK) std::abort();
  build_template(db);
  if (mode & 1) mutate(db, in);
  sqlite3_close(db);
  if (mode & 2) corrupt(db_path, in);

  FILE* devnull = fopen("/dev/null", "w");
  as_a_command([&] { eacgm::print_report(db_path, false, devnull); });
  as_a_command([&] { eacgm::print_report(db_path, true, devnull); });
  fclose(devnull);
  as_a_command([&] {
    eacgm::RecordingReader rec(db_path);
    eacgm::HtmlReportOptions options;
    options.columns = 50;
    // what report --html writes into the page: it must serialise whatever the cells held
    auto page = eacgm::html_report_data(rec, options)
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (page.empty()) std::abort();
  });
  as_a_command([&] { eacgm::export_recording(db_path, out, eacgm::ExportFormat::Perfetto, true); });
  as_a_command([&] { eacgm::export_recording(db_path, out, eacgm::ExportFormat::ChromeJson, true); });
  as_a_command([&] { eacgm::export_recording(db_path, out, eacgm::ExportFormat::Pprof, true); });
  as_a_command([&] {
    namespace detect = eacgm::detect;
    eacgm::RecordingReader rec(db_path);
    eacgm::Collectives collectives(rec);
    auto tables = detect::call_features(rec, &collectives);
    tables.push_back(detect::window_features(rec, 100'000'000));
    detect::DetectOptions options;
    options.min_samples = 4;
    auto split = detect::split_by_count(tables, 0.5);
    auto model = detect::train_detector(tables, split, options, nullptr);
    detect::find_anomalies(model, tables, split, 3, 0, nullptr, 0);
  });
  return 0;
}
