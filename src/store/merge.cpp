// eacgm merge (store/merge.h): the copy is SQL (each input attached read-only, its rows
// inserted with their times shifted and pids renumbered), the clock fix is computed first from
// the inputs' completed c10d collectives.
#include "store/merge.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "store/rows.h"  // is_collective
#include "store/reader.h"
#include "store/recording.h"
#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {
namespace {

int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + std::ptrdiff_t(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  int64_t below = *std::max_element(v.begin(), mid);  // an even count: the middle two's mean
  return below + (*mid - below) / 2;
}

// What merge needs to know of one input before copying it.
struct Input {
  std::string path, host;
  int64_t to_real = 0;  // its CLOCK_MONOTONIC + this = wall clock
  int64_t start = 0, end = 0;
  std::set<int64_t> pids, gpus;
  std::set<std::string> jobs;
  std::vector<int64_t> ranks;
  int64_t max_stack = 0;
  int64_t max_native_stack = 0;
  std::map<std::string, std::string> meta;
};

Input read_input(const std::string& path) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail("{} is not a regular file: merge reads recordings written by eacgm record", path);
  RecordingReader rec(path);  // a clear error for what is not a recording
  Input in;
  in.path = path;
  in.meta = rec.meta();
  in.host = rec.meta_or("hostname", "");
  auto number = [&](const char* key) -> int64_t {
    std::string v = rec.meta_or(key, "");
    char* end = nullptr;
    long long x = v.empty() ? 0 : strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0')
      fail(
          "{} has no valid {} in its meta table (a recording cut short, or from an eacgm "
          "older than merge): it cannot be placed on the others' clock",
          path, key);
    return x;
  };
  in.to_real = number("monotonic_to_realtime_ns");
  in.start = number("start_monotonic_ns");
  std::string end = rec.meta_or("end_monotonic_ns", "");
  in.end = end.empty() ? in.start : number("end_monotonic_ns");
  rec.query("SELECT DISTINCT pid FROM processes",
            [&](Statement& s) { in.pids.insert(s.int_at(0)); });
  if (rec.has_table("gpu_devices"))
    rec.query("SELECT gpu FROM gpu_devices", [&](Statement& s) { in.gpus.insert(s.int_at(0)); });
  if (rec.has_table("python_stacks"))
    rec.query("SELECT COALESCE(max(id), 0) FROM python_stacks",
              [&](Statement& s) { in.max_stack = s.int_at(0); });
  if (rec.has_table("native_stacks"))
    rec.query("SELECT COALESCE(max(id), 0) FROM native_stacks",
              [&](Statement& s) { in.max_native_stack = s.int_at(0); });
  std::string job = rec.column_or("processes", "job_id", "NULL");
  std::string rank = rec.column_or("processes", "rank", "NULL");
  rec.query("SELECT DISTINCT " + job + ", " + rank + " FROM processes", [&](Statement& s) {
    if (!s.null_at(0)) in.jobs.insert(std::string(s.text_at(0)));
    if (!s.null_at(1)) in.ranks.push_back(s.int_at(1));
  });
  std::sort(in.ranks.begin(), in.ranks.end());
  in.ranks.erase(std::unique(in.ranks.begin(), in.ranks.end()), in.ranks.end());
  return in;
}

// Completed c10d collectives (their durations run to completion; NCCL rows end at enqueue
// and say nothing of when the collective finished), per (pid, communicator, name).
void read_streams(const Input& in, size_t index, int64_t shift,
                  std::vector<CollectiveStream>& out) {
  RecordingReader rec(in.path);
  if (!rec.has_table("comm_calls")) return;
  std::map<std::tuple<int64_t, int64_t, std::string>, size_t> at;
  rec.query(
      "SELECT pid, comm, name, rank, nranks, ts_ns + dur_ns, ts_ns FROM comm_calls WHERE ret = 0 AND "
      "rank >= 0 AND nranks > 1 AND instr(name, ':') > 0 ORDER BY ts_ns",
      [&](Statement& s) {
        std::string name(s.text_at(2));
        if (!is_collective(name)) return;
        auto key = std::make_tuple(s.int_at(0), s.int_at(1), name);
        auto [it, fresh] = at.try_emplace(key, out.size());
        if (fresh) out.push_back({index, name, s.int_at(3), s.int_at(4), {}});
        out[it->second].ends_ns.push_back(s.int_at(5) + shift);
        out[it->second].starts_ns.push_back(s.int_at(6) + shift);
      });
}

// The output file name's URI for ATTACH: percent-encoded where SQLite's URI parser would
// read a character otherwise.
std::string read_only_uri(const std::string& path) {
  std::string abs = std::filesystem::absolute(path).string();
  std::string uri = "file:";
  for (unsigned char c : abs) {
    if (c == '%' || c == '?' || c == '#' || c < 0x21 || c > 0x7e)
      uri += fmt::format("%{:02X}", c);
    else
      uri += char(c);
  }
  return uri + "?mode=ro";
}

void exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    fail("merge failed: {} (in: {})", msg, sql.substr(0, 120));
  }
}

std::vector<std::string> columns(sqlite3* db, const std::string& schema, const std::string& t) {
  std::vector<std::string> out;
  Statement s(db, "PRAGMA " + schema + ".table_info(" + t + ")");
  while (s.step()) out.emplace_back(s.text_at(1));
  return out;
}

std::string quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

}  // namespace

namespace {

// The collectives every rank of which is one stream with as many instances as the others:
// per group, its ranks' streams by rank.
std::vector<std::vector<const CollectiveStream*>> matched_groups(
    const std::vector<CollectiveStream>& streams, size_t inputs) {
  // instances: per matched group, the streams of its ranks 0..nranks-1
  std::map<std::pair<std::string, int64_t>, std::map<int64_t, std::vector<size_t>>> groups;
  for (size_t i = 0; i < streams.size(); ++i)
    if (streams[i].input < inputs) groups[{streams[i].name, streams[i].nranks}][streams[i].rank].push_back(i);
  std::vector<std::vector<const CollectiveStream*>> matched;
  for (const auto& [key, ranks] : groups) {
    if (int64_t(ranks.size()) != key.second) continue;
    std::vector<const CollectiveStream*> group;
    bool ok = true;
    for (int64_t r = 0; r < key.second && ok; ++r) {
      auto it = ranks.find(r);
      ok = it != ranks.end() && it->second.size() == 1;
      if (!ok) break;
      const CollectiveStream& s = streams[it->second[0]];
      ok = group.empty() || s.ends_ns.size() == group[0]->ends_ns.size();
      group.push_back(&s);
    }
    if (!ok || group[0]->ends_ns.empty()) continue;
    matched.push_back(std::move(group));
  }
  return matched;
}

// What the unplaced inputs saw of the placed ones, instance by instance: distances of their
// ends from the placed ranks' median end, and bounds from the starts where every rank has one.
struct Seen {
  std::vector<int64_t> distances, lows, highs;
  bool starts = true;  // every instance had its starts
};

void see_group(const std::vector<const CollectiveStream*>& group, const std::vector<bool>& placed,
               const std::vector<ClockFix>& fixes, std::vector<Seen>& seen) {
  std::map<size_t, std::pair<int64_t, int64_t>> own;  // input -> (max start, min end)
  bool have_starts = true;
  for (const auto* r : group) have_starts &= r->starts_ns.size() == r->ends_ns.size();
  for (size_t k = 0; k < group[0]->ends_ns.size(); ++k) {
    std::vector<int64_t> reference;
    int64_t first_end = INT64_MAX, last_start = INT64_MIN;
    for (const auto* r : group)
      if (placed[r->input]) {
        int64_t shift = fixes[r->input].offset_ns;
        reference.push_back(r->ends_ns[k] + shift);
        first_end = std::min(first_end, r->ends_ns[k] + shift);
        if (have_starts) last_start = std::max(last_start, r->starts_ns[k] + shift);
      }
    if (reference.empty()) continue;
    int64_t at = median(reference);
    own.clear();
    for (const auto* r : group) {
      if (placed[r->input]) continue;
      seen[r->input].distances.push_back(at - r->ends_ns[k]);
      auto [it, fresh] = own.try_emplace(r->input, INT64_MIN, INT64_MAX);
      if (have_starts) it->second.first = std::max(it->second.first, r->starts_ns[k]);
      it->second.second = std::min(it->second.second, r->ends_ns[k]);
    }
    for (const auto& [input, mine] : own) {
      if (!have_starts) {
        seen[input].starts = false;
        continue;
      }
      seen[input].lows.push_back(last_start - mine.second);
      seen[input].highs.push_back(first_end - mine.first);
    }
  }
}

// An input's offset from what it saw: the median distance, narrowed to the bounds where the
// starts give them.
void fix_from(Seen& s, ClockFix& f) {
  f.offset_ns = median(s.distances);
  f.instances = s.distances.size();
  if (s.starts && !s.lows.empty()) {
    // the 0.5% tightest bounds on each side are set aside (a stray timestamp)
    size_t skip = s.lows.size() / 200;
    std::nth_element(s.lows.begin(), s.lows.begin() + std::ptrdiff_t(skip), s.lows.end(),
                     std::greater<>());
    std::nth_element(s.highs.begin(), s.highs.begin() + std::ptrdiff_t(skip), s.highs.end());
    int64_t low = s.lows[skip], high = s.highs[skip];
    if (low <= high) {
      f.offset_ns = low + (high - low) / 2;
      f.bound_ns = (high - low) / 2;
    }
  }
  std::vector<int64_t> off;
  for (int64_t d : s.distances) off.push_back(std::abs(d - f.offset_ns));
  f.residual_ns = median(off);
}

}  // namespace

std::vector<ClockFix> refine_clocks(const std::vector<CollectiveStream>& streams, size_t inputs) {
  std::vector<ClockFix> fixes(inputs);
  if (inputs == 0) return fixes;
  std::vector<std::vector<const CollectiveStream*>> matched = matched_groups(streams, inputs);
  // place inputs one round at a time: each unplaced input that shares instances with placed
  // ones is placed against them
  std::vector<bool> placed(inputs, false);
  placed[0] = true;
  for (bool progress = true; progress;) {
    progress = false;
    std::vector<Seen> seen(inputs);
    for (const auto& group : matched) see_group(group, placed, fixes, seen);
    for (size_t i = 0; i < inputs; ++i) {
      if (placed[i] || seen[i].distances.empty()) continue;
      fix_from(seen[i], fixes[i]);
      placed[i] = true;
      progress = true;
    }
  }
  return fixes;
}

namespace {

// The arguments' checks, before any file is read: two or more distinct inputs, an output that
// is none of them and is a regular file eacgm may replace (with force) or nothing.
void check_merge_arguments(const std::vector<std::string>& inputs, const std::string& output,
                           const MergeOptions& options) {
  if (inputs.size() < 2)
    throw UsageError(
        "merge needs two or more recordings, e.g. eacgm merge a.eacgm.db "
        "b.eacgm.db -o job.eacgm.db");
  if (output.empty())
    throw UsageError("-o '': name the merged recording, e.g. -o job.eacgm.db");
  std::set<std::string> seen;
  for (const auto& p : inputs) {
    std::error_code ec;
    std::string key = std::filesystem::weakly_canonical(p, ec).string();
    if (!seen.insert(key.empty() ? p : key).second)
      throw UsageError(fmt::format("{} is given twice: merge each recording once", p));
  }
  std::error_code ec;
  auto out_status = std::filesystem::symlink_status(output, ec);
  if (std::filesystem::exists(out_status)) {
    if (!std::filesystem::is_regular_file(out_status))
      fail(
          "output {} exists and is not a regular file: eacgm replaces only files it wrote "
          "(choose another name)",
          output);
    if (!options.force)
      fail("output {} already exists (use --force to overwrite, or choose another name)", output);
  }
  if (seen.count(std::filesystem::weakly_canonical(output, ec).string()))
    throw UsageError(fmt::format("output {} is one of the inputs: choose another name", output));
}

// One job: the job ids the launchers gave must agree (unless any_job).
void check_one_job(const std::vector<Input>& in, const MergeOptions& options, MergeResult& result) {
  std::set<std::string> jobs;
  for (const auto& i : in) jobs.insert(i.jobs.begin(), i.jobs.end());
  if (jobs.size() > 1 && !options.any_job) {
    std::string which;
    for (const auto& i : in)
      for (const auto& j : i.jobs)
        which += fmt::format("{}{} is job {}", which.empty() ? "" : ", ", i.path, j);
    fail(
        "these recordings are of different jobs ({}): merge the recordings of one job, or "
        "pass --any-job to merge them anyway",
        which);
  }
  if (jobs.empty())
    result.notes.push_back(
        "no recording names a job (no TORCHELASTIC_RUN_ID, SLURM_JOB_ID or "
        "Open MPI job id in the ranks' environment): merged as one job "
        "without that check");
}

// Each input's host (names made distinct), pid base and clock: the wall-clock offsets first,
// then the collectives.
void place_hosts(std::vector<Input>& in, bool pids_clash, MergeResult& result) {
  std::map<std::string, int> host_count;
  for (auto& i : in) {
    if (i.host.empty()) i.host = "host";
    if (int n = ++host_count[i.host]; n > 1) i.host += fmt::format("#{}", n);
  }
  std::vector<CollectiveStream> streams;
  for (size_t i = 0; i < in.size(); ++i) {
    MergedHost h;
    h.file = in[i].path;
    h.host = in[i].host;
    h.processes = in[i].pids.size();
    h.ranks = in[i].ranks;
    h.pid_base = pids_clash ? int64_t(i) * 10'000'000 : 0;  // pids stay below 2^22
    h.wall_offset_ns = in[i].to_real - in[0].to_real;
    h.job = in[i].jobs.empty() ? "" : *in[i].jobs.begin();
    result.hosts.push_back(h);
    read_streams(in[i], i, h.wall_offset_ns, streams);
  }
  std::vector<ClockFix> fixes = refine_clocks(streams, in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    result.hosts[i].fix = fixes[i];
    if (i > 0 && fixes[i].instances == 0)
      result.notes.push_back(fmt::format(
          "{}: no completed c10d collective is shared with the other hosts, so its clock is "
          "placed by the wall clocks alone (as good as their NTP sync)",
          in[i].path));
  }
}

// Where an input's rows go: its clock shift, and the bases added to its ids where they clash.
struct Placement {
  const MergedHost& host;
  int64_t shift = 0, gpu_base = 0, stack_base = 0, native_base = 0;
};

// The expression that copies column `c` of table `t` from the attached input (`has`: its columns).
std::string column_expression(const std::string& t, const std::string& c,
                              const std::set<std::string>& has, const Placement& p) {
  const MergedHost& h = p.host;
  if (t == "processes" && c == "host") return quote(h.host);
  if (t == "processes" && c == "host_pid") return h.pid_base ? "pid" : "NULL";
  if (!has.count(c)) return "NULL";
  // times on the host's clock (durations such as dur_ns and enqueue_ns are not)
  if (c == "ts_ns" || c == "start_ns" || c == "end_ns" || c == "gpu_start_ns" ||
      c == "stall_end_ns")
    return fmt::format("{} + {}", c, p.shift);
  if (c == "pid" || c == "ppid")
    return fmt::format("CASE WHEN {0} > 0 THEN {0} + {1} ELSE {0} END", c, h.pid_base);
  if (t == "host_samples" && c == "name")  // a host's NICs and disks: "node-b:lo"
    return fmt::format("CASE WHEN scope = 'process' THEN name ELSE {} || ':' || name END",
                       quote(h.host));
  if (t == "host_samples" && c == "id")
    return fmt::format("CASE WHEN scope = 'process' THEN id + {} ELSE id END", h.pid_base);
  if (c == "py_stack")
    return fmt::format("CASE WHEN py_stack > 0 THEN py_stack + {} ELSE py_stack END",
                       p.stack_base);
  if (t == "python_stacks" && c == "id") return fmt::format("id + {}", p.stack_base);
  if (c == "native_stack")
    return fmt::format("CASE WHEN native_stack > 0 THEN native_stack + {} ELSE native_stack END",
                       p.native_base);
  if (t == "native_stacks" && c == "id") return fmt::format("id + {}", p.native_base);
  if (c == "gpu") return fmt::format("gpu + {}", p.gpu_base);
  return c;
}

// Copies one input's rows of `tables` into the merged file, in one transaction. Returns rows.
uint64_t copy_input(sqlite3* db, const std::vector<std::string>& tables, const Input& input,
                    const Placement& p) {
  {
    std::string uri = read_only_uri(input.path);  // bound without a copy: kept alive
    Statement attach(db, "ATTACH DATABASE ?1 AS src");
    attach.bind(1, uri);
    if (attach.run() != SQLITE_DONE) fail("cannot read {}: {}", input.path, sqlite3_errmsg(db));
  }
  uint64_t rows = 0;
  exec(db, "BEGIN");  // one transaction per input: an attached file is detached outside one
  for (const auto& t : tables) {
    std::vector<std::string> have = columns(db, "src", t);
    if (have.empty()) continue;  // an older recording without this table
    std::set<std::string> has(have.begin(), have.end());
    std::string cols, exprs;
    for (const auto& c : columns(db, "main", t)) {
      cols += (cols.empty() ? "" : ", ") + c;
      exprs += (exprs.empty() ? "" : ", ") + column_expression(t, c, has, p);
    }
    exec(db, fmt::format("INSERT INTO main.{0}({1}) SELECT {2} FROM src.{0}", t, cols, exprs));
    rows += uint64_t(sqlite3_changes(db));
  }
  exec(db, "COMMIT");
  exec(db, "DETACH DATABASE src");
  return rows;
}

// The merged recording's meta: the job as a whole, and where each host's rows came from.
std::map<std::string, std::string> merged_meta(const std::vector<Input>& in,
                                               const MergeResult& result) {
  std::map<std::string, std::string> meta;
  auto sum = [&](const char* key) {
    int64_t total = 0;
    bool any = false;
    for (const auto& i : in)
      if (auto it = i.meta.find(key); it != i.meta.end()) {
        total += strtoll(it->second.c_str(), nullptr, 10);
        any = true;
      }
    if (any) meta[key] = std::to_string(total);
  };
  for (const char* key : {"events", "dropped_events", "unmatched_returns", "nesting_overflows",
                          "malformed_records", "c10d_incomplete", "python_calls", "cpu_samples"})
    sum(key);
  for (const char* key : {"eacgm_version", "command", "layers", "layers_requested",
                          "sample_interval_ms", "torch_version", "sample_hz"})
    if (auto it = in[0].meta.find(key); it != in[0].meta.end()) meta[key] = it->second;
  std::set<std::string> layers;
  for (const auto& i : in)
    if (auto it = i.meta.find("layers"); it != i.meta.end()) {
      std::string l = it->second;
      for (size_t a = 0; a <= l.size();) {
        size_t b = l.find(',', a);
        if (b == std::string::npos) b = l.size();
        if (b > a) layers.insert(l.substr(a, b - a));
        a = b + 1;
      }
    }
  if (!layers.empty()) {
    std::string joined;
    for (const auto& l : layers) joined += (joined.empty() ? "" : ",") + l;
    meta["layers"] = joined;
  }
  int64_t start = INT64_MAX, end = INT64_MIN;
  std::string hosts, files, offsets;
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t shift = result.hosts[i].wall_offset_ns + result.hosts[i].fix.offset_ns;
    start = std::min(start, in[i].start + shift);
    end = std::max(end, in[i].end + shift);
    hosts += (i ? "," : "") + result.hosts[i].host;
    files += (i ? "\n" : "") + in[i].path;
    offsets += fmt::format("{}{}={}", i ? "," : "", result.hosts[i].host, shift);
  }
  meta["hostname"] = hosts;
  meta["merged_hosts"] = hosts;
  meta["merged_from"] = files;
  meta["clock_offsets_ns"] = offsets;
  int64_t worst = -1, widest = -1;
  for (const auto& h : result.hosts) {
    worst = std::max(worst, h.fix.residual_ns);
    widest = std::max(widest, h.fix.bound_ns);
  }
  meta["clock_residual_ns"] = std::to_string(worst);
  meta["clock_bound_ns"] = std::to_string(widest);
  meta["monotonic_to_realtime_ns"] = std::to_string(in[0].to_real);
  meta["start_monotonic_ns"] = std::to_string(start);
  meta["end_monotonic_ns"] = std::to_string(end);
  meta["start_realtime_ns"] = std::to_string(start + in[0].to_real);
  if (!result.hosts[0].job.empty()) meta["job_id"] = result.hosts[0].job;
  return meta;
}

// An empty `path` of eacgm's (mode 0600), replacing what an interrupted merge left there.
void create_fresh(const std::string& path) {
  std::error_code ec;
  if (auto t = std::filesystem::symlink_status(path, ec); std::filesystem::exists(t)) {
    if (!std::filesystem::is_regular_file(t))
      fail("{} exists and is not a regular file: merge writes there first (move it away)", path);
    std::filesystem::remove(path, ec);  // what an interrupted merge left
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create {}: {}", path, strerror(errno));
  ::close(fd);
}

}  // namespace

MergeResult merge_recordings(const std::vector<std::string>& inputs, const std::string& output,
                             const MergeOptions& options) {
  check_merge_arguments(inputs, output, options);
  std::vector<Input> in;
  for (const auto& p : inputs) in.push_back(read_input(p));
  MergeResult result;
  check_one_job(in, options, result);
  // pids and GPU indices: kept unless two inputs share one
  bool pids_clash = false, gpus_clash = false;
  {
    std::set<int64_t> pids, gpus;
    for (const auto& i : in) {
      for (int64_t p : i.pids) pids_clash |= !pids.insert(p).second;
      for (int64_t g : i.gpus) gpus_clash |= !gpus.insert(g).second;
    }
  }
  place_hosts(in, pids_clash, result);

  // the copy: into a new file beside the output, renamed into place when complete
  std::error_code ec;
  std::string tmp = output + ".merging";
  create_fresh(tmp);
  sqlite3* db = nullptr;
  struct Cleanup {
    std::string path;
    sqlite3*& db;
    bool keep = false;
    ~Cleanup() {
      sqlite3_close(db);
      if (!keep) std::filesystem::remove(path), std::filesystem::remove(path + "-journal");
    }
  } cleanup{tmp, db};
  if (sqlite3_open_v2(tmp.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, nullptr) !=
      SQLITE_OK)
    fail("cannot open {}: {}", tmp, db ? sqlite3_errmsg(db) : "out of memory");
  exec(db, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF");
  exec(db, kRecordingSchema);

  std::vector<std::string> tables;
  {
    Statement s(db,
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN "
                "('meta', 'anomalies')");
    while (s.step()) tables.emplace_back(s.text_at(0));
  }
  int64_t stack_base = 0, native_base = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const MergedHost& h = result.hosts[i];
    Placement p{h, h.wall_offset_ns + h.fix.offset_ns, gpus_clash ? int64_t(i) * 100 : 0,
                stack_base, native_base};
    result.rows += copy_input(db, tables, in[i], p);
    stack_base += in[i].max_stack;
    native_base += in[i].max_native_stack;
  }
  {
    Statement put(db, "INSERT OR REPLACE INTO meta VALUES(?1, ?2)");
    for (const auto& [k, v] : merged_meta(in, result)) {
      put.bind(1, k);
      put.bind(2, v);
      if (put.run() != SQLITE_DONE) fail("merge failed writing meta: {}", sqlite3_errmsg(db));
    }
  }
  if (sqlite3_close(db) != SQLITE_OK) fail("cannot finish {}: {}", tmp, sqlite3_errmsg(db));
  db = nullptr;
  if (std::filesystem::exists(std::filesystem::symlink_status(output, ec)) &&
      !std::filesystem::is_regular_file(std::filesystem::symlink_status(output, ec)))
    fail("output {} appeared meanwhile and is not a regular file: left alone", output);
  std::filesystem::rename(tmp, output, ec);
  if (ec) fail("cannot write {}: {}", output, ec.message());
  cleanup.keep = true;
  return result;
}

}  // namespace eacgm
