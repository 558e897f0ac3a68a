// eacgm agent end to end: /metrics served on loopback, scraped by Debian's real Prometheus while
// a known workload runs, and PromQL answering with the calls the workload made.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/socket.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "agent_fixture.h"
#include "late_steps.h"
#include "node_pair.h"

namespace e2e {
namespace {

double metric_sum(const std::string& text, const std::string& name, const std::string& labels);

TEST_F(Agent, ServesOnlyGetOfKnownPaths) {
  httplib::Client c("127.0.0.1", port_);
  auto post = c.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_GE(post->status, 400);
  EXPECT_LT(post->status, 500);
  auto unknown = c.Get("/no-such-page");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  EXPECT_NE(metrics->body.find("# TYPE eacgm_agent_probes gauge"), std::string::npos);
}

// A counter born at its first increment is invisible to increase() and rate(): the first burst
// of anomalies would raise no alert. Every cause a layer can have is on /metrics at 0 from the
// agent's start.
TEST_F(Agent, AnomalyCountersAreThereAtZeroBeforeTheFirstAnomaly) {
  httplib::Client c("127.0.0.1", port_);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* labels :
       {"cause=\"CPU interference\",layer=\"window\"", "cause=\"memory pressure\",layer=\"window\"",
        "cause=\"slow collective\",layer=\"comm\"", "cause=\"straggling rank\",layer=\"comm\"",
        "cause=\"slow cuda call\",layer=\"cuda\"", "cause=\"slow operator\",layer=\"torch\""})
    EXPECT_NE(metrics->body.find(std::string("eacgm_anomalies_total{") + labels + "} 0"),
              std::string::npos)
        << labels << "\n" << metrics->body.substr(0, 3000);
}

// A CPU that stops (a vCPU its hypervisor did not run) is on its counters whatever it ran (here
// cpu_stall, which the agent does not trace, stopping its CPU 3 times for 30 ms), each CPU's at
// 0 from the start so that increase() sees the first stop. Each stop counts 30 ms less up to one
// scheduler tick (4 ms); the VM's own stops may add to them.
TEST_F(Agent, ACpuStallIsOnTheNodesStallCounters) {
  httplib::Client c("127.0.0.1", port_);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  // a series per CPU, from the start
  for (long cpu = 0; cpu < sysconf(_SC_NPROCESSORS_CONF); ++cpu)
    EXPECT_NE(metrics->body.find("\neacgm_cpu_stalls_total{cpu=\"" + std::to_string(cpu) + "\"}"),
              std::string::npos)
        << cpu << "\n" << metrics->body.substr(0, 3000);
  auto value = [](const std::string& text, const std::string& name) {
    return metric_sum(text, name, "");  // (all CPUs')
  };
  double before = value(metrics->body, "eacgm_cpu_stall_seconds_total");
  double stops_before = value(metrics->body, "eacgm_cpu_stalls_total");
  auto r = run({kWorkloads + "/cpu_stall", "3", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double seconds = 0, stops = 0;
  for (int i = 0; i < 50; ++i) {  // (a sample every 0.1 s)
    metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics);
    seconds = value(metrics->body, "eacgm_cpu_stall_seconds_total") - before;
    stops = value(metrics->body, "eacgm_cpu_stalls_total") - stops_before;
    if (stops >= 3 && seconds >= 0.06) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(stops, 3) << agent_->err();
  EXPECT_GE(seconds, 3 * 0.020) << agent_->err();
}

// The agent traces a node's jobs, not its Python tools: a Python process that maps no CUDA,
// NCCL or PyTorch library gets no Python stacks (the layers line at stop names none); a
// PyTorch job does, and so does the tool with --all-python.
TEST_F(Agent, PythonStacksOnlyInProcessesThatMapAnMlLibrary) {
  auto layers_line = [&](const std::string& what, const std::vector<std::string>& extra) {
    if (agent_) stop_agent();
    start_agent(extra);
    auto r = run({"/bin/sh", "-c", what});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    kill(agent_->pid(), SIGTERM);
    EXPECT_EQ(agent_->wait(20), 0) << agent_->err();
    std::string err = agent_->err();
    agent_.reset();
    auto at = err.find("eacgm: layers (auto)");
    return at == std::string::npos ? err : err.substr(at, err.find('\n', at) - at);
  };
  const std::string tool = "/usr/bin/python3 -c 'import time; time.sleep(3)'";
  std::string line = layers_line(tool, {});
  EXPECT_EQ(line.find("python-stacks ("), std::string::npos) << line;
  EXPECT_NE(line.find("eacgm: layers (auto)"), std::string::npos) << line;
  line = layers_line(tool, {"--all-python"});
  EXPECT_NE(line.find("python-stacks (CPython"), std::string::npos) << line;
  const std::string w = EACGM_WORKLOAD_SOURCES;
  line = layers_line("/usr/bin/python3 " + w + "/launch_ranks.py 2 " + w + "/gloo_train.py 3", {});
  EXPECT_NE(line.find("python-stacks (CPython"), std::string::npos) << line;
  EXPECT_NE(line.find("torch ("), std::string::npos) << line;
  // a job shorter than the agent's 2 s rescan: its first torch call says it maps libtorch, so
  // its Python is given stacks at once (once, only a rescan that happened to fall in the
  // 0.2 s after its import did it)
  line = layers_line("/usr/bin/python3 -c 'import time, torch; t = torch.ones(3, 3); "
                     "[t.matmul(t) for _ in range(100)]; time.sleep(0.2)'",
                     {});
  EXPECT_NE(line.find("python-stacks (CPython"), std::string::npos) << line;
  EXPECT_NE(line.find("torch ("), std::string::npos) << line;
}

TEST_F(Agent, BadListenAddressIsAUsageError) {
  auto r = run({kEacgm, "agent", "--listen", "127.0.0.1:99999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--listen 127.0.0.1:99999: the port must be a number from 1 to 65535"),
            std::string::npos)
      << r.err;
  // NaN compares false with every bound: it once meant "no limit", an agent that never stopped
  auto nan = run({kEacgm, "agent", "--duration", "nan"}, {}, 20);
  EXPECT_EQ(nan.exit_code, 2) << nan.err;
  auto match = run({kEacgm, "agent", "--match", "train(", "--state-dir", dir_ + "/none"}, {}, 20);
  EXPECT_EQ(match.exit_code, 2) << match.err;
  EXPECT_NE(match.err.find("--match train(: not a regular expression"), std::string::npos)
      << match.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/none")) << "nothing made on a usage error";
  // --layers as record reads it: a stray comma is a typo (it was dropped silently before)
  auto layers = run({kEacgm, "agent", "--layers", "cuda,,host", "--state-dir", dir_ + "/none"},
                    {}, 20);
  EXPECT_EQ(layers.exit_code, 2) << layers.err;
  EXPECT_NE(layers.err.find("--layers cuda,,host: an empty element"), std::string::npos)
      << layers.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/none"));
  // the port the agent holds is refused with a line that says so
  auto busy = run({kEacgm, "agent", "--listen", "127.0.0.1:" + std::to_string(port_),
                   "--allow-second-agent", "--state-dir", dir_ + "/busy"},
                  {}, 20);
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_NE(busy.err.find("cannot listen on 127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << busy.err;
}

// Prometheus (Debian's 2.42) scrapes the agent every second; the increase of cudaMalloc calls
// it reports equals the calls the workload made (3 per run, 2 runs).
TEST_F(Agent, PrometheusSeesTheCallsTheWorkloadMade) {
  E2E_REQUIRE_CUDA();
  if (!std::filesystem::exists("/usr/bin/prometheus"))
    GTEST_SKIP() << "prometheus is not installed (scripts/setup.sh installs it)";
  int prom_port = free_port();
  std::string config = dir_ + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: eacgm\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << port_ << "']\n";
  Process prom({"/usr/bin/prometheus", "--config.file=" + config,
                "--storage.tsdb.path=" + dir_ + "/tsdb",
                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});
  ASSERT_TRUE(get_when_up(prom_port, "/-/ready", 30)) << prom.err();

  for (int i = 0; i < 2; ++i) {
    auto w = run({kWorkloads + "/cuda_api_calls"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
  }
  httplib::Client c("127.0.0.1", prom_port);
  const std::string query =
      "sum(eacgm_calls_total{layer=\"cuda\",op=\"cudaMalloc\",process=\"cuda_api_calls\"})";
  double value = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline && value != 6) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto r = c.Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
    if (!r || r->status != 200) continue;
    auto j = nlohmann::json::parse(r->body);
    const auto& result = j["data"]["result"];
    if (!result.empty()) value = std::stod(result[0]["value"][1].template get<std::string>());
  }
  EXPECT_EQ(value, 6) << "last answer to " << query;
  // every call of the run is in the latency histogram too
  auto r = c.Get("/api/v1/query",
                 httplib::Params{{"query",
                                  "sum(eacgm_call_duration_seconds_count{op=\"cudaMalloc\","
                                  "process=\"cuda_api_calls\"})"}},
                 httplib::Headers{});
  ASSERT_TRUE(r);
  auto j = nlohmann::json::parse(r->body);
  ASSERT_FALSE(j["data"]["result"].empty()) << r->body;
  EXPECT_EQ(std::stod(j["data"]["result"][0]["value"][1].template get<std::string>()), 6);
  kill(prom.pid(), SIGTERM);
  EXPECT_EQ(prom.wait(30), 0) << prom.err();
}

// Call series carry the job's identity from the launcher's environment (torchrun's names here),
// read at the process's first traced call (the demo loop runs long enough for it).
TEST_F(Agent, CallSeriesCarryTheJobAndRank) {
  E2E_REQUIRE_CUDA();
  if (!std::filesystem::exists(EACGM_DEMO_TRAIN)) GTEST_SKIP() << "no demo_train (needs nvcc)";
  auto w = run({EACGM_DEMO_TRAIN, "500"},
               {"RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=8", "TORCHELASTIC_RUN_ID=job42"});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  httplib::Client c("127.0.0.1", port_);
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (line.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto r = c.Get("/metrics");
    std::istringstream in(r ? r->body : "");
    for (std::string l; std::getline(in, l);)
      if (l.rfind("eacgm_calls_total{", 0) == 0 &&
          l.find("op=\"cudaLaunchKernel\"") != std::string::npos &&
          l.find("job42") != std::string::npos)  // not another demo loop on the node
        line = l;
  }
  ASSERT_FALSE(line.empty()) << "no cudaLaunchKernel series with the job's id";
  for (const char* label : {"job_id=\"job42\"", "rank=\"3\"", "local_rank=\"1\"",
                            "world_size=\"8\"", "process=\"demo_train\""})
    EXPECT_NE(line.find(label), std::string::npos) << label << " in: " << line;
}

// Collectives matched across the ranks on the node: in a two-rank Gloo loop where rank 1 arrives
// 10 ms late in about 40% of 300 steps (it writes down each delay), rank 1's straggling time is
// close to the delays it slept and rank 0's is small, and rank 0 waited for it.
TEST_F(Agent, StragglingRankIsNamedPerRank) {
  const std::string w = EACGM_WORKLOAD_SOURCES;
  std::string truth = dir_ + "/truth.json";
  auto r = run({"/usr/bin/python3", w + "/launch_ranks.py", "2",
                std::string(EACGM_SOURCE_DIR) + "/eval/workloads/gloo_straggler.py", "300", truth,
                "0.2", "0.8", "0.7", "10"},
               {}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto t = nlohmann::json::parse(std::ifstream(truth));
  size_t delays = t["intervals"].size();
  ASSERT_GT(delays, 50u);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  httplib::Client c("127.0.0.1", port_);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  double straggling1 =
      metric_sum(m->body, "eacgm_collective_straggling_seconds_total", "rank=\"1\"");
  double straggling0 =
      metric_sum(m->body, "eacgm_collective_straggling_seconds_total", "rank=\"0\"");
  double waited0 = metric_sum(m->body, "eacgm_collective_peer_wait_seconds_total", "rank=\"0\"");
  double slept = double(delays) * 0.010;
  printf(
      "%zu delays, %.3f s slept by rank 1; straggling: rank 1 %.3f s, rank 0 %.3f s; rank 0 "
      "waited %.3f s\n",
      delays, slept, straggling1, straggling0, waited0);
  EXPECT_GT(straggling1, 0.7 * slept) << m->body;
  EXPECT_LT(straggling1, 1.5 * slept + 0.5) << m->body;
  EXPECT_LT(straggling0, 0.3 * straggling1) << m->body;
  EXPECT_GT(waited0, 0.7 * slept) << m->body;
  EXPECT_GE(metric_sum(m->body, "eacgm_collective_last_joined_total", "rank=\"1\""), double(delays))
      << m->body;
}

// --match: only the matching program's calls are counted.
// Online, a rank that joins a collective late is named as detect names it (one rule: detect's
// explain_wait over instances matched as they come): a two-rank Gloo loop whose rank 1 arrives
// 30 ms late in 3% of the steps of its second half. The agent learns the first half (--warm-up 2
// and --train-seconds 8 instead of 10 and 30 s, to keep the test short); then what it reports on
// the collective is at late steps and names rank 1, by the pid the straggler wrote down, the
// host and the job (the launcher's run id), in the store and in its log line.
// What it reports at healthy steps as the collective's own time ("slow collective", no rank
// named: judged net of the wait for the last rank) is another claim, about the machine: bounded
// apart, not scored against the late steps (in one clean-clone CI run rank 0's healthy calls
// took 3.7 ms against their usual 1.1 ms all through the second half, 64 reported beside 181 late
// steps found and named; idle here, 0).
TEST_F(Agent, ALateRankIsNamedOnlineAsDetectNamesIt) {
  stop_agent();
  start_agent({"--warm-up", "2", "--train-seconds", "8"});
  const std::string w = EACGM_WORKLOAD_SOURCES;
  std::string truth = dir_ + "/truth.json";
  auto r = run({"/usr/bin/python3", w + "/launch_ranks.py", "2",
                std::string(EACGM_SOURCE_DIR) + "/eval/workloads/gloo_straggler.py", "12000",
                truth, "0.5", "1.0", "0.03", "30"},
               {"TORCHELASTIC_RUN_ID=late-e2e"}, 150);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the last flush and burst window
  const std::string agent_err = stop_agent_and_read_log();
  auto t = nlohmann::json::parse(std::ifstream(truth));
  LateSteps steps(t);
  const auto& late = steps.late;
  ASSERT_GT(late.size(), 60u) << "the premise: late steps to find";
  std::string named = fmt::format("rank 1 (pid {} on host ", t["pid"].get<int>());
  Db db(dir_ + "/state/anomalies.db");
  size_t comm = 0, at_late = 0, naming = 0, own_time = 0;
  std::string wrong;
  db.each("SELECT ts_ns, dur_ns, cause, found_ns FROM anomalies WHERE layer = 'comm'",
          [&](sqlite3_stmt* s) {
    int64_t ts = sqlite3_column_int64(s, 0), end = ts + sqlite3_column_int64(s, 1);
    std::string cause = reinterpret_cast<const char*>(sqlite3_column_text(s, 2));
    ++comm;
    bool hit = steps.on_late(ts, end, sqlite3_column_int64(s, 3));
    at_late += hit;
    bool names = cause.starts_with("straggling rank: gloo:all_reduce waited for a peer; ") &&
                 cause.find(named) != std::string::npos &&
                 cause.find(", job late-e2e) joined ") != std::string::npos &&
                 cause.ends_with("late (straggler)");
    naming += names;
    // a collective's own time at a healthy step: no late rank claimed
    own_time += !hit && cause.starts_with("slow collective: gloo:all_reduce") &&
                cause.find("(straggler)") == std::string::npos;
    // (when, against the first late step: before the fault or among the late steps)
    if (!hit || !names)
      wrong += fmt::format("\n  {:+.2f} s: {}", double(ts - late.front().first) / 1e9, cause);
  });
  printf("late steps %zu (in the second half), found %zu; collective anomalies %zu, at late steps "
         "%zu, naming rank 1 %zu, own time at healthy steps %zu; reported %.2f s after the late "
         "call (median), at most %.2f s%s\n",
         late.size(), steps.found.size(), comm, at_late, naming, own_time, steps.median_lag(),
         steps.max_lag(), wrong.c_str());
  ASSERT_GT(comm - own_time, 0u) << agent_err;
  // Reported in bursts (more late steps in 10 s than the usual share of slow calls explains),
  // which take along the window's other candidates (healthy slow calls: 1-8 of about 190 idle,
  // 25 of 206 beside a busy loop on CPU 0): what claims the collective waited for a rank is
  // scored against the late steps the workload wrote down, at issue 31's target (online F1 0.9);
  // and those at late steps named (rank 1's lateness is 30 ms against a healthy wait of about
  // 1 ms).
  double precision = double(at_late) / double(comm - own_time), recall = steps.recall();
  // on a miss, also how the agent judged the bursts it reported (its log's anomaly lines)
  std::string told;
  for (size_t at = 0, n = 0; (at = agent_err.find("eacgm: anomaly: ", at)) != std::string::npos && n < 40;
       ++n) {
    size_t end = agent_err.find('\n', at);
    told += "\n  " + agent_err.substr(at, end - at);
    at = end;
  }
  EXPECT_GE(2 * precision * recall / (precision + recall), 0.9)
      << "precision " << precision << ", recall " << recall << wrong << "\nthe agent said:" << told;
  EXPECT_GE(double(naming), 0.95 * double(at_late)) << wrong;
  // the collective's own time never the main story of a job whose rank is late
  EXPECT_LE(2 * own_time, at_late) << wrong << "\nthe agent said:" << told;
  EXPECT_NE(agent_err.find("eacgm: anomaly: straggling rank: gloo:all_reduce waited for a peer; " +
                            named),
            std::string::npos)
      << agent_err;
}

// Issue 31's own case, with plain `eacgm agent` (no option): a 2-rank Gloo job of 3,000 steps
// (~10 s here) whose rank 1 joins 30 ms late in 1% of them from the start. No model judges a
// job so short (10 s of warm-up, 30 s before a first model); its late rank is named all the
// same, from its own collectives (detect/young_stragglers.h): every anomaly at a late step,
// naming rank 1, reported within two 1 s windows of it; nothing else.
TEST_F(Agent, AStragglerInAShortJobIsNamedWithPlainDefaults) {
  const std::string w = EACGM_WORKLOAD_SOURCES;
  std::string truth = dir_ + "/truth.json";
  auto r = run({"/usr/bin/python3", w + "/launch_ranks.py", "2",
                std::string(EACGM_SOURCE_DIR) + "/eval/workloads/gloo_straggler.py", "3000",
                truth, "0", "1", "0.01", "30"},
               {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the last flush
  const std::string agent_err = stop_agent_and_read_log();
  auto t = nlohmann::json::parse(std::ifstream(truth));
  LateSteps steps(t);
  const auto& late = steps.late;
  ASSERT_GE(late.size(), 15u) << "the premise: late steps to find";
  std::string named = fmt::format("; rank 1 (pid {} on host ", t["pid"].get<int>());
  Db db(dir_ + "/state/anomalies.db");
  size_t all = 0, at_late = 0, naming = 0;
  std::string wrong;
  db.each("SELECT ts_ns, dur_ns, cause, found_ns FROM anomalies", [&](sqlite3_stmt* s) {
    int64_t ts = sqlite3_column_int64(s, 0), end = ts + sqlite3_column_int64(s, 1);
    std::string cause = reinterpret_cast<const char*>(sqlite3_column_text(s, 2));
    ++all;
    bool hit = steps.on_late(ts, end, sqlite3_column_int64(s, 3));
    at_late += hit;
    bool names = cause.starts_with("straggling rank: gloo:all_reduce waited for a peer; ") &&
                 cause.find(named) != std::string::npos && cause.ends_with("late (straggler)");
    naming += names;
    if (!hit || !names)
      wrong += fmt::format("\n  {:+.2f} s: {}", double(ts - late.front().first) / 1e9, cause);
  });
  double median_lag = steps.median_lag();
  printf("late steps %zu, found %zu; anomalies %zu, at late steps %zu, naming rank 1 %zu; "
         "reported %.2f s after the late call (median), at most %.2f s%s\n",
         late.size(), steps.found.size(), all, at_late, naming, median_lag, steps.max_lag(),
         wrong.c_str());
  ASSERT_GT(all, 0u) << "the straggler went unnamed";
  double precision = double(at_late) / double(all), recall = steps.recall();
  // (the job's first half second is not judged: its ranks meet there for the first time)
  EXPECT_GE(2 * precision * recall / (precision + recall), 0.9)
      << "precision " << precision << ", recall " << recall << wrong;
  EXPECT_EQ(naming, all) << wrong;
  EXPECT_LE(median_lag, 2.0);
  EXPECT_NE(agent_err.find("eacgm: anomaly: straggling rank: gloo:all_reduce waited for a peer" + named),
            std::string::npos)
      << agent_err;
}

// The agent models each kernel's time on the GPU by its name, as detect does (the gputime layer
// without a GPU: workloads/gputime_emitter.cpp's made-up CUPTI records through the injection
// library's batcher and eacgm's uprobe, in real time): 14 s of two kernels at 0.2 ms, then 4 s
// in which every 20th execution of one of them takes 5 ms. The slow ones are named, by the
// kernel, and nothing else is; no kernel name becomes a /metrics label.
TEST_F(Agent, ASlowKernelIsNamedOnlineAsDetectNamesIt) {
#ifndef EACGM_HAVE_GPUTIME
  GTEST_SKIP() << "eacgm was built without CUPTI's headers (no gputime layer)";
#endif
  stop_agent();
  start_agent({"--warm-up", "2", "--train-seconds", "8"});
  auto r = run({kWorkloads + "/gputime_emitter", "--paced", "14", "4"}, {}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto truth = nlohmann::json::parse(r.out);
  ASSERT_GT(truth["slow"].get<int>(), 50) << r.out;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the last flush and burst window
  auto metrics = get_when_up(port_, "/metrics", 10);
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->find("eacgm_plain_c_kernel"), std::string::npos);
  EXPECT_EQ(metrics->find("eacgm_test_axpy"), std::string::npos);
  stop_agent();
  Db db(dir_ + "/state/anomalies.db");
  const std::string slow_from = std::to_string(truth["slow_from_ns"].get<int64_t>());
  // (cause, duration, in the slow phase) -> anomalies
  auto found = db.pairs("SELECT cause || ' ' || dur_ns || ' ' || (ts_ns >= " + slow_from +
                        "), count(*) FROM anomalies WHERE layer = 'gpu' GROUP BY 1");
  ASSERT_EQ(found.size(), 1u) << found.size() << " kinds; first: " << found.begin()->first;
  EXPECT_EQ(found.begin()->first, "slow kernel: eacgm_plain_c_kernel 5000000 1");
  EXPECT_GE(found.begin()->second, 5);
}

TEST_F(Agent, MatchLeavesOtherProcessesOut) {
  E2E_REQUIRE_CUDA();
  if (!std::filesystem::exists(EACGM_DEMO_TRAIN)) GTEST_SKIP() << "no demo_train (needs nvcc)";
  stop_agent();
  start_agent({"--match", "cuda_api_c[a-z]+$"});
  ASSERT_EQ(run({kWorkloads + "/cuda_api_calls"}).exit_code, 0);
  ASSERT_EQ(run({EACGM_DEMO_TRAIN, "200"}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  httplib::Client c("127.0.0.1", port_);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(
      metric_sum(m->body, "eacgm_calls_total", "op=\"cudaMalloc\",process=\"cuda_api_calls\""), 3)
      << m->body;
  EXPECT_EQ(m->body.find("process=\"demo_train\""), std::string::npos) << m->body;
}

// Process churn leaves nothing behind: after 30 short traced processes the agent holds the
// same fds (BPF links and maps are fds; sockets are left out: HTTP connections come and go) as
// after the first (the fewest of ten looks: files the agent reads come and go), traces no
// process, and exports no per-process series of the exited ones.
TEST_F(Agent, ChurnLeavesNoTraceOfExitedProcesses) {
  E2E_REQUIRE_CUDA();
  auto fds_now = [&] {
    size_t n = 0;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(agent_->pid()) + "/fd")) {
      std::error_code ec;
      n += std::filesystem::read_symlink(e.path(), ec).string().rfind("socket:", 0) != 0;
    }
    return n;
  };
  auto fds = [&] {
    size_t fewest = SIZE_MAX;
    for (int i = 0; i < 10; ++i) {
      fewest = std::min(fewest, fds_now());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return fewest;
  };
  httplib::Client c("127.0.0.1", port_);
  auto traced_now = [&] {
    auto r = c.Get("/metrics");
    std::istringstream in(r ? r->body : "");
    for (std::string l; std::getline(in, l);)
      if (l.rfind("eacgm_agent_traced_processes ", 0) == 0) return std::stod(l.substr(l.find(' ')));
    return -1.0;
  };
  auto settle = [&] {  // the agent's stats are refreshed every 0.5 s
    for (int i = 0; i < 50 && traced_now() != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  ASSERT_EQ(run({kWorkloads + "/cuda_api_calls"}).exit_code, 0);
  settle();
  size_t before = fds();
  std::set<std::string> pids;
  for (int i = 0; i < 30; ++i) {
    Process p({kWorkloads + "/cuda_api_calls"});
    pids.insert(std::to_string(p.pid()));
    ASSERT_EQ(p.wait(30), 0);
  }
  settle();
  EXPECT_EQ(traced_now(), 0);
  EXPECT_EQ(fds(), before);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(
      metric_sum(m->body, "eacgm_calls_total", "op=\"cudaMalloc\",process=\"cuda_api_calls\""), 93)
      << "31 runs of 3 calls, one series";
  std::istringstream in(m->body);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("eacgm_process_", 0) == 0)
      for (const auto& pid : pids) EXPECT_EQ(l.find("pid=\"" + pid + "\""), std::string::npos) << l;
}

// --call-duty 1s/3s: the torch layer's probes are on the first second of every three. A PyTorch
// loop that calls operators all along is counted in bursts: its count stands still for most of
// each off phase (2 s), and grows again after it (the probes came back, through the file the
// agent holds open); the share is on /metrics; nothing went wrong attaching them again.
TEST_F(Agent, CallDutyTakesTheHotProbesOffBetweenItsOnPhases) {
  stop_agent();
  start_agent({"--call-duty", "1s/3s"});
  Process loop({"/usr/bin/python3", "-c",
                "import time, torch\n"
                "t = torch.ones(8, 8)\n"
                "end = time.time() + 11\n"
                "while time.time() < end: t.matmul(t)\n"});
  httplib::Client c("127.0.0.1", port_);
  auto torch_calls = [&] {
    auto r = c.Get("/metrics");
    return r ? metric_sum(r->body, "eacgm_calls_total", "layer=\"torch\"") : -1.0;
  };
  // from the first operator counted, 8 s of counts every 50 ms
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (torch_calls() <= 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GT(torch_calls(), 0) << agent_->err();
  std::vector<std::pair<double, double>> counts;  // (seconds since the first, count)
  auto start = std::chrono::steady_clock::now();
  for (double s = 0; s < 8; s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) {
    counts.push_back({s, torch_calls()});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  double longest_still = 0, still_since = 0;
  int bursts = 0;  // growths after a second or more without
  for (size_t i = 1; i < counts.size(); ++i) {
    if (counts[i].second == counts[i - 1].second) continue;
    double still = counts[i - 1].first - still_since;
    longest_still = std::max(longest_still, still);
    bursts += still >= 1.0;
    still_since = counts[i].first;
  }
  longest_still = std::max(longest_still, counts.back().first - still_since);
  EXPECT_GE(longest_still, 1.5) << "the count never stood still through an off phase";
  EXPECT_GE(bursts, 2) << "the probes did not come back after the off phases";
  EXPECT_EQ(loop.wait(30), 0) << loop.err();
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NEAR(metric_sum(m->body, "eacgm_call_duty_ratio", "layer=\"torch\""), 1.0 / 3, 1e-6);
  // no call of the loop took a second: an entry from before a pause is never paired with a
  // return after the probes came back (a call of the same operator at the same stack depth
  // returning while the entries were not back yet once made an 18 s aten::linear)
  double calls = metric_sum(m->body, "eacgm_call_duration_seconds_count", "layer=\"torch\"");
  EXPECT_GT(calls, 0);
  EXPECT_EQ(metric_sum(m->body, "eacgm_call_duration_seconds_bucket", "le=\"1.048576\""), calls)
      << m->body;
  std::string log = stop_agent_and_read_log();
  EXPECT_NE(log.find("traced 1 s of every 3 s (--call-duty)"), std::string::npos) << log;
  EXPECT_EQ(log.find("--call-duty:"), std::string::npos) << log;
  auto bad = run({kEacgm, "agent", "--call-duty", "3s/2s", "--state-dir", dir_ + "/none"}, {}, 20);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--call-duty"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/none"));
}

// Plain agent (--call-duty auto): a light PyTorch loop (~700 operators a second) keeps every
// call (its 2,000 matmuls are all counted, the share stays 1); a hot one (tens of thousands a
// second) has the probes cycled, 2 s of every 20 s: its count stands still through an off
// phase, and the share on /metrics is 0.1.
TEST_F(Agent, AutoCallDutyCyclesOnlyWhileAThreadIsHot) {
  httplib::Client c("127.0.0.1", port_);
  auto metric = [&](const std::string& name, const std::string& labels) {
    auto r = c.Get("/metrics");
    return r ? metric_sum(r->body, name, labels) : -1.0;
  };
  auto light = run({"/usr/bin/python3", "-c",
                    "import time, torch\n"
                    "t = torch.ones(8, 8)\n"
                    "for _ in range(2000): t.matmul(t); time.sleep(0.001)\n"},
                   {}, 60);
  ASSERT_EQ(light.exit_code, 0) << light.err;
  double matmuls = 0;
  for (int i = 0; i < 40 && matmuls < 2000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    matmuls = metric("eacgm_calls_total", "op=\"aten::matmul\"");
  }
  EXPECT_EQ(matmuls, 2000) << "a light job loses no call";
  EXPECT_EQ(metric("eacgm_call_duty_ratio", "layer=\"torch\""), 1.0);

  Process loop({"/usr/bin/python3", "-c",
                "import time, torch\n"
                "t = torch.ones(8, 8)\n"
                "end = time.time() + 40\n"
                "while time.time() < end: t.matmul(t)\n"});
  double ratio = 1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ratio != 0.1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ratio = metric("eacgm_call_duty_ratio", "layer=\"torch\"");
  }
  EXPECT_NEAR(ratio, 0.1, 1e-9) << "the hot loop did not have the probes cycled";
  // an off phase is 18 s: 4 s without a new count in the next 10 s
  double still = 0, last = metric("eacgm_calls_total", "layer=\"torch\"");
  auto since = std::chrono::steady_clock::now();
  for (auto end = since + std::chrono::seconds(10); std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    double now = metric("eacgm_calls_total", "layer=\"torch\"");
    if (now != last) last = now, since = std::chrono::steady_clock::now();
    still = std::max(still, std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
  }
  EXPECT_GE(still, 4.0);
  kill(loop.pid(), SIGTERM);
  loop.wait(10);
  std::string log = stop_agent_and_read_log();
  EXPECT_EQ(log.find("--call-duty"), std::string::npos) << "nothing to say when all is well: " << log;
}

// A flight recording asked for over HTTP (root, from loopback) and by SIGUSR1 is an ordinary
// recording of the calls the workload made before: `eacgm report` reads it.
TEST_F(Agent, FlightRecordingOnDemandIsAnOrdinaryRecording) {
  E2E_REQUIRE_CUDA();
  stop_agent();
  start_agent({"--dump-interval", "0"});  // both asked for at once (the default is one a minute)
  auto w = run({kWorkloads + "/cuda_api_calls"});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // decoded
  httplib::Client c("127.0.0.1", port_);
  auto r = c.Post("/dump", "", "text/plain");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string path = r->body.substr(0, r->body.find('\n'));
  EXPECT_EQ(path.rfind(dir_ + "/state/flight-", 0), 0u) << path;
  EXPECT_NE(path.find("-http.eacgm.db"), std::string::npos) << path;
  kill(agent_->pid(), SIGUSR1);
  EXPECT_TRUE(agent_->wait_for_stderr("SIGUSR1: writing flight recording", 5)) << agent_->err();
  stop_agent();  // waits for the recordings being written
  auto report = run({kEacgm, "report", path});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("flight recording (http)"), std::string::npos) << report.out;
  EXPECT_EQ(report.out.find("not finished"), std::string::npos) << report.out;  // it is whole
  std::istringstream lines(report.out);
  bool malloc_line = false;
  for (std::string line; std::getline(lines, line);)
    if (line.find("cudaMalloc ") != std::string::npos) {
      malloc_line = true;
      EXPECT_NE(line.find(" 3 "), std::string::npos) << line;  // the 3 the workload made
    }
  EXPECT_TRUE(malloc_line) << report.out;
  size_t signal_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/state"))
    signal_files += e.path().filename().string().find("-signal.eacgm.db") != std::string::npos;
  EXPECT_EQ(signal_files, 1u);
}

// The sum of a metric's series on /metrics whose labels contain `labels`; 0 when none.
double metric_sum(const std::string& text, const std::string& name, const std::string& labels) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + "{", 0) == 0 && line.find(labels) != std::string::npos)
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

// Online detection: a traced CUDA loop on CPU 0 runs steadily while the window model learns
// (30 windows of 0.5 s); then two busy processes take CPU 0. The anomaly counter with cause "CPU
// interference" rises on /metrics within seconds (the time is printed), with a log line naming
// the job's process and a row in the state dir's store; the models saved at stop (the job
// running on) are resumed by the next agent.
TEST_F(Agent, CpuHogBesideATracedJobIsAnAnomalyWithItsCause) {
  E2E_REQUIRE_CUDA();
  if (!std::filesystem::exists(EACGM_DEMO_TRAIN)) GTEST_SKIP() << "no demo_train (needs nvcc)";
  stop_agent();
  start_agent({"--window", "0.5", "--train-windows", "30", "--train-calls", "100"});
  // (long enough to outlive the agent's stop and restart below: 40,000 steps took 84 s
  // untraced, and this test may take 70 s before the restart; it is ended at the test's end)
  Process job({EACGM_DEMO_TRAIN, "400000", "0"});
  httplib::Client c("127.0.0.1", port_);
  auto cpu_anomalies = [&] {
    auto r = c.Get("/metrics");
    return r ? metric_sum(r->body, "eacgm_anomalies_total",
                          "cause=\"CPU interference\",layer=\"window\"")
             : -1;
  };
  ASSERT_NO_FATAL_FAILURE(wait_for_window_model());
  double before = cpu_anomalies();
  auto onset = std::chrono::steady_clock::now();
  auto hogs = cpu_hogs();
  double after = before;
  double seconds = -1;
  while (std::chrono::steady_clock::now() - onset < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = cpu_anomalies();
    if (after > before) {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - onset).count();
      break;
    }
  }
  for (auto& h : hogs) h->wait(10);
  auto last = c.Get("/metrics");
  ASSERT_GT(after, before) << "no CPU interference anomaly on /metrics within 10 s\n"
                           << agent_->err() << (last ? last->body : "");
  // the latency's target is bench/detection_latency.sh's (timings are no unit test's business)
  printf("fault to anomaly on /metrics: %.2f s\n", seconds);
  EXPECT_TRUE(
      agent_->wait_for_stderr("eacgm: anomaly: CPU interference in demo_train (pid " +
                                  std::to_string(job.pid()) + "), 0.5 s window", 5))
      << agent_->err();
  // the first anomaly's line names the flight recording written 10 s later
  EXPECT_TRUE(agent_->wait_for_stderr("; flight recording " + dir_ + "/state/flight-", 1))
      << agent_->err();
  // the agent stops while the job runs on (its window model is saved with the rest)
  ASSERT_EQ(kill(job.pid(), 0), 0) << "the job ended early";
  stop_agent();
  // the store holds it, readable with sqlite3
  sqlite3* db = nullptr;
  ASSERT_EQ(
      sqlite3_open_v2((dir_ + "/state/anomalies.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
      SQLITE_OK);
  sqlite3_stmt* count = nullptr;
  // (a window's row names its job: here the one process; and who had the CPUs it waited for,
  // the two hogs, `sh` both)
  std::string query =
      "SELECT count(*) FROM anomalies WHERE cause LIKE 'CPU interference%' AND cause LIKE "
      "'%; mostly behind sh (%' AND layer = 'window' AND process = 'demo_train (pid " +
      std::to_string(job.pid()) + ")'";
  ASSERT_EQ(sqlite3_prepare_v2(db, query.c_str(), -1, &count, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  EXPECT_GE(sqlite3_column_int(count, 0), 1);
  sqlite3_finalize(count);
  // the first anomaly (maybe an earlier one than the hog's) is in a flight recording
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT recording FROM anomalies WHERE recording IS NOT NULL "
                               "ORDER BY rowid LIMIT 1",
                               -1, &count, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  std::string flight = reinterpret_cast<const char*>(sqlite3_column_text(count, 0));
  sqlite3_finalize(count);
  sqlite3_close(db);
  EXPECT_TRUE(std::filesystem::exists(flight)) << flight;
  auto report = run({kEacgm, "report", flight});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("cudaLaunchKernel"), std::string::npos) << report.out;
  // a restart resumes the models instead of learning again
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/state/models.json"));
  start_agent({"--window", "0.5"});
  EXPECT_TRUE(agent_->wait_for_stderr("models from " + dir_ + "/state/models.json", 5))
      << agent_->err();
  EXPECT_EQ(agent_->err().find("resumed 0 models"), std::string::npos) << agent_->err();
  kill(job.pid(), SIGTERM);
  job.wait(10);
}

const std::string kDeploy = std::string(EACGM_SOURCE_DIR) + "/deploy";

// Prometheus's answer to a PromQL query: the number of series, or -1 on failure.
int series_count(int prom_port, const std::string& query, std::string* body = nullptr) {
  httplib::Client c("127.0.0.1", prom_port);
  auto r = c.Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
  if (!r || r->status != 200) return -1;
  if (body) *body = r->body;
  auto j = nlohmann::json::parse(r->body);
  return int(j["data"]["result"].size());
}

// What Prometheus holds of a query over the last `seconds` (each series' labels, then its samples
// as "seconds-ago:value"): the agent's own view of a window, for a failure's message.
std::string prom_history(int prom_port, const std::string& query, int seconds) {
  httplib::Client c("127.0.0.1", prom_port);
  auto r = c.Get("/api/v1/query",
                 httplib::Params{{"query", query + "[" + std::to_string(seconds) + "s]"}},
                 httplib::Headers{});
  if (!r || r->status != 200) return query + ": no answer from Prometheus\n";
  std::string out;
  double now = double(std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()) /
               1e3;
  auto answer = nlohmann::json::parse(r->body);
  for (const auto& series : answer["data"]["result"]) {
    out += series["metric"].dump() + ":";
    for (const auto& v : series["values"])
      out += fmt::format(" {:.0f}:{}", now - v[0].get<double>(), v[1].get<std::string>());
    out += "\n";
  }
  return out.empty() ? query + ": no series\n" : out;
}

// deploy/ as shipped: the systemd unit verifies (with eacgm where the unit expects it), the
// alert rules and the scrape config check, every alert's unit test passes, the DaemonSet and
// the dashboard parse, and the DaemonSet asks for the capabilities the unit grants, no more.
TEST(Deploy, UnitRulesConfigAndManifestsAreValid) {
  std::string dir = scratch_dir();
  if (!std::filesystem::exists("/usr/bin/promtool"))
    GTEST_SKIP() << "promtool is not installed (scripts/setup.sh installs prometheus)";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"/usr/bin/promtool", "check", "rules", kDeploy + "/prometheus/eacgm-rules.yml"},
           {"/usr/bin/promtool", "check", "config", kDeploy + "/prometheus/prometheus.yml"},
           {"/usr/bin/promtool", "test", "rules", kDeploy + "/prometheus/eacgm-rules.test.yml"}}) {
    auto r = run(args);
    EXPECT_EQ(r.exit_code, 0) << args[1] << " " << args[2] << ":\n" << r.out << r.err;
  }
  // systemd-analyze verify wants ExecStart's binary to exist: the unit with eacgm's path here
  std::ifstream in(kDeploy + "/systemd/eacgm-agent.service");
  std::string unit((std::istreambuf_iterator<char>(in)), {});
  std::string caps;
  std::istringstream lines(unit);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("CapabilityBoundingSet=", 0) == 0) caps = line.substr(line.find('=') + 1);
  EXPECT_EQ(caps,
            "CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_SYS_RESOURCE CAP_SYSLOG");
  size_t at = unit.find("/usr/local/bin/eacgm agent");
  ASSERT_NE(at, std::string::npos);
  unit.replace(at, std::string("/usr/local/bin/eacgm").size(), kEacgm);
  std::ofstream(dir + "/eacgm-agent.service") << unit;
  if (std::filesystem::exists("/usr/bin/systemd-analyze")) {
    auto v = run({"/usr/bin/systemd-analyze", "verify", dir + "/eacgm-agent.service"});
    EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
    EXPECT_EQ(v.err, "") << "warnings from systemd-analyze";
  }
  // the DaemonSet: host PID namespace, not privileged, the unit's capabilities
  auto y = run({"/usr/bin/python3", "-c",
                "import yaml, sys\n"
                "d = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x['kind'] == "
                "'DaemonSet'][0]\n"
                "s = d['spec']['template']['spec']\n"
                "c = s['containers'][0]['securityContext']\n"
                "print(s['hostPID'], c['privileged'], ' '.join('CAP_' + x for x in "
                "c['capabilities']['add']), c['capabilities']['drop'])",
                kDeploy + "/kubernetes/eacgm-agent.yaml"});
  ASSERT_EQ(y.exit_code, 0) << y.err;
  EXPECT_EQ(y.out, "True False " + caps + " ['ALL']\n");
  // the dashboard: every panel has a query
  auto dash = nlohmann::json::parse(std::ifstream(kDeploy + "/grafana/eacgm-node.json"));
  size_t panels = 0;
  for (const auto& p : dash["panels"]) {
    if (p["type"] == "row") continue;
    ++panels;
    ASSERT_FALSE(p["targets"].empty()) << p["title"];
  }
  EXPECT_GE(panels, 15u);
}

// The whole stack with real components: the agent (a fake NVML for the GPU gauges) scraped every
// second by Prometheus with deploy/'s rules, alerting through Alertmanager to a webhook this
// test runs. A CPU hog beside a traced CUDA loop must reach the webhook as EacgmResourceAnomaly
// with cause "CPU interference" (the time from fault to alert is printed), and every query of
// deploy/'s Grafana dashboard must answer with a series.
TEST_F(Agent, CpuHogAlertReachesAlertmanagerAndEveryDashboardPanelAnswers) {
  E2E_REQUIRE_CUDA();
  for (const char* tool : {"/usr/bin/prometheus", "/usr/bin/prometheus-alertmanager"})
    if (!std::filesystem::exists(tool))
      GTEST_SKIP() << tool << " is not installed (scripts/setup.sh installs it)";
  if (!std::filesystem::exists(EACGM_DEMO_TRAIN)) GTEST_SKIP() << "no demo_train (needs nvcc)";
  // the webhook receiver
  std::mutex mu;
  std::vector<std::pair<std::chrono::steady_clock::time_point, nlohmann::json>> received;
  httplib::Server hook;
  hook.Post("/alert", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    received.emplace_back(std::chrono::steady_clock::now(), nlohmann::json::parse(req.body));
    res.status = 200;
  });
  int hook_port = hook.bind_to_any_port("127.0.0.1");
  std::thread hook_thread([&] { hook.listen_after_bind(); });
  struct StopHook {
    httplib::Server& s;
    std::thread& t;
    ~StopHook() { s.stop(), t.join(); }
  } stop_hook{hook, hook_thread};

  int am_port = free_port(), prom_port = free_port();
  std::ofstream(dir_ + "/alertmanager.yml")
      << "route:\n  receiver: hook\n  group_by: [alertname, instance, cause]\n"
      << "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
      << "receivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:"
      << hook_port << "/alert\n        send_resolved: false\n";
  Process am({"/usr/bin/prometheus-alertmanager", "--config.file=" + dir_ + "/alertmanager.yml",
              "--storage.path=" + dir_ + "/am", "--cluster.listen-address=",
              "--web.listen-address=127.0.0.1:" + std::to_string(am_port)});
  ASSERT_TRUE(get_when_up(am_port, "/-/ready", 30)) << am.err();
  std::filesystem::copy_file(kDeploy + "/prometheus/eacgm-rules.yml", dir_ + "/eacgm-rules.yml");
  std::ofstream(dir_ + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "rule_files: [eacgm-rules.yml]\n"
      << "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['127.0.0.1:"
      << am_port << "']\n"
      << "scrape_configs:\n  - job_name: eacgm\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << port_ << "']\n";
  Process prom({"/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml",
                "--storage.tsdb.path=" + dir_ + "/tsdb",
                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});
  ASSERT_TRUE(get_when_up(prom_port, "/-/ready", 30)) << prom.err();

  // the agent, with one fake GPU
  std::ofstream(dir_ + "/nvml.script")
      << "devices 1\nname 0 Fake H100\nuuid 0 GPU-0000aaaa\npci 0 00000000:17:00.0\n"
      << "utilization 0 10:20\nmemory 0 1073741824:85899345920\ntemperature 0 61\n"
      << "power_instant 0 250500\npower 0 1\npower_limit 0 700000\n"
      << "clock_sm 0 1980\nclock_mem 0 2619\nclocks_event 0 0 68\n";
  stop_agent();
  start_agent({"--window", "0.5", "--train-windows", "30", "--train-calls", "100", "--nvml-library",
               std::string(EACGM_FAKE_NVML_DIR) + "/full/libnvidia-ml.so.1"},
              {"EACGM_FAKE_NVML_SCRIPT=" + dir_ + "/nvml.script"});
  Process job({EACGM_DEMO_TRAIN, "40000", "0"});
  // The window model learns the CUDA job alone: a Gloo job of two ranks on this 2-core machine
  // while it learnt (as this test once ran) made windows of CPUs taken by other traced threads
  // usual, so the hog's were not always unusual (one loop run of session 31: no alert in 30 s).
  ASSERT_NO_FATAL_FAILURE(wait_for_window_model());
  auto onset = std::chrono::steady_clock::now();
  auto hogs = cpu_hogs();
  double seconds = -1;
  std::string labels;
  while (seconds < 0 && std::chrono::steady_clock::now() - onset < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard lock(mu);
    for (const auto& [when, body] : received)
      for (const auto& a : body["alerts"]) {
        labels += a["labels"].dump() + "\n";
        if (a["labels"]["alertname"] == "EacgmResourceAnomaly" &&
            a["labels"]["cause"] == "CPU interference" && a["status"] == "firing")
          seconds = std::chrono::duration<double>(when - onset).count();
      }
  }
  for (auto& h : hogs) h->wait(10);
  if (seconds < 0) {
    // what the agent saw and learnt, for the message: its window scores as Prometheus scraped
    // them, and (once stopped, which saves them) the window model
    std::string seen =
        prom_history(prom_port, "eacgm_detector_last_score{layer=\"window\"}", 60) +
        prom_history(prom_port, "eacgm_detector_threshold{layer=\"window\"}", 60) +
        prom_history(prom_port, "eacgm_anomalies_total{cause=\"CPU interference\"}", 60) +
        prom_history(prom_port, "eacgm_process_cpu_seconds_total", 60) +
        prom_history(prom_port, "eacgm_process_runqueue_wait_seconds_total", 60);
    std::string err = agent_->err();
    stop_agent();
    std::string model = "no window model saved";
    try {
      auto saved = nlohmann::json::parse(std::ifstream(dir_ + "/state/models.json"));
      for (const auto& g : saved["groups"])
        if (g["layer"] == "window") model = g.dump();
    } catch (const std::exception& e) {
      model = e.what();
    }
    FAIL() << "no EacgmResourceAnomaly for CPU interference at the webhook in 30 s; received:\n"
           << labels << err << "the agent as scraped (s ago:value):\n"
           << seen << "its window model: " << model;
  }
  printf("fault to alert at the webhook (agent -> Prometheus -> Alertmanager): %.2f s\n", seconds);

  // collectives for the dashboard's comm panels: a short two-rank Gloo job, scraped while it runs
  const std::string w = EACGM_WORKLOAD_SOURCES;
  auto gloo = run({"/usr/bin/python3", w + "/launch_ranks.py", "2", w + "/gloo_train.py", "3"});
  EXPECT_EQ(gloo.exit_code, 0) << gloo.err;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // two more scrapes of its last counts

  // every panel of the dashboard answers
  auto dash = nlohmann::json::parse(std::ifstream(kDeploy + "/grafana/eacgm-node.json"));
  for (const auto& p : dash["panels"])
    for (const auto& t : p.value("targets", nlohmann::json::array())) {
      std::string q = t["expr"];
      for (auto [from, to] :
           {std::pair<std::string, std::string>{"$instance", ".*"}, {"$__rate_interval", "1m"}})
        for (size_t at; (at = q.find(from)) != std::string::npos;) q.replace(at, from.size(), to);
      std::string body;
      EXPECT_GT(series_count(prom_port, q, &body), 0)
          << "panel \"" << p["title"].get<std::string>() << "\": " << q << "\n"
          << body;
    }
  kill(job.pid(), SIGTERM);
  job.wait(10);
  kill(prom.pid(), SIGTERM);
  EXPECT_EQ(prom.wait(30), 0) << prom.err();
  kill(am.pid(), SIGTERM);
  EXPECT_EQ(am.wait(30), 0) << am.err();
}

// The fleet view of a job across nodes, as deploy/ sets it up: two nodes (network namespaces on
// one bridge: NodePair), each with its own agent listening on its node's address, two ranks each
// (launch_ranks.py's node mode; each agent keeps its node's ranks by --match, as BPF here sees
// every process of the one kernel), and one real Prometheus scraping both agents with
// deploy/'s prometheus.yml intervals and eacgm-rules.yml. The job is healthy for its first 20 s;
// then rank 3, on the second node, arrives 20 ms late in half of the steps. EacgmJobStraggler
// names rank 3 on the second node's agent within the rules' own bound (a scrape, an evaluation
// of the job rules and the alert's 30 s: 55 s at deploy/'s 15 s scrape; issue 31's 60 s), not
// before the straggling began, and no other rank ever.
TEST_F(Agent, JobStragglerAcrossNodesIsNamedByTheFleetRules) {
  if (!std::filesystem::exists("/usr/bin/prometheus"))
    GTEST_SKIP() << "prometheus is not installed (scripts/setup.sh installs it)";
  NodePair nodes(true);
  if (!nodes.ok()) GTEST_SKIP() << "cannot create network namespaces and a bridge here";
  stop_agent();
  std::unique_ptr<Process> agents[2];
  std::string targets[2];
  for (int n = 0; n < 2; ++n) {
    targets[n] = NodePair::address(n) + ":9464";
    std::vector<std::string> argv{"/usr/sbin/ip", "netns", "exec", nodes.ns(n), kEacgm, "agent", "--listen",
                                  targets[n], "--duration", "150", "--state-dir",
                                  dir_ + "/state-" + std::to_string(n), "--match",
                                  "straggler-node" + std::to_string(n)};
    if (n) argv.push_back("--allow-second-agent");  // (one kernel: the node lock is shared)
    agents[n] = std::make_unique<Process>(argv);
    ASSERT_TRUE(agents[n]->wait_for_stderr("agent tracing this node", 30)) << agents[n]->err();
    httplib::Client c(NodePair::address(n), 9464);
    c.set_connection_timeout(2);
    auto r = c.Get("/metrics");
    ASSERT_TRUE(r && r->status == 200) << "agent " << n << " not reachable over the bridge";
  }

  // deploy/'s intervals (the job rules' group has its own, 10 s, in the rules file)
  std::ifstream deploy_conf(kDeploy + "/prometheus/prometheus.yml");
  std::string conf((std::istreambuf_iterator<char>(deploy_conf)), {});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(conf, m, std::regex(R"(scrape_interval: (\d+)s)"))) << conf;
  const int scrape_s = std::stoi(m[1]);
  ASSERT_TRUE(std::regex_search(conf, m, std::regex(R"(evaluation_interval: (\d+)s)"))) << conf;
  const int evaluation_s = std::stoi(m[1]);
  int prom_port = free_port();
  std::filesystem::copy_file(kDeploy + "/prometheus/eacgm-rules.yml", dir_ + "/eacgm-rules.yml");
  std::ofstream(dir_ + "/prometheus.yml")
      << "global:\n  scrape_interval: " << scrape_s << "s\n  evaluation_interval: " << evaluation_s
      << "s\nrule_files: [eacgm-rules.yml]\n"
      << "scrape_configs:\n  - job_name: eacgm\n    static_configs:\n"
      << "      - targets: ['" << targets[0] << "', '" << targets[1] << "']\n";
  Process prom({"/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml",
                "--storage.tsdb.path=" + dir_ + "/tsdb",
                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});
  ASSERT_TRUE(get_when_up(prom_port, "/-/ready", 30)) << prom.err();

  // 100 s; rank 3 late by 20 ms in half the steps from 20 s on
  const std::string w = EACGM_WORKLOAD_SOURCES;
  Process job({"/usr/bin/python3", w + "/launch_ranks.py", "2",
               std::string(EACGM_SOURCE_DIR) + "/eval/workloads/gloo_straggler.py", "100s",
               dir_ + "/straggler-node{node}.json", "0.2", "1", "0.5", "20", "3"},
              {"LAUNCH_NNODES=2", "LAUNCH_NETNS=" + nodes.netns(), "LAUNCH_IFNAMES=" + nodes.devs(),
               "LAUNCH_MASTER_ADDR=" + NodePair::address(0), "LAUNCH_HOSTNAMES=node-a,node-b",
               "TORCHELASTIC_RUN_ID=fleet-e2e"});
  // while it runs (an agent forgets a process's series when it exits): when the alert first
  // showed (pending) and fired, by CLOCK_MONOTONIC, the clock of the straggler's truth file
  auto mono_ns = [] {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
  };
  std::string busy, alerts;
  int ranks_seen = 0;
  int64_t pending_ns = 0, firing_ns = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(100);
  while (firing_ns == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    int64_t now = mono_ns();
    ranks_seen = std::max(ranks_seen, series_count(prom_port, "eacgm:collective_busy:ratio_rate1m{job_id=\"fleet-e2e\"}", &busy));
    if (!pending_ns && series_count(prom_port, "ALERTS{alertname=\"EacgmJobStraggler\"}") > 0)
      pending_ns = now;
    if (series_count(prom_port, "ALERTS{alertname=\"EacgmJobStraggler\",alertstate=\"firing\"}",
                     &alerts) > 0)
      firing_ns = now;
  }
  ASSERT_GT(firing_ns, 0) << "EacgmJobStraggler not firing; busy ratios: " << busy
                          << "\nalerts: " << alerts << agents[0]->err() << agents[1]->err();
  EXPECT_EQ(ranks_seen, 4) << busy;
  auto a = nlohmann::json::parse(alerts)["data"]["result"][0]["metric"];  // a copy
  EXPECT_EQ(a["rank"], "3") << alerts;
  EXPECT_EQ(a["instance"], targets[1]) << alerts;
  EXPECT_EQ(a["job_id"], "fleet-e2e") << alerts;
  // each rank from its own node's agent
  auto busy_series = nlohmann::json::parse(busy)["data"]["result"];  // (a copy: not a reference
                                                                      // into a temporary)
  for (const auto& r : busy_series) {
    int rank = std::stoi(r["metric"]["rank"].get<std::string>());
    EXPECT_EQ(r["metric"]["instance"], targets[rank < 2 ? 0 : 1]) << busy;
  }
  // fifteen seconds on, the rule says by how much: rank 3 spends far less of its time waiting
  std::this_thread::sleep_for(std::chrono::seconds(15));
  std::string by;
  ASSERT_EQ(series_count(prom_port,
                         "eacgm:collective_straggling:ratio_rate1m{job_id=\"fleet-e2e\"}", &by),
            4)
      << by;
  double straggler = 0, others = 0;
  auto by_rank = nlohmann::json::parse(by)["data"]["result"];
  for (const auto& r : by_rank) {
    double v = std::stod(r["value"][1].get<std::string>());
    if (r["metric"]["rank"] == "3")
      straggler = v;
    else
      others = std::max(others, std::fabs(v));
  }
  EXPECT_GT(straggler, 0.1) << by;
  EXPECT_GT(straggler, 5 * others) << by;
  ASSERT_EQ(job.wait(120), 0) << job.err();
  // onset: the straggler's first late step
  auto truth = nlohmann::json::parse(std::ifstream(dir_ + "/straggler-node1.json"));
  ASSERT_FALSE(truth["intervals"].empty()) << truth.dump();
  int64_t onset = truth["intervals"][0][0].get<int64_t>();
  double to_pending = double(pending_ns - onset) / 1e9, to_firing = double(firing_ns - onset) / 1e9;
  printf("onset -> alert: pending %.1f s, firing %.1f s (scrape %d s, job rules every 10 s, "
         "for 30 s)\n",
         to_pending, to_firing, scrape_s);
  EXPECT_GT(to_pending, 0) << "the alert came before the straggling began";
  EXPECT_LE(to_firing, scrape_s + 10 + 30 + 5) << "the rules' bound (polled every 1 s)";
  // over the whole run, no other rank was ever alerted on
  std::string ever;
  EXPECT_EQ(series_count(prom_port,
                         "count by (rank, instance) (max_over_time(ALERTS{alertname="
                         "\"EacgmJobStraggler\"}[5m]))",
                         &ever),
            1)
      << ever;
  kill(prom.pid(), SIGTERM);
  EXPECT_EQ(prom.wait(30), 0) << prom.err();
  for (auto& agent : agents) {
    kill(agent->pid(), SIGTERM);
    EXPECT_EQ(agent->wait(20), 0) << agent->err();
  }
}

}  // namespace
}  // namespace e2e
