// The anomalies table, written in place into an existing recording.
#include "store/anomalies.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>

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

namespace {

// The length of the unit that follows a number at s[i] (after one optional space), 0 if none.
size_t unit_after(std::string_view s, size_t i) {
  size_t at = i < s.size() && s[i] == ' ' ? i + 1 : i;
  static constexpr std::string_view units[] = {"KiB", "MiB", "GiB", "ns", "us", "ms",
                                               "MB",  "GB",  "s",   "%",  "x",  "B"};
  for (std::string_view u : units) {
    if (s.substr(at, u.size()) != u) continue;
    size_t end = at + u.size();
    if (end < s.size() && std::isalnum(static_cast<unsigned char>(s[end]))) continue;
    return end - i;
  }
  return 0;
}

}  // namespace

std::vector<CauseGroup> group_causes(const std::vector<std::pair<std::string, size_t>>& counts) {
  struct Acc {
    size_t n = 0;
    std::vector<std::pair<double, std::string>> lo, hi;  // each measurement as written
  };
  std::map<std::string, Acc> by_kind;  // the cause with \x01 for each measurement
  for (const auto& [cause, n] : counts) {
    std::string kind;
    std::vector<std::pair<double, std::string>> values;
    std::string_view c = cause;
    for (size_t i = 0; i < c.size();) {
      bool starts = std::isdigit(static_cast<unsigned char>(c[i])) &&
                    (i == 0 || !std::isalnum(static_cast<unsigned char>(c[i - 1])));
      size_t j = i;
      if (starts) {
        while (j < c.size() && std::isdigit(static_cast<unsigned char>(c[j]))) ++j;
        if (j + 1 < c.size() && c[j] == '.' && std::isdigit(static_cast<unsigned char>(c[j + 1])))
          for (++j; j < c.size() && std::isdigit(static_cast<unsigned char>(c[j]));) ++j;
      }
      size_t unit = starts ? unit_after(c, j) : 0;
      if (unit == 0) {
        kind += c[i++];
        continue;
      }
      std::string number(c.substr(i, j - i));
      values.emplace_back(std::stod(number), number);
      kind += '\x01';
      kind.append(c.substr(j, unit));
      i = j + unit;
    }
    Acc& a = by_kind[kind];
    if (a.n == 0) a.lo = a.hi = values;
    a.n += n;
    for (size_t k = 0; k < values.size() && k < a.lo.size(); ++k)
      a.lo[k] = std::min(a.lo[k], values[k]), a.hi[k] = std::max(a.hi[k], values[k]);
  }
  std::vector<CauseGroup> out;
  for (const auto& [kind, a] : by_kind) {
    CauseGroup g{"", a.n};
    size_t k = 0;
    for (char ch : kind) {
      if (ch != '\x01') {
        g.cause += ch;
        continue;
      }
      // the number as it was written, or the range of them
      g.cause += a.lo[k].first == a.hi[k].first ? a.lo[k].second
                                                : a.lo[k].second + "-" + a.hi[k].second;
      ++k;
    }
    out.push_back(std::move(g));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const CauseGroup& x, const CauseGroup& y) { return x.count > y.count; });
  return out;
}

}  // namespace eacgm
