// Small RAII helpers over the SQLite C API, shared by the recording writer and readers.
#pragma once
#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <memory>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace eacgm {

// 2^62 ns, 146 years: no time or duration eacgm records comes near it (and two of them add up
// without overflow).
inline constexpr int64_t kMaxRecordedNs = (int64_t(1) << 62) - 1;

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) !=
        SQLITE_OK)
      fail("recording query failed: {} (in: {})", sqlite3_errmsg(db), sql);
    params_ = sqlite3_bind_parameter_count(stmt_);
    bound_before_.assign(size_t(params_ + 63) / 64, 0);
    bound_now_.assign(bound_before_.size(), 0);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind(int i, int64_t v) {
    mark(i);
    sqlite3_bind_int64(stmt_, i, v);
  }
  void bind(int i, std::string_view v) {
    mark(i);
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void bind_null(int i) { sqlite3_bind_null(stmt_, i); }
  void bind_double(int i, double v) {
    mark(i);
    sqlite3_bind_double(stmt_, i, v);
  }
  // Runs an insert/update; returns the SQLite result code (SQLITE_DONE on success). A parameter
  // not bound since the last run is NULL, as after sqlite3_clear_bindings, but only those the
  // last run had bound are reset: clearing all of a 20-column insert's parameters each row was
  // ~5% of the recorder's writer, and binding NULL to each absent one of a multi-row insert's
  // 160 ~12%.
  int run() {
    for (size_t w = 0; w < bound_now_.size(); ++w) {
      uint64_t stale = bound_before_[w] & ~bound_now_[w];
      for (int i = int(w) * 64 + 1; stale; ++i, stale >>= 1)
        if (stale & 1) sqlite3_bind_null(stmt_, i);
      bound_before_[w] = bound_now_[w];
      bound_now_[w] = 0;
    }
    int rc = sqlite3_step(stmt_);
    sqlite3_reset(stmt_);
    return rc;
  }
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("reading the recording failed: {}", sqlite3_errmsg(db_));
    return false;
  }
  int64_t int_at(int col) const { return sqlite3_column_int64(stmt_, col); }
  // A time or duration (ns): what eacgm writes lies in 0..kMaxRecordedNs; anything else is a
  // damaged or edited recording, read as the nearest bound so that sums and differences of two
  // such values cannot overflow.
  int64_t ns_at(int col) const { return std::clamp<int64_t>(int_at(col), 0, kMaxRecordedNs); }
  double double_at(int col) const { return sqlite3_column_double(stmt_, col); }
  bool null_at(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string_view text_at(int col) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string_view(p, sqlite3_column_bytes(stmt_, col)) : std::string_view();
  }
  sqlite3_stmt* get() { return stmt_; }

 private:
  // a bit per parameter: bound (not NULL) since the last run, and in the last run
  void mark(int i) {
    if (i >= 1 && i <= params_) bound_now_[size_t(i - 1) / 64] |= uint64_t(1) << ((i - 1) % 64);
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int params_ = 0;
  std::vector<uint64_t> bound_before_, bound_now_;
};

// Statements prepared once per connection and reused (each run() resets them): the writer
// flushes ten times a second and would otherwise compile every INSERT again at each flush.
// Destroy before closing the connection.
class Statements {
 public:
  explicit Statements(sqlite3* db) : db_(db) {}
  Statement& operator()(std::string_view sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end())
      it = cache_.emplace(std::string(sql), std::make_unique<Statement>(db_, sql)).first;
    return *it->second;
  }
  sqlite3* db() const { return db_; }

 private:
  sqlite3* db_;
  std::map<std::string, std::unique_ptr<Statement>, std::less<>> cache_;
};

// Runs SQL without results; returns "" or the error text.
inline std::string exec_sql(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) == SQLITE_OK) return {};
  std::string text = err ? err : sqlite3_errmsg(db);
  sqlite3_free(err);
  return text;
}

}  // namespace eacgm
