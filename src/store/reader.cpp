// Read-only access to a recording, with a clear error for files that are not recordings.
#include "store/reader.h"

#include <sqlite3.h>

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {

RecordingReader::RecordingReader(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail("cannot open recording {}: no such file (record one with: eacgm record -o {} -- CMD)",
         path, path);
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    fail("cannot open recording {}: {}", path, msg);
  }
  sqlite3_busy_timeout(db_, 5000);
  try {  // a constructor that throws runs no destructor: the connection is closed here
    if (!has_table("meta"))
      fail("{} is not an eacgm recording (no meta table; was it written by eacgm record?)", path);
    query("SELECT key, value FROM meta", [this](Statement& s) {
      meta_.emplace(std::string(s.text_at(0)), std::string(s.text_at(1)));
    });
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

RecordingReader::~RecordingReader() { sqlite3_close(db_); }

std::string RecordingReader::meta_or(const std::string& key, const std::string& fallback) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? fallback : it->second;
}

int64_t RecordingReader::meta_ns(const std::string& key) const {
  auto it = meta_.find(key);
  if (it == meta_.end()) return 0;
  const std::string& v = it->second;
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec == std::errc::result_out_of_range) return v.starts_with('-') ? 0 : kMaxRecordedNs;
  if (ec != std::errc() || end != v.data() + v.size() || v.empty())
    fail("{}: its meta '{}' is '{}', not a whole number of nanoseconds (the file was damaged or "
         "edited; record again)",
         path_, key, v.substr(0, 40));
  return std::clamp<int64_t>(n, 0, kMaxRecordedNs);
}

int64_t RecordingReader::monotonic_to_realtime_ns() const {
  return meta_ns("monotonic_to_realtime_ns");
}

bool RecordingReader::has_table(const std::string& name) const {
  sqlite3_stmt* s = nullptr;
  bool found = false;
  // "file is not a database" surfaces here for arbitrary files
  int rc = sqlite3_prepare_v2(
      db_, "SELECT 1 FROM sqlite_master WHERE name = ?1 AND type IN ('table','view')", -1, &s,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(db_);
    sqlite3_finalize(s);
    if (msg.find("not a database") != std::string::npos)
      fail("{} is not an eacgm recording (not an SQLite file)", path_);
    fail("cannot read {}: {}", path_, msg);
  }
  sqlite3_bind_text(s, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) found = true;
  std::string msg = sqlite3_errmsg(db_);
  sqlite3_finalize(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    if (msg.find("not a database") != std::string::npos)
      fail("{} is not an eacgm recording (not an SQLite file)", path_);
    fail("cannot read {}: {}", path_, msg);
  }
  return found;
}

std::string RecordingReader::columns_or(const std::string& table,
                                        const std::vector<std::string>& columns,
                                        const std::string& fallback) const {
  std::set<std::string> present;
  query("SELECT name FROM pragma_table_info('" + table + "')",
        [&](Statement& s) { present.emplace(s.text_at(0)); });
  std::string out;
  for (const auto& c : columns) out += (out.empty() ? "" : ", ") + (present.count(c) ? c : fallback);
  return out;
}

void RecordingReader::query(const std::string& sql,
                            const std::function<void(Statement&)>& row) const {
  Statement s(db_, sql);
  while (s.step()) row(s);
}

}  // namespace eacgm
