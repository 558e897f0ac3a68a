// Reads a recording: metadata, processes, threads and calls, for report and export.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

struct sqlite3;

namespace eacgm {

class Statement;

class RecordingReader {
 public:
  // Opens read-only. Throws eacgm::Error when the file is missing or is not an eacgm recording.
  explicit RecordingReader(const std::string& path);
  ~RecordingReader();
  RecordingReader(const RecordingReader&) = delete;
  RecordingReader& operator=(const RecordingReader&) = delete;

  const std::map<std::string, std::string>& meta() const { return meta_; }
  std::string meta_or(const std::string& key, const std::string& fallback) const;
  // A time in ns (start_monotonic_ns, ...): 0 when absent; a value that is no whole number is
  // eacgm::Error naming the file and key; one beyond 0..2^62 is read as the nearest bound.
  int64_t meta_ns(const std::string& key) const;
  // CLOCK_MONOTONIC ns + this = wall clock ns
  int64_t monotonic_to_realtime_ns() const;

  // Runs a query and calls `row` for each result row.
  void query(const std::string& sql, const std::function<void(Statement&)>& row) const;
  bool has_table(const std::string& name) const;
  // `column` when the table has it, else `fallback` (an SQL expression): recordings from older
  // versions lack the columns added since.
  std::string column_or(const std::string& table, const std::string& column,
                        const std::string& fallback = "0") const {
    return columns_or(table, {column}, fallback);
  }
  // The same for several columns: "a, b, 0, d".
  std::string columns_or(const std::string& table, const std::vector<std::string>& columns,
                         const std::string& fallback = "0") const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
  std::map<std::string, std::string> meta_;
};

}  // namespace eacgm
