// The anomalies table, written in place into an existing recording.
#include "store/anomalies.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {

namespace {
std::string us_text(double us) {
  if (us >= 1e6) return fmt::format("{:.3g} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.3g} ms", us / 1e3);
  return fmt::format("{:.3g} us", us);
}

std::string bytes_text(double b) {
  if (b >= 1 << 30) return fmt::format("{:.3g} GiB", b / double(1 << 30));
  if (b >= 1 << 20) return fmt::format("{:.3g} MiB", b / double(1 << 20));
  if (b >= 1 << 10) return fmt::format("{:.3g} KiB", b / double(1 << 10));
  return fmt::format("{:.0f} B", b);
}

// The window features' names in words and units.
const std::map<std::string, std::pair<const char*, const char*>>& window_features_named() {
  static const std::map<std::string, std::pair<const char*, const char*>> named = {
      {"runq_wait_ms_per_s", {"run-queue wait", " ms/s"}},
      {"runq_waits_per_s", {"run-queue waits", "/s"}},
      {"involuntary_switches_per_s", {"preemptions", "/s"}},
      {"cpu_cores", {"CPU", " cores"}},
      {"socket_mb_per_s", {"socket traffic", " MB/s"}},
      {"block_mb_per_s", {"block I/O", " MB/s"}},
      {"tcp_retransmits_per_s", {"TCP retransmits", "/s"}},
      {"page_faults_per_s", {"page faults", "/s"}},
      {"reclaim_ms_per_s", {"memory reclaim", " ms/s"}},
      {"pagein_mb_per_s", {"page-ins", " MB/s"}},
      {"nic_mb_per_s", {"NIC traffic", " MB/s"}},
      {"gpu_util_pct", {"GPU utilization", "%"}},
      {"gpu_mem_gib", {"GPU memory", " GiB"}},
      {"gpu_power_w", {"GPU power", " W"}},
      {"gpu_temp_c", {"GPU temperature", " C"}},
      {"gpu_sm_clock_mhz", {"SM clock", " MHz"}},
      {"gpu_pcie_mb_per_s", {"PCIe traffic", " MB/s"}},
      {"gpu_throttled", {"GPU throttled", ""}},
      {"gpu_idle_pct", {"GPU idle", "%"}}};
  return named;
}
}  // namespace

namespace {
// One feature in words, in parts: "run-queue wait 458 ms/s (usual 3 ms/s)" is {"run-queue wait
// 458 ms/s (usual 3 ms/s)", "458 ms/s", "3 ms/s"}.
struct Described {
  std::string text, value, usual;
};

Described describe_parts(const std::string& f, double value, double usual) {
  auto pair = [&](const std::string& what, auto text) {
    Described d{"", text(value), text(usual)};
    d.text = fmt::format("{} {} (usual {})", what, d.value, d.usual);
    return d;
  };
  auto rate = [](const char* unit) {  // 3 significant digits, but whole numbers from 100 up
    return [unit](double v) {
      return std::abs(v) >= 100 ? fmt::format("{:.0f}{}", v, unit) : fmt::format("{:.3g}{}", v, unit);
    };
  };
  if (f == "log_duration_us") return pair("took", us_text);
  if (f == "log2_bytes") return pair("size", bytes_text);
  if (f == "log_straggler_wait_10us") return pair("waited for a late rank", us_text);
  if (f.ends_with("_call_log_duration_us")) return pair(feature_title(f) + " took", us_text);
  if (f.ends_with("_calls_per_s")) return pair(feature_title(f), rate("/s"));
  if (f == "gpu_idle_pct") {  // "GPU idle 62% of the window (usual 8%)"
    Described d{"", rate("%")(value), rate("%")(usual)};
    d.text = fmt::format("GPU idle {} of the window (usual {})", d.value, d.usual);
    return d;
  }
  if (auto it = window_features_named().find(f); it != window_features_named().end())
    return pair(it->second.first, rate(it->second.second));
  return pair(f, rate(""));
}
}  // namespace

std::string describe_feature(const std::string& f, double value, double usual) {
  return describe_parts(f, value, usual).text;
}

std::string describe_features(const std::vector<FeatureValue>& features) {
  std::string out, first;
  for (const auto& f : features) {
    Described d = describe_parts(f.feature, f.value, f.usual);
    if (first.empty()) first = d.text;
    if (d.value == d.usual) continue;
    out += (out.empty() ? "" : ", ") + d.text;
  }
  return out.empty() ? first : out;
}

std::string feature_title(const std::string& f) {
  if (f.ends_with("_calls_per_s") || f.ends_with("_call_log_duration_us"))
    return f.substr(0, f.find('_')) + " calls";
  auto it = window_features_named().find(f);
  return it != window_features_named().end() ? it->second.first : f;
}

std::string features_text(std::string_view json_text, size_t n) {
  auto f = nlohmann::json::parse(json_text, nullptr, false);
  if (!f.is_array()) return std::string(json_text.substr(0, 200));
  std::vector<FeatureValue> measured;
  std::string contributions;  // (recordings before the values were stored)
  for (const auto& e : f) {
    if (n-- == 0) break;
    // (a contribution is null where no model scored the anomaly)
    if (!e.is_array() || e.size() < 2 || !e[0].is_string() ||
        !(e[1].is_number() || e[1].is_null()))
      continue;
    if (e.size() >= 4 && e[2].is_number() && e[3].is_number())
      measured.push_back({e[0].get<std::string>(), e[2].get<double>(), e[3].get<double>()});
    else if (e[1].is_number())
      contributions += fmt::format("{}{}={:.1f}", contributions.empty() ? "" : " ",
                                   e[0].get<std::string>(), e[1].get<double>());
  }
  std::string out = describe_features(measured);
  if (!contributions.empty()) out += (out.empty() ? "" : ", ") + contributions;
  return out;
}

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
