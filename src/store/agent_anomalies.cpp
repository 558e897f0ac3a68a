// The agent's anomalies store (store/agent_anomalies.h).
#include "store/agent_anomalies.h"

#include <sys/stat.h>

#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {

AnomalyStore::AnomalyStore(const std::string& path, size_t max_rows)
    : path_(path), max_rows_(max_rows) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(
        "{} is not a regular file (the agent keeps its anomalies there): move it away, or "
        "choose another --state-dir",
        path);
  mode_t old = umask(077);  // anomalies name processes and their commands' operations
  int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  umask(old);
  std::string err = rc == SQLITE_OK ? exec_sql(db_,
                                               "PRAGMA journal_mode=WAL;"
                                               "CREATE TABLE IF NOT EXISTS anomalies("
                                               "ts_ns INTEGER NOT NULL, time_ns INTEGER NOT NULL, "
                                               "dur_ns INTEGER NOT NULL, layer TEXT NOT NULL, "
                                               "name TEXT NOT NULL, pid INTEGER, process TEXT, "
                                               "score REAL, threshold REAL, cause TEXT, "
                                               "features TEXT, recording TEXT, "
                                               "found_ns INTEGER)")
                                    : std::string(db_ ? sqlite3_errmsg(db_) : "out of memory");
  if (!err.empty()) {
    sqlite3_close(db_);
    db_ = nullptr;
    fail(
        "cannot open the anomalies store {}: {} (is the state dir writable? choose another "
        "with --state-dir)",
        path, err);
  }
  sqlite3_busy_timeout(db_, 1000);
  // a store an older agent made has no found_ns yet: add it (its rows keep NULL)
  bool has_found = false;
  {
    Statement columns(db_, "SELECT count(*) FROM pragma_table_info('anomalies') WHERE name = "
                           "'found_ns'");
    has_found = columns.step() && columns.int_at(0) > 0;
  }
  if (!has_found)
    if (std::string e = exec_sql(db_, "ALTER TABLE anomalies ADD COLUMN found_ns INTEGER");
        !e.empty()) {
      sqlite3_close(db_);
      db_ = nullptr;
      fail("cannot add found_ns to the anomalies store {}: {} (choose another --state-dir)", path,
           e);
    }
}

AnomalyStore::~AnomalyStore() { sqlite3_close(db_); }

std::string AnomalyStore::add(const std::vector<StoredAnomaly>& rows) {
  if (rows.empty()) return {};
  if (std::string e = exec_sql(db_, "BEGIN IMMEDIATE"); !e.empty()) return e;
  std::string err;
  {
    Statement insert(db_,
                     "INSERT INTO anomalies(ts_ns, time_ns, dur_ns, layer, name, pid, process, "
                     "score, threshold, cause, features, recording, found_ns) "
                     "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)");
    for (const auto& a : rows) {
      insert.bind(1, int64_t(a.ts_ns));
      insert.bind(2, int64_t(a.time_ns));
      insert.bind(3, int64_t(a.dur_ns));
      insert.bind(4, a.layer);
      insert.bind(5, a.name);
      if (a.pid)
        insert.bind(6, int64_t(a.pid));
      else
        insert.bind_null(6);
      if (a.pid || !a.process.empty())  // (a window's: its job and processes)
        insert.bind(7, a.process);
      else
        insert.bind_null(7);
      insert.bind_double(8, a.score);
      insert.bind_double(9, a.threshold);
      insert.bind(10, a.cause);
      insert.bind(11, a.features);
      if (a.recording.empty())
        insert.bind_null(12);
      else
        insert.bind(12, a.recording);
      if (a.found_ns)
        insert.bind(13, int64_t(a.found_ns));
      else
        insert.bind_null(13);
      if (insert.run() != SQLITE_DONE) {
        err = sqlite3_errmsg(db_);
        break;
      }
    }
  }
  if (err.empty()) {
    std::string trim = fmt::format(
        "DELETE FROM anomalies WHERE rowid <= (SELECT max(rowid) FROM anomalies) - {}", max_rows_);
    err = exec_sql(db_, trim.c_str());
  }
  if (!err.empty()) {
    exec_sql(db_, "ROLLBACK");
    return err;
  }
  return exec_sql(db_, "COMMIT");
}

size_t AnomalyStore::rows() const {
  Statement count(db_, "SELECT count(*) FROM anomalies");
  return count.step() ? size_t(count.int_at(0)) : 0;
}

}  // namespace eacgm
