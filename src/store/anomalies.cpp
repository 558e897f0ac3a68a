// The anomalies table, written in place into an existing recording.
#include "store/anomalies.h"

#include <sqlite3.h>

#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {

void write_anomalies(const std::string& path, const std::vector<AnomalyRow>& rows,
                     const std::vector<std::pair<std::string, std::string>>& meta) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    fail("cannot write anomalies into {}: {} (is it writable?)", path, msg);
  }
  sqlite3_busy_timeout(db, 5000);
  auto check = [&](const std::string& err, const char* what) {
    if (err.empty()) return;
    exec_sql(db, "ROLLBACK");
    sqlite3_close(db);
    fail("cannot write anomalies into {}: {}: {}", path, what, err);
  };
  check(exec_sql(db, "BEGIN IMMEDIATE"), "begin");
  check(exec_sql(db,
                 "CREATE TABLE IF NOT EXISTS anomalies(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT "
                 "NULL, layer TEXT NOT NULL, name TEXT NOT NULL, score REAL, threshold REAL, "
                 "cause TEXT, features TEXT); DELETE FROM anomalies;"),
        "table");
  {
    Statement insert(db, "INSERT INTO anomalies VALUES(?1,?2,?3,?4,?5,?6,?7,?8)");
    for (const auto& a : rows) {
      insert.bind(1, static_cast<int64_t>(a.ts_ns));
      insert.bind(2, static_cast<int64_t>(a.dur_ns));
      insert.bind(3, a.layer);
      insert.bind(4, a.name);
      insert.bind_double(5, a.score);
      insert.bind_double(6, a.threshold);
      insert.bind(7, a.cause);
      insert.bind(8, a.features);
      if (insert.run() != SQLITE_DONE) check(sqlite3_errmsg(db), "rows");
    }
    Statement set(db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)");
    for (const auto& [k, v] : meta) {
      set.bind(1, k);
      set.bind(2, v);
      if (set.run() != SQLITE_DONE) check(sqlite3_errmsg(db), "meta");
    }
  }
  check(exec_sql(db, "COMMIT"), "commit");
  sqlite3_close(db);
}

}  // namespace eacgm
