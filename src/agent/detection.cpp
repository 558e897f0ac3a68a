// The online detector sink (agent/detection.h).
#include "agent/detection.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "detect/call_context.h"
#include "detect/features.h"  // kStragglerWaitUnitUs
#include "detect/gpu_time.h"
#include "detect/materiality.h"
#include "gpu/gpu_samples.h"  // monotonic_now_ns
#include "probe/job_identity.h"
#include "util/error.h"
#include "util/read_file.h"

namespace eacgm {

// A window that goes out on its own, not waiting for the next (window_run): one in which the
// job's threads waited for a CPU a third of the time they wanted one or more, ten times their
// usual wait and at least 10 ms, while the job's CPU fell by a fifth: a neighbour took a good
// part of a second of CPU from it, which no checkpoint or hiccup of the job's own does (those
// leave its threads blocked, not queued). Without it a 1.5 s CPU hog whose second and third
// windows it only grazed went unreported (eval cpu_interference online, session 66: 4 misses in
// 8 runs, each with one window at 454 ms/s of wait where 4 are usual and its neighbours under
// the threshold); each window judged on its own, the same hog shows in 2-3.
bool window_stands_alone(const detect::FeatureTable& t, size_t row, const detect::GroupModel& m) {
  if (m.features != t.feature_names || m.model.n_components() == 0) return false;
  auto col = [&](const char* name) {
    auto it = std::find(t.feature_names.begin(), t.feature_names.end(), name);
    return it == t.feature_names.end() ? Eigen::Index(-1) : Eigen::Index(it - t.feature_names.begin());
  };
  Eigen::Index wait = col("runq_wait_ms_per_s"), cpu = col("cpu_cores");
  if (wait < 0 || cpu < 0 || !t.log_rates) return false;
  // (rates are log(1 + rate) in the windows' table and the model: the usual is the mixture's mean)
  auto usual = [&](Eigen::Index c) { return std::expm1(m.model.weights().dot(m.model.means().col(c))); };
  const Eigen::Index r = Eigen::Index(row);
  double wait_ms = std::expm1(t.values(r, wait)), cores = std::expm1(t.values(r, cpu));
  return wait_ms >= 0.5 * cores * 1000 && wait_ms >= 10 * std::max(usual(wait), 1.0) &&
         cores <= 0.8 * usual(cpu);
}

namespace {

// How long after its end a collective's call may wait for its instance to be matched (every
// rank's row of it comes within milliseconds on one node) before it is scored without.
constexpr uint64_t kPeerWaitGraceNs = 1'000'000'000;

detect::OnlineOptions online_options(const DetectionOptions& o) {
  detect::OnlineOptions d;
  d.window_ns = o.history_ns;
  d.refit_every_ns = o.refit_every_ns;
  d.min_samples = o.train_calls;
  d.min_samples_by_layer["window"] = o.train_windows;
  d.max_samples = 20'000;  // a fit on more takes the worker too long for what it adds
  d.max_fit_samples = 5'000;  // every 4th of a full window: as good a fit, a quarter of the CPU
  d.min_excess_us = 1000;  // as detect: a call must be at least 1 ms slower than usual
  d.refit_inline = false;
  d.min_span_ns = o.train_span_ns;
  d.burst_window_ns = o.burst_window_ns;
  // 10 ms a second, 100 ms in 10 s: less is no alert
  d.min_burst_share = detect::kDefaultMinLossShare;
  // A window anomaly goes out when the next window is one too: a healthy job's checkpoint can
  // stall it for most of a second (session 38's hour: 4 lone windows at 1/5 of its rate, every
  // thread blocked, none waiting for a CPU), while each injected fault of the eval, 1.5-2 s
  // long, showed in 2-4 windows in a row.
  d.window_run = 2;
  d.window_stands_alone = window_stands_alone;
  return d;
}

}  // namespace

DetectionSink::DetectionSink(DetectionOptions options,
                             std::function<void(std::vector<AgentAnomaly>&)> report)
    : options_(std::move(options)),
      report_(std::move(report)),
      detector_(online_options(options_)),
      job_starts_(options_.job_starts),
      symptom_runs_(options_.symptom_runs) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0 && host[0]) on_host_ = fmt::format(" on host {}", host);
  // a CPU-stall episode goes out where the job's processes lost at least 1% of their CPU time
  // to stops in the minute before its end (stall_episodes.h)
  stall_episodes_.set_material([this](const std::string& job, uint32_t pid, uint64_t end_ns) {
    constexpr uint64_t kMinute = 60'000'000'000ull;
    constexpr double kShare = 0.01;
    std::vector<uint32_t> pids;
    if (auto j = job_windows_.find(job); j != job_windows_.end()) pids = j->second.windows.pids();
    if (pids.empty() && pid) pids.push_back(pid);
    uint64_t from = end_ns > kMinute ? end_ns - kMinute : 0;
    double stall = 0, oncpu = 0;
    for (uint32_t p : pids) {
      detect::HostContext c = context_.over(p, from, end_ns - from);
      stall += c.stall_ns, oncpu += c.oncpu_ns;
    }
    return stall >= kShare * std::max(oncpu, 1e6);
  });
  worker_ = std::thread([this] { worker(); });
}

DetectionSink::~DetectionSink() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

// Fits models off the pipeline's thread, at the lowest priority: a fit takes tens of
// milliseconds and must delay neither the decoding of events nor the traced job.
//
// SCHED_IDLE, not nice 10: beside a CPU training whose BLAS worker spins on sched_yield (each
// yield pushes the training thread's place in the queue back), the first fits, ~150 ms of CPU
// at nice 10, held the training's steps up by 32-101 ms on this 2-core VM, the refit at 60 s
// by 26-59 ms (wall less the thread's CPU time, `bench/agent_stalls.sh`, three runs); at
// SCHED_IDLE, 13 and 26 ms once each in three runs. A fit that waits
// `refit_hurry_ns` for an idle CPU (a node whose jobs keep every core busy) is hurried: nice 10
// until the queue is empty (hurry_refits), so the models still come within seconds.
//
// In this one thread, never as an OpenMP team (the limit is per thread: the pipeline's thread
// sets its own). A team's threads spin at its barriers, and where the job keeps cores busy a
// team member is often off its CPU while the others spin for it. Beside a one-thread CPU
// training on this 2-core VM, teams took the agent from 4% of a core to 7% (and to 70% in the
// minutes its fits were queued), and the training's aten::mm calls they slowed were reported
// as anomalies, ~40 a second (session 50). A fit of at most 5,000 samples takes tens of
// milliseconds alone.
void DetectionSink::worker() {
  pthread_setname_np(pthread_self(), "eacgm-refit");  // as top -H and ps -L show it
  const pid_t tid = pid_t(syscall(SYS_gettid));
  sched_param normal{};
  const bool idle = sched_setscheduler(0, SCHED_IDLE, &normal) == 0;
  if (!idle) setpriority(PRIO_PROCESS, id_t(tid), 19);
  omp_set_max_active_levels(0);
  std::unique_lock lock(mu_);
  worker_tid_ = tid;
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    detect::RefitJob job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    std::optional<detect::GroupModel> model;
    try {
      model = detect::fit_group(job);
    } catch (const std::exception&) {
      // a degenerate window (e.g. all samples equal): no model this time, the next refit retries
    }
    job.training.values.resize(0, 0);  // only the group's name and time go back
    lock.lock();
    done_.emplace_back(std::move(job), std::move(model));
    waiting_since_ = jobs_.empty() ? 0 : monotonic_now_ns();
    if (jobs_.empty() && hurried_) {  // caught up: back to waiting for idle CPUs
      if (idle) sched_setscheduler(0, SCHED_IDLE, &normal);
      else setpriority(PRIO_PROCESS, id_t(tid), 19);
      hurried_ = false;
    }
  }
}

// (under mu_) A fit that waited refit_hurry_ns for the worker to finish it runs at nice 10.
void DetectionSink::hurry_refits(uint64_t now) {
  if (hurried_ || !worker_tid_ || !waiting_since_ || now - waiting_since_ < options_.refit_hurry_ns)
    return;
  sched_param normal{};
  sched_setscheduler(worker_tid_, SCHED_OTHER, &normal);  // (as root: CAP_SYS_NICE)
  setpriority(PRIO_PROCESS, id_t(worker_tid_), 10);
  hurried_ = true;
  ++hurries_;
}

size_t DetectionSink::refit_hurries() const {
  std::lock_guard lock(mu_);
  return hurries_;
}

pid_t DetectionSink::refit_thread() const {
  std::lock_guard lock(mu_);
  return worker_tid_;
}

DetectionSink::CallGroup* DetectionSink::add_call(const char* layer, std::string_view name,
                                                 uint64_t ts, uint64_t dur, uint32_t pid,
                                                 uint32_t tid, int64_t runq, int64_t bytes,
                                                 bool in_windows) {
  if (JobWindows* j = in_windows ? windows_of(pid, true, ts) : nullptr)
    j->windows.add_call(layer, pid, ts, dur, runq);
  auto& by_name = index_[layer];
  auto it = by_name.find(name.data());
  if (it == by_name.end()) {
    bool kernel = !strcmp(layer, "gpu");
    if ((kernel ? kernel_groups_ : groups_.size() - kernel_groups_) >= options_.max_groups) {
      bool& warned = kernel ? warned_kernel_groups_ : warned_groups_;
      if (!warned)
        fprintf(stderr, "eacgm: agent: %zu %s have models; later new ones are not modelled\n",
                options_.max_groups, kernel ? "kernels" : "operations");
      warned = true;
      return nullptr;
    }
    kernel_groups_ += kernel;
    CallGroup g;
    g.layer = layer;
    g.name = std::string(name);
    g.bytes = bytes >= 0;
    it = by_name.emplace(name.data(), groups_.size()).first;
    groups_.push_back(std::move(g));
  }
  CallGroup& g = groups_[it->second];
  g.ts.push_back(ts);
  g.dur.push_back(dur);
  g.pid.push_back(pid);
  g.tid.push_back(tid);
  g.runq.push_back(runq);
  g.log_bytes.push_back(bytes >= 0 ? std::log2(1.0 + double(bytes)) : 0.0);
  return &g;
}

void DetectionSink::add(const CudaCallRow& r) {
  add_call("cuda", r.name, r.ts_ns, r.dur_ns, r.pid, r.tid, r.runq_ns, r.bytes);
}
void DetectionSink::add(const CommCallRow& r) {
  CallGroup* g = add_call("comm", r.name, r.ts_ns, r.dur_ns, r.pid, r.tid, r.runq_ns, r.bytes);
  // (the name's kind once per group: its rows need no string of their own)
  // NCCL's ranks are known from their creation calls, or, where the agent attached after those,
  // from NCCL's profiler plugin (the gputime layer)
  // (once per group: after that, nothing more is looked up per call)
  if (!g || g->collective || !collectives_) return;
  bool ranked = (r.rank >= 0 && r.nranks > 1 && r.rank < r.nranks) ||
                (r.name.starts_with("nccl") && collectives_->gpu_timed(r.pid));
  if (ranked && is_collective(std::string(r.name))) g->collective = true;
}

void DetectionSink::explain_waits(std::vector<AgentAnomaly>& found) {
  if (!collectives_) return;
  for (AgentAnomaly& f : found) {
    detect::Anomaly& a = f.anomaly;
    if (a.layer != "comm") continue;
    if (const PeerWait* w = collectives_->find(a.pid, a.ts_ns))
      detect::explain_wait(*w, on_host_ + job_text(w->last_pid), a);
  }
}

std::string DetectionSink::job_text(uint32_t pid) const {
  std::string key = job_key(pid);
  if (key.starts_with("job ")) return ", " + key;
  constexpr std::string_view launched = "the processes launched by pid ";
  if (key.starts_with(launched)) return ", launched by pid " + key.substr(launched.size());
  return {};
}
void DetectionSink::add(const TorchCallRow& r) {
  add_call("torch", r.name, r.ts_ns, r.dur_ns, r.pid, r.tid, r.runq_ns, -1);
}
void DetectionSink::add(const PythonCallRow& r) {
  add_call("python", r.name, r.ts_ns, r.dur_ns, r.pid, r.tid, r.runq_ns, -1);
}

void DetectionSink::add(const GpuActivityRow& r) {
  if (JobWindows* j = windows_of(r.pid, true, r.ts_ns)) j->windows.add(r);
  if (detect::modelled_kernel(r))
    add_call("gpu", r.name, r.ts_ns, r.dur_ns, r.pid, detect::stream_thread(r), -1, -1);
}

void DetectionSink::add(const GpuCollectiveRow& r) {
  if (!detect::modelled_collective(r) || !collectives_) return;
  auto name = on_gpu_names_.find(r.name.data());
  if (name == on_gpu_names_.end())
    name = on_gpu_names_.emplace(r.name.data(), detect::gpu_collective_name(r.name)).first;
  CallGroup* g = add_call("comm", name->second, r.gpu_start_ns, r.gpu_dur_ns, r.pid,
                          detect::communicator_thread(r), -1, r.bytes, false);
  if (g) g->collective = g->on_gpu = true;
}

void DetectionSink::add(const GpuSliceRow& r) {
  if (JobWindows* j = windows_of(r.pid, true, r.ts_ns)) j->windows.add(r);
}

void DetectionSink::add(const ProcessRow& r) {
  names_[r.pid] = r.name;
  places_[r.pid] = {r.ppid, r.job_id, r.start_ns};
  gone_.erase(r.pid);  // (a pid used again)
  // a process of no job yet (not its parent's) may be a job starting: its neighbours' slow
  // calls wait a little for its first call
  if (!job_of_.count(r.pid) && !job_of_.count(r.ppid) && may_start_job(r.name, r.command))
    job_starts_.candidate(r.pid, r.start_ns ? r.start_ns : monotonic_now_ns());
}

// A process that ran before the agent started has had no ProcessRow: its name from /proc
// (an anomaly of a running job the agent was started beside read "in ? (pid N)").
std::string DetectionSink::process_name(uint32_t pid) {
  if (auto it = names_.find(pid); it != names_.end()) return it->second;
  if (gone_.count(pid)) return {};
  std::string name = read_small_file(fmt::format("/proc/{}/comm", pid));
  while (!name.empty() && name.back() == '\n') name.pop_back();
  if (!name.empty()) names_[pid] = name;
  return name;
}

std::string DetectionSink::job_key(uint32_t pid) const {
  auto p = places_.find(pid);
  if (p == places_.end()) return fmt::format("pid {}", pid);
  if (auto parent = job_of_.find(p->second.ppid); parent != job_of_.end())
    return parent->second->first;
  // (torchrun's run id is "none" unless the user gave one: every such job would be one)
  if (const std::string& id = p->second.job_id; !id.empty() && id != "none") return "job " + id;
  return fmt::format("the processes launched by pid {}", p->second.ppid);
}

DetectionSink::JobWindows* DetectionSink::windows_of(uint32_t pid, bool create, uint64_t ts_ns) {
  auto it = job_of_.find(pid);
  if (it == job_of_.end()) {
    if (!create || gone_.count(pid)) return nullptr;  // (a row late after the exit)
    // A process that ran before the agent started has had no ProcessRow: its parent and job
    // id from /proc (so that a restarted agent gives a running job the key its saved window
    // model has).
    if (!places_.count(pid))
      if (uint32_t ppid = read_parent_pid(pid))
        places_[pid] = {ppid, read_job_identity(pid).job};
    auto [job, created] = job_windows_.try_emplace(job_key(pid), options_);
    if (created) {
      job->second.windows.use_duty(&duty_);
      auto p = places_.find(pid);
      uint64_t start = p != places_.end() && p->second.start_ns ? p->second.start_ns : ts_ns;
      job_starts_.seen(job->first, std::min(start, ts_ns ? ts_ns : start));
    }
    it = job_of_.emplace(pid, job).first;
    job_starts_.gone(pid);
  }
  return &it->second->second;
}

void DetectionSink::add(const HostSampleRow& r) {
  if (r.scope == HostScope::Process) {
    if (JobWindows* j = windows_of(uint32_t(r.id), false)) {
      j->windows.add(r);
      context_.add(r);
    }
    return;
  }
  for (auto& [key, j] : job_windows_) j.windows.add(r);  // the node's: every job's
}

void DetectionSink::add(const GpuSample& r) {
  for (auto& [key, j] : job_windows_) j.windows.add(r);
}

std::vector<std::string> DetectionSink::window_jobs() const {
  std::vector<std::string> v;
  for (const auto& [key, j] : job_windows_) v.push_back(key);
  return v;
}

void DetectionSink::add(const ProcessExitRow& r) {
  if (auto it = job_of_.find(r.pid); it != job_of_.end()) {
    it->second->second.windows.exited(r.pid, r.end_ns);
    job_of_.erase(it);
  }
  places_.erase(r.pid);
  job_starts_.gone(r.pid);
  gone_[r.pid] = r.end_ns;
  exited_.push_back(r.pid);
}

std::pair<uint64_t, uint64_t> DetectionSink::quiet_span(uint64_t now) const {
  if (!flight_) return {0, 0};
  // (at most a minute of it: a write that never ends must not turn judging off for good)
  constexpr uint64_t kMaxQuietNs = 60'000'000'000ull;
  auto [start, end] = flight_->busy();
  if (!start) return {0, 0};
  return {start, std::min(end ? end : now, start + kMaxQuietNs)};
}

void DetectionSink::score_calls(std::vector<AgentAnomaly>& out) {
  uint64_t now = monotonic_now_ns();
  for (CallGroup& g : groups_) {
    if (g.ts.empty()) continue;
    // A collective's calls are scored once their instance was matched, or, for calls it never
    // will be (a rank on another node, a lost call), kPeerWaitGraceNs after they ended; in
    // order, so the first call still waiting holds the later ones.
    size_t n = g.ts.size();
    std::vector<const PeerWait*> waits(g.collective ? n : 0, nullptr);  // (no allocation else)
    if (g.collective)
      for (size_t i = 0; i < n; ++i) {
        waits[i] = g.on_gpu ? collectives_->find_on_gpu(g.pid[i], g.ts[i])
                            : collectives_->find(g.pid[i], g.ts[i]);
        g.peers |= waits[i] != nullptr && !g.on_gpu;
        if (!waits[i] && now < g.ts[i] + g.dur[i] + kPeerWaitGraceNs) {
          n = i;
          break;
        }
      }
    if (n == 0) continue;
    detect::FeatureTable t;
    t.layer = g.layer;
    t.name = g.name;
    t.group = g.layer + "/" + g.name;
    t.feature_names = {"log_duration_us"};
    if (g.bytes) t.feature_names.push_back("log2_bytes");
    if (g.peers) t.feature_names.push_back("log_straggler_wait_10us");
    t.values.resize(Eigen::Index(n), Eigen::Index(t.feature_names.size()));
    for (size_t i = 0; i < n; ++i) {
      // as detect's call features: the duration net of the thread's wait for a CPU, and of a
      // collective's wait for the last rank, whose straggling part is a feature of its own
      const PeerWait* w = g.collective ? waits[i] : nullptr;
      int64_t net = int64_t(g.dur[i]) - std::max<int64_t>(g.runq[i], 0);
      // (NCCL's GPU wait is not in its API call's duration; it is in its GPU time)
      if (w && w->on_gpu == g.on_gpu) net -= int64_t(w->wait_ns);
      Eigen::Index c = 0;
      t.values(Eigen::Index(i), c++) = std::log(double(std::max<int64_t>(net, 1)) / 1e3);
      if (g.bytes) t.values(Eigen::Index(i), c++) = g.log_bytes[i];
      if (g.peers)
        t.values(Eigen::Index(i), c++) =
            w ? std::log1p(double(w->straggling_ns()) / 1e3 / detect::kStragglerWaitUnitUs) : 0.0;
    }
    auto take = [n](auto& v) {
      std::remove_reference_t<decltype(v)> head(v.begin(), v.begin() + std::ptrdiff_t(n));
      v.erase(v.begin(), v.begin() + std::ptrdiff_t(n));
      return head;
    };
    t.ts_ns = take(g.ts);
    t.dur_ns = take(g.dur);
    t.pid = take(g.pid);
    t.tid = take(g.tid);
    t.runq_ns = take(g.runq);
    take(g.log_bytes);
    if (g.peers) {  // (who joined last: find_anomalies tells a straggler from lateness in turns)
      t.late_pid.resize(n);
      for (size_t i = 0; i < n; ++i) t.late_pid[i] = waits[i] ? waits[i]->last_pid : 0;
    }
    std::vector<bool> judged(t.ts_ns.size(), true);
    for (size_t i = 0; i < t.ts_ns.size(); ++i) {
      // a process's first call as this flush's batches show it (within a flush of the truth)
      judged[i] = t.ts_ns[i] >= first_call_.try_emplace(t.pid[i], t.ts_ns[i]).first->second +
                                    options_.warm_up_ns;
      // (a call that ran while the agent wrote a flight recording is judged, unlike the windows
      // then: judged net of its thread's wait for a CPU, no call of the nine eval scenarios was
      // flagged in the writes' seconds, where 11 windows were (session 53, eval/README.md), and
      // a fault that fell in a write went unseen, session 51's net_delay)
    }
    judged_to_ = std::max(judged_to_, t.ts_ns.back());
    const bool modelled = detector_.model(g.layer, g.name) != nullptr;
    auto job_of = [this](uint32_t pid) {
      auto job = job_of_.find(pid);
      return job != job_of_.end() ? job->second->first : std::string();
    };
    for (auto& a : detector_.observe(t, judged)) {
      std::string name = process_name(a.pid);
      out.push_back({std::move(a), std::move(name), job_of(a.pid)});
    }
    // the late joins the models do not judge (a warm-up's, an operation with no model yet):
    // judged against the job's own collectives (young_stragglers.h), kept out of later fits
    if (g.peers && !g.on_gpu)
      for (size_t i = 0; i < n; ++i) {
        const PeerWait* w = waits[i];
        // (NCCL's waits measured on the GPU are left to the models: the API call's time is not
        // its kernels', so which rows are one instance is not known here)
        if (!w || w->on_gpu || (judged[i] && modelled) || w->last_pid == t.pid[i]) continue;
        std::string key = job_of(t.pid[i]);
        if (key.empty()) key = fmt::format("pid {}", t.pid[i]);
        detect::MatchedCall c{t.ts_ns[i], t.dur_ns[i], t.pid[i], t.tid[i], t.runq_ns[i],
                      w->straggling_ns(), t.ts_ns[i] + w->wait_ns, w->last_pid, i};
        for (auto& a : young_stragglers_.observe(key, g.name, c)) {
          detector_.note_reported(t.group, a.ts_ns, a.dur_ns);
          std::string name = process_name(a.pid);
          out.push_back({std::move(a), std::move(name), job_of(a.pid)});
        }
      }
    if (const detect::GroupModel* m = detector_.model(g.layer, g.name)) {
      Eigen::MatrixXd last = t.values.bottomRows(1);
      g.last_score = detect::score_gmm(m->model, last).component_log_density(0);
      g.scored = true;
    }
  }
}

void DetectionSink::flush() {
  std::vector<AgentAnomaly> found;
  score_calls(found);
  for (uint32_t pid : exited_) names_.erase(pid), first_call_.erase(pid), context_.forget(pid);
  exited_.clear();
  uint64_t now = monotonic_now_ns();
  // (calls are scored within seconds of their end: two minutes of samples cover them)
  if (now > 120'000'000'000ull) context_.forget_before(now - 120'000'000'000ull);
  // (by the calls' time: a job quiet for a minute has ended or is another job's now)
  if (judged_to_ > 60'000'000'000ull) young_stragglers_.forget_before(judged_to_ - 60'000'000'000ull);
  std::erase_if(gone_, [&](const auto& g) { return g.second + 60'000'000'000ull < now; });
  auto [quiet_start, quiet_end] = quiet_span(now);
  // per job, the windows judged in this flush (but those the detector holds for the next), and
  // the jobs whose windows ended (after SymptomRuns saw their last ones)
  std::map<std::string, std::vector<uint64_t>> windows_judged;
  std::vector<std::string> ended_jobs;
  for (auto it = job_windows_.begin(); it != job_windows_.end();) {
    const std::string& key = it->first;
    JobWindows& j = it->second;
    if (quiet_end) j.windows.quiet(quiet_start, quiet_end);
    detect::FeatureTable w = j.windows.take_complete(now);
    w.group = "window/" + key;
    w.name = key;
    if (!w.ts_ns.empty()) {
      judged_to_ = std::max(judged_to_, w.ts_ns.back() + w.dur_ns.back());
      std::string who = job_who(key);
      std::vector<detect::Anomaly> flagged = detector_.observe(w);
      const detect::GroupModel* judge = detector_.model("window", key);  // (after: it may reset)
      for (auto& a : flagged) {
        a.name = "window";  // (as detect's: the job is the anomaly's process)
        bool alone = judge && a.row < w.ts_ns.size() && w.ts_ns[a.row] == a.ts_ns &&
                     window_stands_alone(w, a.row, *judge);
        found.push_back({std::move(a), who, key});
        found.back().stands_alone = alone;
      }
      std::vector<uint64_t> held = detector_.held_windows(w.group);
      auto& judged = windows_judged[key];
      for (uint64_t ts : w.ts_ns)
        if (std::find(held.begin(), held.end(), ts) == held.end()) judged.push_back(ts);
      if (const detect::GroupModel* m = detector_.model("window", key)) {
        Eigen::MatrixXd last = w.values.bottomRows(1);
        j.last_score = detect::score_gmm(m->model, last).component_log_density(0);
        j.scored = true;
      }
    }
    if (j.windows.traced_processes() == 0) {  // the job ended: its windows and model go
      detector_.forget(w.group);
      job_starts_.ended(key);
      ended_jobs.push_back(key);
      it = job_windows_.erase(it);
    } else {
      ++it;
    }
  }
  auto jobs = detector_.take_due_refits();
  std::vector<std::pair<detect::RefitJob, std::optional<detect::GroupModel>>> done;
  {
    std::lock_guard lock(mu_);
    if (!jobs.empty() && !waiting_since_) waiting_since_ = now;
    for (auto& j : jobs) {
      // Window features are log(1 + rate): a spread below 5% in training is the noise of a
      // steady job (3,824 calls in one window, 3,808 in the next), not a precise normal that a
      // job slowed 40% by a CPU hog breaks more than the hog's run-queue wait does.
      if (j.training.layer == "window") j.options.reg_covar = 0.05 * 0.05;
      jobs_.push_back(std::move(j));
    }
    done.swap(done_);
    hurry_refits(now);
  }
  if (!jobs.empty()) cv_.notify_one();
  for (auto& [job, model] : done) {
    unsaved_ |= model.has_value();
    detector_.install(job.training.group, std::move(model), job.at_ns);
  }
  now = monotonic_now_ns();
  if (unsaved_ && !options_.models_path.empty() && now - last_save_ >= 60'000'000'000ull) {
    if (std::string e = save_models(); !e.empty()) fprintf(stderr, "eacgm: agent: %s\n", e.c_str());
    last_save_ = now;
  }
  // (straggler-named collectives of the last 30 s: a window is judged a window or two after its
  // calls, in a later flush)
  while (!recent_late_.empty() && recent_late_.front().ts_ns + 30'000'000'000ull < now)
    recent_late_.pop_front();
  if (!found.empty()) {
    explain_waits(found);
    for (const auto& f : found)
      if (f.anomaly.late_pid) recent_late_.push_back(f.anomaly);
    // as detect: what the host did to the process during a slow call (its thread waited for a
    // CPU, it reclaimed memory, its sockets retransmitted), then a call around a slow call of
    // its thread reported with it (aten::linear around its aten::addmm) names the inner one,
    // the likelier root
    std::vector<detect::Anomaly> calls;
    for (const auto& f : found) calls.push_back(f.anomaly);
    context_.explain(calls);
    detect::attribute_nested(calls);
    detect::attribute_windows(calls, {recent_late_.begin(), recent_late_.end()});
    for (size_t i = 0; i < found.size(); ++i)
      if (calls[i].layer == "window") {
        auto j = job_windows_.find(found[i].job);
        if (j != job_windows_.end())
          context_.explain_window(calls[i], j->second.windows.pids(), false);
      }
    for (size_t i = 0; i < found.size(); ++i) {
      found[i].anomaly.cause = std::move(calls[i].cause);
      found[i].anomaly.stalled_ns = calls[i].stalled_ns;  // (what StallEpisodes folds)
    }
  }
  // a job slower for seconds with nothing on the node to blame: only when it lasts
  symptom_runs_.fold(found, windows_judged);
  for (const std::string& key : ended_jobs) symptom_runs_.ended(key);
  // a job's start beside others, a CPU's stop: what it slowed, one anomaly
  uint64_t data_now = std::max(judged_to_, now > options_.fold_lag_ns ? now - options_.fold_lag_ns : 0);
  stall_episodes_.fold(found, data_now);
  job_starts_.fold(found, data_now, monotonic_now_ns(),
                   [this](const std::string& key) { return job_who(key); });
  // what no start explains: a neighbour's episode, its first call at once and the rest as one
  interference_episodes_.fold(found, data_now);
  if (!found.empty()) report_(found);
}

void DetectionSink::finish() {
  std::vector<AgentAnomaly> found;
  symptom_runs_.finish();
  stall_episodes_.finish(found);
  job_starts_.finish(found, [this](const std::string& key) { return job_who(key); });
  interference_episodes_.fold(found, 0);
  interference_episodes_.finish(found);
  if (!found.empty()) report_(found);
}

// who: the job and its processes ("job 7 (pids 10, 11)"), in the log line and the store
// ("demo_train (pid 10)" for a process alone); an ended job by its key
std::string DetectionSink::job_who(const std::string& key) {
  auto j = job_windows_.find(key);
  if (j == job_windows_.end()) return key;
  std::vector<uint32_t> pids = j->second.windows.pids();
  std::string who = key;
  if (std::string name = pids.size() == 1 ? process_name(pids[0]) : ""; !name.empty())
    who = fmt::format("{} (pid {})", name, pids[0]);
  else if (!pids.empty() && key.rfind("pid ", 0) != 0)
    who += fmt::format(" (pid{} {})", pids.size() > 1 ? "s" : "", fmt::join(pids, ", "));
  return who;
}

std::string DetectionSink::load_models() {
  const std::string& path = options_.models_path;
  struct stat st {};
  if (path.empty() || lstat(path.c_str(), &st) != 0) return {};
  try {
    if (!S_ISREG(st.st_mode)) fail("not a regular file");
    std::ifstream in(path);
    detect::DetectorModel saved = detect::detector_from_json(nlohmann::json::parse(in));
    std::string note;
    if (saved.window_ns != options_.window_ns) {
      // windows of another length have other rates: that model cannot judge these
      auto window = [](const detect::GroupModel& g) { return g.layer == "window"; };
      if (std::erase_if(saved.groups, window))
        note = fmt::format(" (not the window model: it was trained on {} s windows)",
                           double(saved.window_ns) / 1e9);
    }
    detector_.load(saved);
    return fmt::format("resumed {} models from {}{}", saved.groups.size(), path, note);
  } catch (const std::exception& e) {
    std::string aside = path + ".bad";
    if (S_ISREG(st.st_mode) && rename(path.c_str(), aside.c_str()) == 0)
      return fmt::format("could not read the saved models {} ({}); moved to {}, learning afresh",
                         path, e.what(), aside);
    return fmt::format("could not read the saved models {} ({}); learning afresh", path, e.what());
  }
}

std::string DetectionSink::save_models() {
  if (options_.models_path.empty()) return {};
  detect::DetectorModel m = detector_.models();
  m.window_ns = options_.window_ns;
  // the window models of the jobs running now: an ended job's are of no use to the next
  // (resumed ones that never ran again go at the first save)
  std::erase_if(m.groups, [&](const detect::GroupModel& g) {
    return g.layer == "window" && !job_windows_.count(g.name);
  });
  std::string tmp = options_.models_path + ".tmp";
  {
    mode_t old = umask(077);
    std::ofstream out(tmp, std::ios::trunc);
    umask(old);
    out << detect::detector_to_json(m).dump() << '\n';
    out.flush();
    if (!out) {
      unlink(tmp.c_str());
      return fmt::format("could not save the models to {}: {}", tmp, errno_text(errno));
    }
  }
  if (rename(tmp.c_str(), options_.models_path.c_str()) != 0) {
    std::string e = errno_text(errno);
    unlink(tmp.c_str());
    return fmt::format("could not save the models to {}: {}", options_.models_path, e);
  }
  unsaved_ = false;
  return {};
}

std::vector<ModelState> DetectionSink::states() const {
  std::vector<ModelState> out;
  for (const CallGroup& g : groups_)
    if (g.scored)
      if (const detect::GroupModel* m = detector_.model(g.layer, g.name))
        out.push_back({g.layer, g.name, g.last_score, m->threshold});
  // The window models, one per job, as one series (a job's key holds pids: unbounded as a
  // label): the job's nearest its threshold.
  std::optional<ModelState> window;
  for (const auto& [key, j] : job_windows_)
    if (j.scored)
      if (const detect::GroupModel* m = detector_.model("window", key))
        if (!window || j.last_score - m->threshold < window->last_score - window->threshold)
          window = ModelState{"window", "window", j.last_score, m->threshold};
  if (window) out.push_back(*window);
  return out;
}

}  // namespace eacgm
