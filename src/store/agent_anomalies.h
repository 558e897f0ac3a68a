// The agent's anomalies store: one SQLite file in the state dir (anomalies.db), one row per
// anomaly the online detector found, kept across restarts and bounded in rows. Read it with
// sqlite3, e.g. `SELECT datetime(time_ns / 1e9, 'unixepoch'), cause, process FROM anomalies`.
#pragma once
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

namespace eacgm {

struct StoredAnomaly {
  uint64_t ts_ns = 0;    // CLOCK_MONOTONIC of the call or window start
  uint64_t time_ns = 0;  // the same, as wall-clock (Unix epoch) time
  uint64_t dur_ns = 0;
  std::string layer, name;  // "cuda", "cudaMemcpy"; "window", "window"
  uint32_t pid = 0;         // 0: a window (all traced processes)
  std::string process;
  double score = 0, threshold = 0;
  std::string cause;
  std::string features;   // JSON: [[feature, contribution], ...], largest first
  std::string recording;  // the flight recording that holds it, if one was written
  uint64_t found_ns = 0;  // CLOCK_MONOTONIC when the agent reported it (found_ns - ts_ns: how
                          // long it took to find); 0: not known
};

class AnomalyStore {
 public:
  // Opens or creates `path`. Throws eacgm::Error naming the file and the fix.
  explicit AnomalyStore(const std::string& path, size_t max_rows = 1'000'000);
  ~AnomalyStore();
  AnomalyStore(const AnomalyStore&) = delete;
  AnomalyStore& operator=(const AnomalyStore&) = delete;

  // In one transaction; the oldest rows go beyond max_rows. Returns "" or the error (the
  // agent logs it and goes on: a full disk must not stop the tracing).
  std::string add(const std::vector<StoredAnomaly>& rows);
  size_t rows() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  size_t max_rows_;
  sqlite3* db_ = nullptr;
};

}  // namespace eacgm
