// The agent's online detector as a sink: every traced call scored against its operation's
// model (each kernel's GPU time against its kernel's), every complete window of each job on the
// node against that job's window model, models refitted on a sliding history by a worker thread and saved in the state dir so that a restart
// resumes scoring at once. What it finds goes to the agent (log line, metrics, store).
#pragma once
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/agent_anomaly.h"
#include "agent/flight.h"
#include "agent/job_starts.h"
#include "agent/interference_episodes.h"
#include "agent/stall_episodes.h"
#include "agent/symptom_runs.h"
#include "agent/node_collectives.h"
#include "agent/windows.h"
#include "detect/young_stragglers.h"
#include "detect/call_context.h"
#include "detect/online.h"
#include "export/metrics.h"
#include "store/sink.h"

namespace eacgm {

struct DetectionOptions {
  uint64_t window_ns = 1'000'000'000;         // --window
  uint64_t history_ns = 3600'000'000'000ull;  // --history: models fit on this past
  uint64_t refit_every_ns = 60'000'000'000ull;
  size_t train_windows = 60;                  // windows a model needs before it judges (a minute)
  size_t train_calls = 200;                   // calls an operation's model needs
  uint64_t train_span_ns = 30'000'000'000;    // and the time its calls must span
  uint64_t warm_up_ns = 10'000'000'000;       // a process's first calls: learned, not judged
  uint64_t burst_window_ns = 10'000'000'000;  // call anomalies only in bursts (online.h)
  uint64_t sample_interval_ns = 100'000'000;  // of the host and gpu layers
  std::string models_path;   // where models are saved and resumed from; "": nowhere
  // a job starting beside others: the anomalies of its start one (agent/job_starts.h)
  JobStartOptions job_starts;
  // windows that name only a symptom: reported in runs this long (agent/symptom_runs.h)
  SymptomRunOptions symptom_runs;
  // judged by the time of the latest calls and windows, or this long before now if those are
  // older (no job calls anything: the held anomalies and ended episodes still go out)
  uint64_t fold_lag_ns = 30'000'000'000;
  // operations modelled, the first ones win; as many again for kernels (layer gpu: a PyTorch
  // job runs hundreds to thousands of templated kernels, which must not crowd out its calls)
  size_t max_groups = 2000;
  // the refit thread waits for idle CPUs (SCHED_IDLE); a fit not done this long after it was
  // asked for runs at nice 10 until the worker has caught up
  uint64_t refit_hurry_ns = 5'000'000'000;
};

// Whether an anomalous window of a job goes out without waiting for the next one (detection.cpp
// says when): `row` of the job's windows `t`, judged by `model`.
bool window_stands_alone(const detect::FeatureTable& t, size_t row, const detect::GroupModel& model);

class DetectionSink final : public Sink {
 public:
  // `report` is called on the pipeline's thread with the anomalies of each flush.
  DetectionSink(DetectionOptions options, std::function<void(std::vector<AgentAnomaly>&)> report);
  ~DetectionSink() override;

  void add(const CudaCallRow& r) override;
  void add(const CommCallRow& r) override;
  void add(const TorchCallRow& r) override;
  void add(const PythonCallRow& r) override;
  void add(const ProcessRow& r) override;
  void add(const ProcessExitRow& r) override;
  void add(const HostSampleRow& r) override;
  void add(const GpuSample& r) override;
  // The gputime layer: each execution in its job's windows (the GPU's idle share), and each
  // kernel's a call of layer "gpu" in its kernel's model, as detect's (detect/gpu_time.h).
  void add(const GpuActivityRow& r) override;
  void add(const GpuSliceRow& r) override;
  // NCCL's collectives on the GPU: each one's own time there in a model of its own ("ncclAllReduce
  // on the GPU"), as detect's (detect/gpu_time.h).
  void add(const GpuCollectiveRow& r) override;
  // Scores what came since the last flush, closes complete windows, hands due refits to the
  // worker and installs finished ones.
  void flush() override;
  // At the agent's end, after the last flush: what is held for a job start goes out.
  void finish();

  // Loads saved models; returns what to tell the user ("" when there was nothing to load). A
  // file that cannot be read is moved aside (.bad) and named in the line.
  std::string load_models();
  // Saves the current models (atomically: a new file renamed over the old). Returns "" or why not.
  std::string save_models();

  // Where the straggler of a matched collective is looked up (the agent's NodeCollectives);
  // without, slow collectives are judged but their late rank not named.
  void use_collectives(const NodeCollectives& c) { collectives_ = &c; }
  // The jobs whose windows are judged apart, by key (see job_key()); for tests.
  std::vector<std::string> window_jobs() const;
  // The agent's flight recorder: the windows in which it wrote a recording are not judged
  // (OnlineWindows::quiet), since on a small node the write itself disturbs the jobs.
  void use_flight(const FlightRecorder& f) { flight_ = &f; }

  // The duty-cycled calls' probes (the agent's --call-duty) went on or off at `ts_ns`: the
  // windows count their calls by the time the probes were on (OnlineWindows::use_duty).
  void calls_traced(bool on, uint64_t ts_ns) { duty_.set(on, ts_ns); }

  // What /metrics shows of the models: per group with a model, its last score and threshold.
  std::vector<ModelState> states() const;
  size_t models() const { return detector_.fitted(); }
  // Unusual and not reported, so far: slow calls no burst carried, windows alone (shorter than
  // window_run), windows of a slowdown too brief to report.
  size_t unreported_calls() const { return detector_.unreported(); }
  size_t lone_windows() const { return detector_.unreported_windows(); }
  size_t brief_windows() const { return symptom_runs_.dropped_windows(); }
  // The refit thread (0 before it started), and how often its fits were hurried.
  pid_t refit_thread() const;
  size_t refit_hurries() const;
  size_t groups() const { return detector_.groups(); }

 private:
  struct CallGroup {
    std::string layer, name;
    bool bytes = false;  // the operation moves data: log2 of its bytes is a feature
    // a collective of ranks that NodeCollectives matches: its calls wait (up to
    // kPeerWaitGraceNs) for their instance, and once one was matched, the straggling wait is a
    // feature and the duration is net of the wait for the last rank (as detect's)
    bool collective = false, peers = false;
    // NCCL's collectives on the GPU (detect/gpu_time.h): waits found by GPU start, subtracted
    // from their GPU time; the straggling is their API call's group's feature, not theirs
    bool on_gpu = false;
    // the calls not scored yet
    std::vector<uint64_t> ts, dur;
    std::vector<uint32_t> pid, tid;
    std::vector<int64_t> runq;
    std::vector<double> log_bytes;
    double last_score = 0;
    bool scored = false;
  };
  // the call's group (nullptr: not modelled); in_windows: counted in its job's windows (a call
  // of a traced layer: detect's windows count those, not GPU rows)
  CallGroup* add_call(const char* layer, std::string_view name, uint64_t ts, uint64_t dur,
                      uint32_t pid, uint32_t tid, int64_t runq, int64_t bytes,
                      bool in_windows = true);
  void score_calls(std::vector<AgentAnomaly>& out);
  // When the flight recorder last wrote (on CLOCK_MONOTONIC; to `now` while it writes), whose
  // windows are not judged; (0, 0) for none.
  std::pair<uint64_t, uint64_t> quiet_span(uint64_t now) const;
  // names the late rank in the collective anomalies whose instance was matched (detect's rule)
  void explain_waits(std::vector<AgentAnomaly>& found);
  void worker();

  DetectionOptions options_;
  std::function<void(std::vector<AgentAnomaly>&)> report_;
  detect::OnlineDetector detector_;
  // Windows per job, each judged against its own model (group "window/KEY"): summed over the
  // node, a second job starting beside the first added its own threads' run-queue wait to the
  // first's and read as CPU interference (session 39's hour: 11 windows, while the first job's
  // ranks waited no longer than before). A job is the processes of one launcher's job id (torchrun,
  // Slurm, Open MPI), else the traced children of one parent (a launcher's ranks; a rank's loader
  // workers join their rank's job), else a process alone. Host samples of a job's processes
  // count in its windows; the node's NIC and GPU samples in every job's.
  struct JobWindows {
    explicit JobWindows(const DetectionOptions& o)
        : windows(o.window_ns, o.sample_interval_ns + 150'000'000) {}
    OnlineWindows windows;
    double last_score = 0;
    bool scored = false;
  };
  // the job of a process making its first call: its parent's if that is traced, its launcher's
  // job id, its parent's children, or itself when its ProcessRow never came
  std::string process_name(uint32_t pid);  // "" if unknown
  std::string job_key(uint32_t pid) const;
  // a job in words: "the processes launched by pid 50 (pids 100, 101)", "demo_train (pid 10)"
  std::string job_who(const std::string& key);
  // the job in a straggler's words: ", job 7", ", launched by pid 10", or "" (a process alone)
  std::string job_text(uint32_t pid) const;
  // the collective anomalies of the last 30 s that named a late rank (attribute_windows)
  std::deque<detect::Anomaly> recent_late_;
  // (create: with the time of the row that asks, the job's start where its process's is not
  // known)
  JobWindows* windows_of(uint32_t pid, bool create, uint64_t ts_ns = 0);
  CallDutyTimeline duty_;  // (before the windows that point to it)
  using Jobs = std::map<std::string, JobWindows>;
  Jobs job_windows_;
  // traced live pid -> its job (every traced call looks it up: no string key on that path; a
  // job is erased only once none of its pids is left here)
  std::unordered_map<uint32_t, Jobs::iterator> job_of_;
  struct Place {
    uint32_t ppid = 0;
    std::string job_id;
    uint64_t start_ns = 0;  // 0: not known (it ran before the agent)
  };
  std::unordered_map<uint32_t, Place> places_;  // live processes' parents and job ids
  std::unordered_map<uint32_t, uint64_t> gone_;  // pids that exited: when (late rows ignored)
  // by the layer's and the name's addresses (static and interned: stable for the pipeline's life)
  std::unordered_map<const char*, std::unordered_map<const char*, size_t>> index_;
  // "<API name> on the GPU" by the decoder's name (whose pointer outlives the rows)
  std::unordered_map<const char*, std::string> on_gpu_names_;
  size_t kernel_groups_ = 0;  // of groups_, layer gpu's
  bool warned_kernel_groups_ = false;
  std::vector<CallGroup> groups_;
  bool warned_groups_ = false;
  std::unordered_map<uint32_t, std::string> names_;  // process names of live pids
  // the traced processes' host samples of the last minutes: what the host did to a process
  // while a slow call of it ran (preempted, reclaiming memory, retransmitting), as detect says
  detect::CallContext context_;
  const NodeCollectives* collectives_ = nullptr;
  const FlightRecorder* flight_ = nullptr;
  std::string on_host_;  // " on host NAME"
  // when each live process's first call came (its warm-up runs from there), and the pids that
  // exited since the last flush (forgotten after their last calls are scored)
  std::unordered_map<uint32_t, uint64_t> first_call_;
  std::vector<uint32_t> exited_;
  JobStarts job_starts_;
  StallEpisodes stall_episodes_;  // what CPU stalls slowed: one anomaly each
  // what a neighbour preempted, past an episode's first: one anomaly each
  InterferenceEpisodes interference_episodes_;
  SymptomRuns symptom_runs_;      // a job slower for seconds with nothing to blame: held
  detect::YoungStragglers young_stragglers_;  // late ranks the models do not judge yet
  uint64_t judged_to_ = 0;  // the latest call or window end judged
  uint64_t last_save_ = 0;
  bool unsaved_ = false;

  // The refit worker: jobs in, models out.
  void hurry_refits(uint64_t now);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<detect::RefitJob> jobs_;
  std::vector<std::pair<detect::RefitJob, std::optional<detect::GroupModel>>> done_;
  bool stopping_ = false;
  pid_t worker_tid_ = 0;
  uint64_t waiting_since_ = 0;  // since when a fit asked for is not done (0: none)
  bool hurried_ = false;
  size_t hurries_ = 0;
  std::thread worker_;
};

}  // namespace eacgm
