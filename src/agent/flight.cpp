// The flight recorder (agent/flight.h).
#include "agent/flight.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <set>
#include <type_traits>

#include "gpu/gpu_samples.h"  // monotonic_now_ns, realtime_now_ns
#include "store/recording.h"
#include "util/error.h"

namespace eacgm {
namespace {

// What a held row takes: its slot in its chunk and the strings it owns.
template <typename T>
uint64_t row_bytes(const T&) {
  return sizeof(T);
}
uint64_t row_bytes(const HostSampleRow& r) {
  return sizeof(HostSampleRow) + r.name.capacity();
}

bool is_flight_file(const std::string& name) {
  return name.rfind("flight-", 0) == 0 && name.ends_with(".eacgm.db");
}

}  // namespace

FlightRecorder::FlightRecorder(FlightOptions options) : o_(std::move(options)) {}

FlightRecorder::~FlightRecorder() {
  if (writer_.joinable()) writer_.join();
}

template <typename T>
void FlightRecorder::keep(const T& row) {
  if (o_.dir.empty()) return;
  Lane<T>& lane = std::get<Lane<T>>(lanes_);
  if (lane.chunks.empty() || lane.last_shared ||
      lane.chunks.back()->rows.size() == kChunkRows<T>) {
    if (lane.spare.empty()) {
      lane.chunks.push_back(std::make_shared<Chunk<T>>());
      lane.chunks.back()->rows.reserve(kChunkRows<T>);
    } else {
      lane.chunks.push_back(std::move(lane.spare.back()));
      lane.spare.pop_back();
    }
    lane.last_shared = false;
  }
  lane.chunks.back()->rows.push_back(row);
  ++held_rows_;
  bytes_ += row_bytes(row);
}

template <typename T>
bool FlightRecorder::evict_front(Lane<T>& lane) {
  while (!lane.chunks.empty()) {
    Chunk<T>& c = *lane.chunks.front();
    if (c.first < c.rows.size()) {
      bytes_ -= row_bytes(c.rows[c.first]);
      ++c.first;
      --held_rows_;
      if (c.first < c.rows.size()) return true;
    }
    // emptied: kept to fill again unless a snapshot being written holds it (it is the only
    // owner once the count reads 1; the fence orders the writer's reads before our writes)
    std::shared_ptr<Chunk<T>> done = std::move(lane.chunks.front());
    lane.chunks.pop_front();
    if (lane.chunks.empty()) lane.last_shared = false;
    if (done.use_count() == 1 && lane.spare.size() < kSpareChunks) {
      std::atomic_thread_fence(std::memory_order_acquire);
      done->rows.clear();
      done->first = 0;
      lane.spare.push_back(std::move(done));
    }
    return true;
  }
  return false;
}

void FlightRecorder::add(const PythonStackFrameRow& r) {
  if (o_.dir.empty()) return;
  stacks_[r.id].push_back(r);
}

void FlightRecorder::add(const ProcessExitRow& r) {
  if (o_.dir.empty()) return;
  exits_[r.pid] = r;
}

void FlightRecorder::set_meta(std::string key, std::string value) {
  for (auto& [k, v] : meta_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  meta_.emplace_back(std::move(key), std::move(value));
}

void FlightRecorder::note_dropped(uint64_t total) {
  if (o_.dir.empty()) return;
  if (dropped_.empty() || dropped_.back().second != total)
    dropped_.emplace_back(monotonic_now_ns(), total);
}

namespace {

// The time of a lane's oldest held row; UINT64_MAX when it holds none.
template <typename Lane>
uint64_t front_ts(const Lane& lane) {
  for (const auto& c : lane.chunks)
    if (c->first < c->rows.size()) return c->rows[c->first].ts_ns;
  return UINT64_MAX;
}

}  // namespace

void FlightRecorder::evict(uint64_t now_ns) {
  uint64_t cutoff = now_ns > o_.seconds_ns ? now_ns - o_.seconds_ns : 0;
  while (dropped_.size() > 1 && dropped_[1].first < cutoff) dropped_.pop_front();
  // older than the held past, lane by lane
  std::apply(
      [&](auto&... lane) {
        ((void)[&] {
          while (front_ts(lane) < cutoff && evict_front(lane)) {
          }
        }(),
         ...);
      },
      lanes_);
  // beyond the memory budget: the oldest rows of any type, the oldest lane's while they are
  // older than the next lane's oldest
  while (bytes_ > o_.max_bytes && held_rows_ > 0) {
    uint64_t oldest = UINT64_MAX, next = UINT64_MAX;
    size_t which = 0, i = 0;
    std::apply(
        [&](const auto&... lane) {
          ((void)[&] {
            uint64_t t = front_ts(lane);
            if (t < oldest) {
              next = oldest;
              oldest = t;
              which = i;
            } else if (t < next) {
              next = t;
            }
            ++i;
          }(),
           ...);
        },
        lanes_);
    if (oldest == UINT64_MAX) break;
    i = 0;
    std::apply(
        [&](auto&... lane) {
          ((void)[&] {
            if (i++ != which) return;
            do {
              if (!evict_front(lane)) break;
            } while (bytes_ > o_.max_bytes && front_ts(lane) <= next);
          }(),
           ...);
        },
        lanes_);
  }
  // processes that ended before the held past are no longer needed to name its rows
  for (auto it = exits_.begin(); it != exits_.end();) {
    if (it->second.end_ns >= cutoff) {
      ++it;
      continue;
    }
    uint32_t pid = it->first;
    processes_.erase(pid);
    std::erase_if(threads_, [pid](const auto& t) { return t.second.pid == pid; });
    it = exits_.erase(it);
  }
  if (stacks_.size() > 100'000) {  // stacks no held call refers to
    std::set<int64_t> used;
    std::apply(
        [&](const auto&... lane) {
          ((void)[&] {
            for (const auto& c : lane.chunks)
              for (size_t i = c->first; i < c->rows.size(); ++i)
                if constexpr (requires { c->rows[i].py_stack; }) used.insert(c->rows[i].py_stack);
          }(),
           ...);
        },
        lanes_);
    std::erase_if(stacks_, [&](const auto& s) { return !used.count(s.first); });
  }
}

std::string FlightRecorder::request(const std::string& reason, uint64_t after_ns) {
  if (o_.dir.empty()) return {};
  uint64_t real = realtime_now_ns();
  time_t secs = time_t(real / 1'000'000'000);
  tm t{};
  gmtime_r(&secs, &t);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &t);
  std::string base = fmt::format("{}/flight-{}-{}", o_.dir, stamp, reason);
  std::string path = base + ".eacgm.db";
  struct stat st {};
  for (int n = 2; lstat(path.c_str(), &st) == 0 || path == writing_ ||
                  std::any_of(pending_.begin(), pending_.end(),
                              [&](const Pending& p) { return p.path == path; });
       ++n)
    path = fmt::format("{}-{}.eacgm.db", base, n);
  pending_.push_back({path, reason, monotonic_now_ns() + after_ns});
  return path;
}

void FlightRecorder::flush() {
  if (o_.dir.empty()) return;
  uint64_t now = monotonic_now_ns();
  evict(now);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->due_ns > now) {
      ++it;
      continue;
    }
    write(*it);
    it = pending_.erase(it);
  }
}

void FlightRecorder::finish() {
  {
    std::lock_guard lock(mu_);
    hurry_ = true;
    sched_param normal{};
    if (writer_tid_) sched_setscheduler(writer_tid_, SCHED_OTHER, &normal);
  }
  for (auto& p : pending_) p.due_ns = 0;
  flush();
  if (writer_.joinable()) writer_.join();
}

std::string FlightRecorder::last_error() const {
  std::lock_guard lock(mu_);
  return error_;
}

std::pair<uint64_t, uint64_t> FlightRecorder::busy() const {
  std::lock_guard lock(mu_);
  return {busy_start_, busy_end_};
}

// A copy of what is held goes to a thread that writes it; one recording at a time (the next
// waits for the last: dumps are rare).
void FlightRecorder::write(const Pending& p) {
  if (writer_.joinable()) writer_.join();
  {
    // a write right after another (two due in one flush) extends its busy time rather than
    // replacing it before the detector saw it
    std::lock_guard lock(mu_);
    uint64_t now = monotonic_now_ns();
    if (!busy_start_ || now - busy_end_ > 5'000'000'000ull) busy_start_ = now;
    busy_end_ = 0;
  }
  std::shared_ptr<Snapshot> c = snapshot(p);
  std::string path = p.path;
  writing_ = path;  // (its file may not be there yet when the next is named)
  writer_ = std::thread([this, c, path] {
    // The lowest priority (Linux: per thread): a recording can wait, the jobs it was written
    // for should not (on a 2-CPU node a normal priority writer took a CPU from them for
    // seconds). SCHED_IDLE, not only nice 19: a job's thread that wakes where a nice-19 thread
    // runs may wait for it to finish its slice (EEVDF lets the current thread run to parity,
    // ~3 ms), and 2-12 ms waits for a CPU are what slow operators look like; one that wakes
    // where a SCHED_IDLE thread runs takes the CPU at once. Failing that, nice 19.
    pthread_setname_np(pthread_self(), "eacgm-flight");  // as top -H and ps -L show it
    const pid_t tid = pid_t(syscall(SYS_gettid));
    sched_param normal{};
    if (sched_setscheduler(0, SCHED_IDLE, &normal) != 0) setpriority(PRIO_PROCESS, id_t(tid), 19);
    {
      // at the agent's stop (finish) a write waits for no idle CPU: on a busy node it could
      // take minutes, and a service manager's stop timeout would cut it
      std::lock_guard lock(mu_);
      writer_tid_ = tid;
      if (hurry_) sched_setscheduler(0, SCHED_OTHER, &normal);
    }
    std::string err = write_snapshot(path, *c);
    retain();
    {
      std::lock_guard lock(mu_);
      error_ = err.empty() ? "" : fmt::format("flight recording {}: {}", path, err);
      busy_end_ = monotonic_now_ns();
      writer_tid_ = 0;
    }
  });
}

// The held rows, processes, threads, devices and stacks, with the recording's own meta.
std::shared_ptr<FlightRecorder::Snapshot> FlightRecorder::snapshot(const Pending& p) {
  auto c = std::make_shared<Snapshot>();
  uint64_t end = monotonic_now_ns();
  uint64_t start = end;
  std::apply(
      [&](auto&... lane) {
        ((void)[&] {
          auto& ranges = std::get<Ranges<typename std::decay_t<decltype(lane)>::Row>>(c->rows);
          for (const auto& k : lane.chunks)
            if (k->first < k->rows.size()) ranges.push_back({k, k->first, k->rows.size()});
          if (!ranges.empty()) {
            const auto& first = ranges.front();
            start = std::min(start, first.chunk->rows[first.begin].ts_ns);
          }
          lane.last_shared = true;
        }(),
         ...);
      },
      lanes_);
  for (const auto& [pid, r] : processes_) c->processes.push_back(r);
  for (const auto& [pid, r] : exits_) c->exits.push_back(r);
  for (const auto& [tid, r] : threads_) c->threads.push_back(r);
  for (const auto& [i, r] : devices_) c->devices.push_back(r);
  for (const auto& [id, frames] : stacks_)
    c->frames.insert(c->frames.end(), frames.begin(), frames.end());
  c->meta = meta_;
  int64_t to_real = 0;
  for (const auto& [k, v] : meta_)
    if (k == "monotonic_to_realtime_ns") to_real = std::stoll(v);
  c->meta.emplace_back("command", fmt::format("eacgm agent: flight recording ({})", p.reason));
  c->meta.emplace_back("flight_reason", p.reason);
  c->meta.emplace_back("start_monotonic_ns", std::to_string(start));
  c->meta.emplace_back("start_realtime_ns", std::to_string(int64_t(start) + to_real));
  c->meta.emplace_back("end_monotonic_ns", std::to_string(end));
  c->meta.emplace_back("recording_state", "complete");  // the agent's own is "recording"
  // lost while these rows were held: the total now less the total before the first of them
  uint64_t lost = dropped_.empty() ? 0
                  : dropped_.front().first < start
                      ? dropped_.back().second - dropped_.front().second
                      : dropped_.back().second;
  c->meta.emplace_back("dropped_events", std::to_string(lost));
  return c;
}

// Writes a snapshot as a recording; returns the error, or "".
std::string FlightRecorder::write_snapshot(const std::string& path, const Snapshot& c) {
  try {
    RecordingWriter w(path, false);
    chmod(path.c_str(), 0600);  // what the node's jobs ran: for root's eyes
    uint64_t calls = 0;
    for (const auto& [k, v] : c.meta) w.set_meta(k, v);
    for (const auto& r : c.devices) w.add(r);
    for (const auto& r : c.processes) w.add(r);
    for (const auto& r : c.threads) w.add(r);
    for (const auto& r : c.frames) w.add(r);
    std::apply(
        [&](const auto&... ranges) {
          ((void)[&] {
            for (const auto& k : ranges)
              for (size_t i = k.begin; i < k.end; ++i) {
                const auto& r = k.chunk->rows[i];
                w.add(r);
                using R = std::decay_t<decltype(r)>;  // traced calls; GPU rows are not
                if constexpr (requires { r.dur_ns; } && !std::is_same_v<R, GpuActivityRow> &&
                              !std::is_same_v<R, GpuCollectiveRow> &&
                              !std::is_same_v<R, GpuSliceRow>)
                  ++calls;
              }
          }(),
           ...);
        },
        c.rows);
    for (const auto& r : c.exits) w.add(r);
    w.set_meta("events", std::to_string(calls));
    return w.close();
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Flight recordings beyond keep_bytes go, oldest first (their names sort by time); only
// regular files named as this recorder names them, never the newest.
void FlightRecorder::retain() {
  std::vector<std::pair<std::string, uint64_t>> files;
  if (DIR* d = opendir(o_.dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      struct stat st {};
      std::string path = o_.dir + "/" + name;
      if (is_flight_file(name) && lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        files.emplace_back(path, uint64_t(st.st_size));
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    total += files[i].second;
    if (i > 0 && total > o_.keep_bytes) unlink(files[i].first.c_str());
  }
}

}  // namespace eacgm
