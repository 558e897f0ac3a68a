// End to end: the host layer (`--layers host`) measures what the machine did to the traced
// processes: run-queue waits and preemptions against a real CPU hog, interface bytes against the
// kernel's own counters on a veth pair in a namespace made here, and block I/O of direct writes.
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "e2e_util.h"

namespace e2e {
namespace {

class RecordHost : public RecordingTest {};

// A busy loop pinned to one CPU, not traced (not a child of the recorded command).
class CpuHog {
 public:
  explicit CpuHog(int cpu) {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_NAME, "cpu_hog");  // (its name: not this test's, whose process may run too)
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof(set), &set);
      volatile unsigned long spins = 0;
      for (;;) spins = spins + 1;
    }
  }
  ~CpuHog() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

struct SchedStats {
  int64_t waits = 0, wait_ns = 0, voluntary = 0, involuntary = 0, samples = 0;
  int64_t kernel_voluntary = -1, kernel_involuntary = -1;  // the probe's own getrusage
  double mean_wait_us() const { return waits ? double(wait_ns) / double(waits) / 1e3 : 0; }
};

// The last CPU: device interrupts and kernel workers (writeback after a build) favour CPU 0.
int probe_cpu() { return std::max(0, int(sysconf(_SC_NPROCESSORS_ONLN)) - 1); }

SchedStats record_sched_probe(const std::string& db) {
  auto r = run({kEacgm, "record", "-q", "-f", "--layers", "host", "--interval", "20", "-o", db,
                "--", kWorkloads + "/sched_probe", std::to_string(probe_cpu()), "1500", "10"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  SchedStats s;
  sscanf(r.out.c_str(), "sched_probe: voluntary=%ld involuntary=%ld", &s.kernel_voluntary,
         &s.kernel_involuntary);
  Db d(db);
  d.each(
      "SELECT sum(runq_waits), sum(runq_wait_ns), sum(voluntary_switches), "
      "sum(involuntary_switches), count(*) FROM host_samples "
      "WHERE scope = 'process' AND name = 'sched_probe'",
      [&](sqlite3_stmt* st) {
        s.waits = sqlite3_column_int64(st, 0);
        s.wait_ns = sqlite3_column_int64(st, 1);
        s.voluntary = sqlite3_column_int64(st, 2);
        s.involuntary = sqlite3_column_int64(st, 3);
        s.samples = sqlite3_column_int64(st, 4);
      });
  return s;
}

// Our counts against the kernel's own (the probe is one thread; its switches before exec and
// after its last getrusage are the only ones one side sees and the other does not).
void expect_matches_kernel(const SchedStats& s) {
  ASSERT_GE(s.kernel_voluntary, 0) << "sched_probe did not report its switches";
  EXPECT_NEAR(double(s.voluntary), double(s.kernel_voluntary),
              std::max(3.0, 0.05 * double(s.kernel_voluntary)));
  EXPECT_NEAR(double(s.involuntary), double(s.kernel_involuntary),
              std::max(3.0, 0.05 * double(s.kernel_involuntary)));
}

TEST_F(RecordHost, CpuHogRaisesRunQueueLatencyAndPreemptions) {
  SchedStats quiet = record_sched_probe(db_);
  // Right after heavy work (a build, the disk-full test's writeback) the CPU may still be busy
  // for a moment: measure the quiet case again before calling the machine not idle.
  for (int attempt = 1; attempt < 3 && quiet.involuntary > quiet.voluntary / 3; ++attempt) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    quiet = record_sched_probe(db_);
  }
  SchedStats busy;
  {
    CpuHog hog1(probe_cpu()), hog2(probe_cpu());
    busy = record_sched_probe(db_);
  }
  std::cerr << "run-queue wait " << quiet.mean_wait_us() << " -> " << busy.mean_wait_us()
            << " us, involuntary switches " << quiet.involuntary << " -> " << busy.involuntary
            << "\n";
  expect_matches_kernel(quiet);
  expect_matches_kernel(busy);
  // about 1,500 ms / 10.5 ms = 140 bursts of work, each ending in a sleep and a wakeup
  EXPECT_GT(quiet.waits, 100);
  EXPECT_GT(busy.waits, 100);
  EXPECT_GT(quiet.samples, 40);  // 20 ms samples over 1.5 s, each with activity
  // Alone on an idle CPU the probe waits microseconds and is rarely preempted; beside two
  // hogs it waits about a slice at each wakeup and is preempted at the end of its slices.
  // Other work on the machine (a parallel build) preempts the probe as well, and often more
  // than the hogs do, as the load balancer then keeps that work off the hogs' CPU: the
  // comparison only means something when the probe had its CPU to itself.
  // (Each burst ends in a sleep: voluntary switches count the bursts.)
  if (quiet.involuntary > quiet.voluntary / 3)
    GTEST_SKIP() << "CPU " << probe_cpu() << " was not idle (the probe alone was preempted "
                 << quiet.involuntary << " times in " << quiet.voluntary
                 << " bursts): the hog comparison needs an "
                 << "otherwise idle machine; the counts above still matched the kernel's";
  EXPECT_GT(busy.mean_wait_us(), 3 * quiet.mean_wait_us());
  EXPECT_GT(busy.involuntary, quiet.involuntary + 40);
}

// Who had the CPU: the probe's waits beside two hogs on its CPU are charged to them, by their
// process name, with the pid charged the most.
TEST_F(RecordHost, WaitsForACpuAreChargedToWhoHadIt) {
  std::set<int64_t> hogs;
  const std::string hog_name = "cpu_hog";
  {
    CpuHog hog1(probe_cpu()), hog2(probe_cpu());
    hogs = {hog1.pid(), hog2.pid()};
    record_sched_probe(db_);
  }
  Db db(db_);
  int64_t waited = 0, charged = 0, rows = 0, named = 0, procs = 0;
  db.each("SELECT runq_wait_ns, taker_name, taker_ns, taker_procs, taker_pid FROM host_samples "
          "WHERE scope = 'process' AND name = 'sched_probe'",
          [&](sqlite3_stmt* st) {
            ++rows;
            waited += sqlite3_column_int64(st, 0);
            if (sqlite3_column_type(st, 1) == SQLITE_NULL) return;
            const char* name = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
            if (name != hog_name) return;
            ++named;
            charged += sqlite3_column_int64(st, 2);
            procs = std::max<int64_t>(procs, sqlite3_column_int64(st, 3));
            EXPECT_TRUE(hogs.count(sqlite3_column_int64(st, 4)))
                << "pid " << sqlite3_column_int64(st, 4) << " is not a hog";
          });
  std::cerr << "charged to the hogs: " << charged / 1e6 << " of " << waited / 1e6 << " ms in "
            << named << " of " << rows << " samples\n";
  ASSERT_GT(rows, 40);
  EXPECT_GT(named, rows / 2);
  // (waits under 0.1 ms are not charged: the probe's wakeups on a free CPU, a hog's slice cut)
  EXPECT_GE(double(charged), 0.8 * double(waited));
  // (a wait may be charged just after its process's counts were read: the next sample has it)
  EXPECT_LE(double(charged), 1.01 * double(waited));
  EXPECT_EQ(procs, 2) << "both hogs, in some sample";
}

// Per call, the calling thread's own wait for a CPU: torch.mm on 400x400 matrices (a few ms of
// computing each) pinned to one CPU, alone and then beside two hogs on that CPU.
TEST_F(RecordHost, EachCallKnowsHowLongItsThreadWaitedForACpu) {
  if (run({"/usr/bin/python3", "-c", "import torch"}).exit_code != 0)
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup.sh installs it)";
  std::string cpu = std::to_string(probe_cpu()), script = dir_ + "/mm_loop.py";
  // The workload measures its own wait for a CPU, as the kernel counts it for the thread
  // (/proc/thread-self/schedstat's run_delay), around each call and around main(). Reading it
  // takes system calls, where a pending preemption takes effect, so a wait can fall between a
  // read and the call: each line also gives the wall time of its whole window (clock read
  // before the first read, after the last), which bounds any wait outside the call.
  std::ofstream(script)
      << "import time, torch\n"
         "def run_delay():\n"
         "    with open('/proc/thread-self/schedstat') as f:\n"
         "        return int(f.read().split()[1])\n"
         "def main():\n"
         "    torch.set_num_threads(1)\n"
         "    a = torch.randn(400, 400)\n"
         "    for _ in range(60):\n"
         "        t0 = time.monotonic_ns()\n"
         "        w = run_delay()\n"
         "        torch.mm(a, a)\n"
         "        w = run_delay() - w\n"
         "        print(f'call waited {w} in a window of {time.monotonic_ns() - t0} ns')\n"
         "t0 = time.monotonic_ns()\n"
         "w = run_delay()\n"
         "main()\n"
         "w = run_delay() - w\n"
         "print(f'main waited {w} in a window of {time.monotonic_ns() - t0} ns')\n";
  // per call: the thread's wait by eacgm (runq_ns) and by the workload, and each one's window
  struct Call {
    int64_t runq, dur, waited, window;
  };
  struct Run {
    std::vector<Call> calls;  // aten::mm in order
    Call main{};              // the Python function mm_loop.main
  };
  auto record = [&] {
    Run out;
    auto r = run({kEacgm, "record", "-q", "-f", "--layers", "torch,python", "--python-calls",
                  "user", "-o", db_, "--", "taskset", "-c", cpu, "/usr/bin/python3", script});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Db db(db_);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM trace WHERE layer IN ('torch', 'python') AND "
                        "(runq_ns IS NULL OR runq_ns > dur_ns)"),
              0);
    // the Python function that makes the calls waits as they do
    EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE name = 'mm_loop.main'"), 1);
    db.each("SELECT runq_ns, dur_ns FROM torch_calls WHERE name = 'aten::mm' ORDER BY ts_ns",
            [&](sqlite3_stmt* s) {
              out.calls.push_back({sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), 0, 0});
            });
    out.main.runq = db.scalar("SELECT runq_ns FROM python_calls WHERE name = 'mm_loop.main'");
    out.main.dur = db.scalar("SELECT dur_ns FROM python_calls WHERE name = 'mm_loop.main'");
    std::regex line(R"((call|main) waited (\d+) in a window of (\d+) ns)");
    size_t i = 0;
    int lines = 0;
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), e; it != e; ++it, ++lines) {
      Call* c = (*it)[1] == "main" ? &out.main : i < out.calls.size() ? &out.calls[i++] : nullptr;
      if (c) {
        c->waited = std::stoll((*it)[2]);
        c->window = std::stoll((*it)[3]);
      }
    }
    EXPECT_EQ(lines, 61) << r.out;
    EXPECT_EQ(out.calls.size(), 60u);
    return out;
  };
  Run quiet = record(), busy;
  {
    CpuHog hog1(probe_cpu()), hog2(probe_cpu());
    busy = record();
  }
  // the wait is shown with each slice of the exported timeline
  std::string json_path = dir_ + "/run.json";
  ASSERT_EQ(run({kEacgm, "export", db_, "--chrome", json_path}).exit_code, 0);
  std::ifstream in(json_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(R"("cpu_wait_us":)"), std::string::npos);
  auto share = [](const Run& r, bool truth) {
    double waited = 0, spent = 0;
    for (const Call& c : r.calls) {
      waited += double(truth ? c.waited : c.runq);
      spent += double(c.dur);
    }
    return spent > 0 ? waited / spent : -1;
  };
  std::cerr << "share of aten::mm's time spent waiting for a CPU (eacgm / the thread's own "
               "schedstat over each call's window): alone "
            << share(quiet, false) << " / " << share(quiet, true) << ", beside two hogs "
            << share(busy, false) << " / " << share(busy, true) << "\n";
  // The hogs share the probe's CPU: by its own count it waited (three runnable threads on one
  // CPU wait about two thirds of the time; a machine busy elsewhere changes how much).
  ASSERT_GT(share(busy, true), 0.2) << "the hogs did not make the workload wait: the premise";
  // Both count the same kernel counter (task->sched_info.run_delay) over nested windows: eacgm
  // never counts more than the workload's window holds, and misses at most the wall time of
  // the workload's window outside the call (its reads of the counter, the Python around the
  // call): whatever the load, call by call. The 20 us is the order of the two reads at each
  // end (the probe reads the counter and then the clock).
  constexpr int64_t slack = 20'000;
  for (const Run* r : {&quiet, &busy}) {
    std::vector<Call> all = r->calls;
    all.push_back(r->main);
    for (size_t i = 0; i < all.size(); ++i) {
      const Call& c = all[i];
      SCOPED_TRACE(i < r->calls.size() ? "aten::mm #" + std::to_string(i) : "mm_loop.main");
      EXPECT_LE(c.runq, c.waited) << "eacgm counted a wait the thread did not have";
      EXPECT_GE(c.runq, c.waited - (c.window - c.dur) - slack)
          << "eacgm missed a wait inside the call (window " << c.window << " ns, call " << c.dur
          << " ns)";
      EXPECT_LE(c.dur, c.window + slack) << "the call outlasted the window around it";
    }
  }
}

TEST_F(RecordHost, SamplesComeAtTheInterval) {
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "--interval", "25", "-o", db_, "--",
                kWorkloads + "/sched_probe", "0", "600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'sample_interval_ms'"), "25");
  // every interval the probe was busy in: the spacing of consecutive samples
  std::vector<int64_t> ts;
  db.each("SELECT ts_ns FROM host_samples WHERE name = 'sched_probe' ORDER BY ts_ns",
          [&](sqlite3_stmt* s) { ts.push_back(sqlite3_column_int64(s, 0)); });
  ASSERT_GT(ts.size(), 15u);
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < ts.size(); ++i) gaps.push_back(ts[i] - ts[i - 1]);
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  EXPECT_NEAR(double(gaps[gaps.size() / 2]), 25e6, 5e6) << "median spacing of samples";
  EXPECT_EQ(db.scalar("SELECT count(*) FROM host_samples WHERE interval_ns <= 0"), 0);

  // the samples become counter tracks of the process in the exported timeline, and a section
  // of the report
  std::string json_path = dir_ + "/run.json";
  ASSERT_EQ(run({kEacgm, "export", db_, "--chrome", json_path}).exit_code, 0);
  std::ifstream in(json_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int64_t pid = db.scalar("SELECT id FROM host_samples WHERE name = 'sched_probe' LIMIT 1");
  EXPECT_NE(text.find(R"j("ph":"C","name":"cpu (%)","pid":)j" + std::to_string(pid)),
            std::string::npos);
  auto report = run({kEacgm, "report", db_});
  EXPECT_NE(report.out.find("sched_probe (pid " + std::to_string(pid) + ")"), std::string::npos)
      << report.out;
  EXPECT_NE(report.out.find("run-queue wait, mean (us)"), std::string::npos);
}

std::string sh(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// A veth pair: one end here, the other in a network namespace of its own.
class VethPair {
 public:
  VethPair() {
    std::string id = std::to_string(getpid() % 100000);
    ns_ = "eacgm-e2e-" + id;
    a_ = "eacgm-a" + id;
    b_ = "eacgm-b" + id;
    ok_ =
        system(("ip netns add " + ns_ + " && ip link add " + a_ + " type veth peer name " + b_ +
                " && ip link set " + b_ + " netns " + ns_ + " && sysctl -qw net.ipv6.conf." + a_ +
                ".disable_ipv6=1" + " && ip addr add 10.231.0.1/24 dev " + a_ + " && ip link set " +
                a_ + " up" + " && ip netns exec " + ns_ + " sysctl -qw net.ipv6.conf." + b_ +
                ".disable_ipv6=1 && ip -n " + ns_ + " addr add 10.231.0.2/24 dev " + b_ +
                " && ip -n " + ns_ + " link set " + b_ + " up")
                   .c_str()) == 0;
  }
  ~VethPair() {
    std::string cmd = "ip link del " + a_ + " 2>/dev/null; ip netns del " + ns_ + " 2>/dev/null";
    (void)system(cmd.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& ns() const { return ns_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  int64_t a_counter(const std::string& which) const {
    return std::stoll(sh("cat /sys/class/net/" + a_ + "/statistics/" + which));
  }
  int64_t b_counter(const std::string& which) const {
    return std::stoll(
        sh("ip netns exec " + ns_ + " cat /sys/class/net/" + b_ + "/statistics/" + which));
  }

 private:
  std::string ns_, a_, b_;
  bool ok_ = false;
};

// A thread that never leaves the CPU has its CPU time in each interval it ran in: the host
// layer counts running threads' time up to each sample, not only at their switch-out (which put
// one 800 ms burst into the last interval). `env` picks the scan; `scan` is what the recording
// must say it used.
static void expect_busy_thread_in_every_interval(const std::string& db_path,
                                                 const std::vector<std::string>& env,
                                                 const std::string& scan,
                                                 size_t steady_from = 0) {
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "--interval", "50", "-o", db_path,
                "--", kWorkloads + "/sched_probe", "0", "800", "800"},
               env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_path);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'host_cpu_scan'"), scan);
  struct Row {
    int64_t ts, interval, oncpu;
  };
  std::vector<Row> rows;  // in the burst's order
  db.each("SELECT ts_ns, interval_ns, oncpu_ns FROM host_samples WHERE name = 'sched_probe' "
          "AND scope = 'process' ORDER BY ts_ns",
          [&](sqlite3_stmt* st) {
            rows.push_back({sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                            sqlite3_column_int64(st, 2)});
          });
  std::string dump;  // every row, to tell a missed pass from a late sampler on failure
  for (const auto& r : rows)
    dump += std::to_string(r.ts) + " " + std::to_string(r.interval) + " " +
            std::to_string(r.oncpu) + "\n";
  // (on an idle machine the burst is never switched out: without the scan its 800 ms land in
  // one row, 16 cores' worth; on a busy one, preemptions split it either way). The scan counts
  // up to the sample's timestamp (idle: exactly 1.0 a row); only a switch-out between that
  // timestamp and the sampler's read of the counters can add to a row (1.1: 5 ms of it).
  // Every pass of the sampler while the burst ran has its row: each row's interval starts at
  // the one before it. The burst runs from the first row in which the process ran a fifth of
  // the interval (before it: the launch, the child waiting to exec and held at its exec while
  // record reads its maps, which may take a pass or more on a busy machine). How many passes
  // there were is the sampler's: 16 on a quiet machine, fewer where its CPU was held (CI once
  // had 5 rows in 800 ms); 3 at least, or nothing here was split.
  ASSERT_GE(rows.size(), 3u) << "one burst of 800 ms, sampled every 50 ms (ts interval oncpu):\n"
                             << dump;
  size_t burst = steady_from;
  while (burst < rows.size() && rows[burst].oncpu * 5 < rows[burst].interval) ++burst;
  ASSERT_LT(burst, rows.size()) << "no row of the burst:\n" << dump;
  for (size_t i = burst + 1; i < rows.size(); ++i)
    EXPECT_EQ(rows[i].ts - rows[i].interval, rows[i - 1].ts)
        << "a pass with no row for the busy process before row " << i << ":\n" << dump;
  // The rows reach the burst's end: 800 ms after its start, which lies no later than the start
  // of its first row (from the first row at all: with steady_from, rows before it may hold the
  // burst's first passes, CI once had its first 100 ms there) nor later than that row's
  // timestamp less the CPU time it counted (a scan's first row counts what the passes before
  // it did not). Its first row may have started up to a pass after it: 700 ms at least.
  size_t first = 0;
  while (first < burst && rows[first].oncpu * 5 < rows[first].interval) ++first;
  int64_t started = rows[first].ts - std::max(rows[first].interval, rows[first].oncpu);
  EXPECT_GE(rows.back().ts - started, 700'000'000) << "the rows cover the burst:\n" << dump;
  for (size_t i = steady_from; i < rows.size(); ++i)
    EXPECT_LE(double(rows[i].oncpu) / double(rows[i].interval), 1.1)
        << "interval " << i << " of " << rows.size() << ":\n" << dump;
  EXPECT_GE(db.scalar("SELECT sum(oncpu_ns) FROM host_samples WHERE name = 'sched_probe' AND "
                      "scope = 'process'"),
            300'000'000)
      << "the burst's CPU time, even on a machine busy with other work";
}

// The scan of each CPU's traced thread (a BPF program run at each sample).
TEST_F(RecordHost, ABusyThreadHasItsCpuTimeInEveryInterval) {
  expect_busy_thread_in_every_interval(db_, {}, "cpus");
}

// The task iterator over every task of the node, for kernels that refuse the program above.
TEST_F(RecordHost, ABusyThreadHasItsCpuTimeInEveryIntervalWithTheTaskIterator) {
  expect_busy_thread_in_every_interval(db_, {"EACGM_TEST_HOST_SCAN_TASKS=1"}, "tasks");
}

// The program loads but its runs are refused: after three, the task iterator takes over (the
// samples before it had no scan: their time lands in the first row it counts, the third).
TEST_F(RecordHost, ABusyThreadHasItsCpuTimeInEveryIntervalWhenTheScanIsRefusedLater) {
  expect_busy_thread_in_every_interval(db_, {"EACGM_TEST_HOST_SCAN_REFUSED=1"}, "tasks", 3);
}

TEST_F(RecordHost, VethTrafficMatchesTheInterfaceCounters) {
  VethPair veth;
  ASSERT_TRUE(veth.ok()) << "could not create a veth pair in a new network namespace";
  int64_t a_tx0 = veth.a_counter("tx_bytes"), b_rx0 = veth.b_counter("rx_bytes");
  int64_t a_pk0 = veth.a_counter("tx_packets");
  constexpr int kCount = 3000, kSize = 1000;
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "--interval", "50", "-o", db_, "--",
                kWorkloads + "/udp_sender", "10.231.0.2", "9", std::to_string(kCount),
                std::to_string(kSize)});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  int64_t a_tx = veth.a_counter("tx_bytes") - a_tx0, b_rx = veth.b_counter("rx_bytes") - b_rx0;
  int64_t a_pk = veth.a_counter("tx_packets") - a_pk0;
  ASSERT_GE(a_tx, int64_t(kCount) * kSize);  // the traffic really went over the pair

  Db db(db_);
  auto dev_sum = [&](const std::string& name, const char* col) {
    return db.scalar(std::string("SELECT COALESCE(sum(") + col + "), 0) FROM host_samples " +
                     "WHERE scope = 'net' AND name = '" + name + "'");
  };
  EXPECT_NEAR(double(dev_sum(veth.a(), "tx_bytes")), double(a_tx), 0.05 * double(a_tx));
  EXPECT_NEAR(double(dev_sum(veth.a(), "tx_packets")), double(a_pk), 0.05 * double(a_pk));
  EXPECT_NEAR(double(dev_sum(veth.b(), "rx_bytes")), double(b_rx), 0.05 * double(b_rx));
  // the two ends live in different network namespaces
  EXPECT_EQ(db.scalar("SELECT count(DISTINCT netns) FROM host_samples WHERE scope = 'net' AND "
                      "name IN ('" +
                      veth.a() + "', '" + veth.b() + "')"),
            2);
  // per process: exactly the payload the sender handed to its socket
  EXPECT_EQ(db.scalar("SELECT sum(tx_bytes) FROM host_samples WHERE scope = 'process' AND "
                      "name = 'udp_sender'"),
            int64_t(kCount) * kSize);
}

TEST_F(RecordHost, DirectWritesShowUpPerProcessAndPerDisk) {
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  if (major(st.st_dev) == 0)
    GTEST_SKIP() << dir_ << " is not on a block device (tmpfs or overlay): no block I/O to see";
  constexpr int64_t kMiB = 16;
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "-o", db_, "--",
                kWorkloads + "/direct_write", dir_ + "/data", std::to_string(kMiB)});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  int64_t proc_bytes = db.scalar(
      "SELECT sum(io_bytes) FROM host_samples WHERE scope = 'process' AND name = 'direct_write'");
  // every process row with block I/O, to tell a misnamed row from a miscounted one on failure
  std::string rows;
  db.each(
      "SELECT ts_ns || ' ' || id || ' ' || name || ' ' || io_bytes || ' ' || io_ops FROM "
      "host_samples WHERE scope = 'process' AND io_bytes > 0 ORDER BY ts_ns",
      [&](sqlite3_stmt* s) {
        rows += reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
        rows += '\n';
      });
  EXPECT_GE(proc_bytes, kMiB << 20) << "process rows with I/O (ts pid name bytes ops):\n" << rows;
  // plus a little file-system metadata
  EXPECT_LE(proc_bytes, (kMiB << 20) * 11 / 10) << "process rows with I/O:\n" << rows;
  EXPECT_GE(db.scalar("SELECT sum(io_ops) FROM host_samples WHERE scope = 'process' AND "
                      "name = 'direct_write'"),
            kMiB);  // at least one bio per 1 MiB write
  EXPECT_GE(db.scalar("SELECT sum(write_bytes) FROM host_samples WHERE scope = 'disk'"),
            kMiB << 20);
  EXPECT_GT(db.scalar("SELECT max(io_latency_max_ns) FROM host_samples WHERE scope = 'disk'"), 0);
}

// A file of `mib` MiB written here, then evicted from the page cache (so a reader must fetch it
// again). False where eviction cannot be relied on (not a block device: tmpfs, overlay).
bool make_cold_file(const std::string& path, int64_t mib) {
  struct stat st {};
  if (stat(path.substr(0, path.rfind('/')).c_str(), &st) != 0 || major(st.st_dev) == 0)
    return false;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  std::vector<char> buf(1 << 20, 'x');
  for (int64_t i = 0; i < mib; ++i)
    if (write(fd, buf.data(), buf.size()) != ssize_t(buf.size())) return close(fd), false;
  bool ok = fsync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  close(fd);
  return ok;
}

int64_t process_sum(Db& db, const std::string& name, const std::string& column) {
  return db.scalar("SELECT COALESCE(sum(" + column +
                   "), 0) FROM host_samples WHERE scope = "
                   "'process' AND name = '" +
                   name + "'");
}

TEST_F(RecordHost, PageFaultsCountTouchedPages) {
  constexpr int64_t kPages = 20000;
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "-o", db_, "--",
                kWorkloads + "/mem_probe", "touch", std::to_string(kPages)});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  int64_t faults = process_sum(db, "mem_probe", "page_faults");
  // one fault per fresh page, plus the program's own start (loader, libc): a few hundred; the
  // last ones taken just before it exits count too (at its exit, after the traced set forgot it)
  EXPECT_GE(faults, kPages);
  EXPECT_LE(faults, kPages + 1000);
}

// A thread that faults for a second without leaving its CPU has its faults in the samples of
// that second as they came (read from it at each sample while it runs), not all at its end.
TEST_F(RecordHost, PageFaultsOfARunningThreadLandInTheSamplesTheyCameIn) {
  constexpr int64_t kPages = 40000;
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "-o", db_, "--",
                kWorkloads + "/mem_probe", "touch", std::to_string(kPages), "1500"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  auto per_sample = db.pairs(
      "SELECT ts_ns, page_faults FROM host_samples WHERE scope = 'process' AND name = "
      "'mem_probe' AND page_faults > 0");
  int64_t total = 0, most = 0;
  for (const auto& [ts, n] : per_sample) total += n, most = std::max(most, n);
  EXPECT_GE(total, kPages);
  EXPECT_LE(total, kPages + 1000);
  // 1.5 s at 100 ms a sample: ~2,700 a sample in ~15 samples. Counted only at switches and the
  // exit, they came in 6 samples, 22,090 in one; a sampler or the program held up a few hundred
  // ms by a busy machine puts up to ~10,000 in one
  EXPECT_GE(per_sample.size(), 8u) << total;
  EXPECT_LE(most, kPages / 3) << "faults bunched in one sample of " << per_sample.size();
}

// A CPU that stops (a vCPU its hypervisor did not run) is charged to the process it ran, with
// when the stop ended: cpu_stall stops its CPU 3 times for 30 ms (a BPF program spinning in the
// timer interrupt, interrupts off) and prints when each ended. The scheduler tick (4 ms at
// HZ=250) due first in a stop fires up to 30 ms late: each stop counts at least 30 - 4 ms, less
// a margin. The VM stops on its own too (2-6 ms, a few times a second on a busy day, 100 ms about
// once a minute): a sample may hold one beside ours, so its row is the one whose interval holds
// our stop's end, its last stop ended there or later, and it counts at most ours and a few ms
// more (one stop counted once, however many timers it delayed: they were 30, 26, 22... ms late).
TEST_F(RecordHost, ACpuStallIsChargedToTheProcessItStoppedWithWhenItEnded) {
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "-o", db_, "--",
                kWorkloads + "/cpu_stall", "3", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::vector<std::pair<int64_t, int64_t>> stops;  // (start, end) as cpu_stall printed them
  std::istringstream out(r.out);
  for (int64_t from, to; out >> from >> to;) stops.emplace_back(from, to);
  ASSERT_EQ(stops.size(), 3u) << r.out;
  Db db(db_);
  struct Row {
    int64_t from, to, stall_end, stall, stalls;
  };
  auto rows_of = [&](const std::string& where) {
    std::vector<Row> rows;
    db.each("SELECT ts_ns - interval_ns, ts_ns, stall_end_ns, stall_ns, COALESCE(stalls, 0) "
            "FROM host_samples WHERE stall_ns > 0 AND " + where,
            [&](sqlite3_stmt* st) {
              rows.push_back({sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                              sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
                              sqlite3_column_int64(st, 4)});
            });
    return rows;
  };
  auto process = rows_of("scope = 'process' AND name = 'cpu_stall'");
  auto cpus = rows_of("scope = 'cpu'");
  // the sample whose interval holds the stop's end (of two at a boundary, the later stop's)
  auto holding = [](const std::vector<Row>& rows, int64_t end) {
    auto best = rows.end();
    for (auto it = rows.begin(); it != rows.end(); ++it)
      if (it->from <= end + 1'000'000 && it->to >= end - 1'000'000 &&
          (best == rows.end() || it->stall_end > best->stall_end))
        best = it;
    return best;
  };
  for (const auto& [from, to] : stops) {
    auto row = holding(process, to);
    ASSERT_NE(row, process.end()) << "no stall of cpu_stall in the sample of " << to;
    EXPECT_GE(row->stall, 20'000'000) << "at " << to;
    EXPECT_LE(row->stall, 40'000'000) << "at " << to;
    EXPECT_GE(row->stall_end, to - 5'000'000) << "at " << to;
    EXPECT_LE(row->stall_end, row->to) << "at " << to;
    // the CPU's own row: the stop, whatever it ran (another CPU's may be in the same sample)
    EXPECT_TRUE(std::any_of(cpus.begin(), cpus.end(), [&](const Row& x) {
      return x.from <= to && x.to >= to - 1'000'000 && x.stalls >= 1 && x.stall >= 20'000'000;
    })) << "no CPU's stop in the sample of " << to;
  }
  // every CPU has the tracepoint's program: a host that lacks it says so (and this fails)
  EXPECT_EQ(db.scalar("SELECT count(*) FROM meta WHERE key = 'host_unavailable_metrics' AND "
                      "value LIKE '%stall%'"),
            0);
}

TEST_F(RecordHost, PageCacheFillsCountFileDataReadFromDisk) {
  constexpr int64_t kMiB = 32;
  std::string file = dir_ + "/cold";
  if (!make_cold_file(file, kMiB))
    GTEST_SKIP() << dir_ << " is not on a block device (tmpfs or overlay): its pages cannot be "
                 << "evicted to be read again";
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "-o", db_, "--",
                kWorkloads + "/mem_probe", "read", file});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  int64_t bytes = process_sum(db, "mem_probe", "pagein_bytes");
  EXPECT_GE(bytes, kMiB << 20);
  EXPECT_LE(bytes, (kMiB + 2) << 20);  // plus any of its libraries not cached
  EXPECT_EQ(process_sum(db, "mem_probe", "reclaims"), 0) << "no memory pressure here";
}

// The memory controller's mount: cgroup v1's, or v2's where it is enabled. Empty when neither.
std::string memory_cgroup_root(bool* v2) {
  struct stat st {};
  *v2 = false;
  if (stat("/sys/fs/cgroup/memory/memory.limit_in_bytes", &st) == 0) return "/sys/fs/cgroup/memory";
  for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    std::ifstream in(std::string(root) + "/cgroup.controllers");
    std::string words((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (words.find("memory") != std::string::npos) {
      *v2 = true;
      return root;
    }
  }
  return "";
}

TEST_F(RecordHost, CgroupLimitMakesTheProcessReclaim) {
  bool v2 = false;
  std::string root = memory_cgroup_root(&v2);
  if (root.empty()) GTEST_SKIP() << "no memory cgroup controller on this machine";
  constexpr int64_t kMiB = 96;
  std::string file = dir_ + "/cold";
  if (!make_cold_file(file, kMiB))
    GTEST_SKIP() << dir_ << " is not on a block device (tmpfs or overlay)";
  std::string cg = root + "/eacgm-e2e-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(cg.c_str(), 0755), 0) << "cannot create " << cg;
  if (v2) (void)system(("echo +memory > " + root + "/cgroup.subtree_control").c_str());
  {
    std::ofstream limit(cg + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    limit << (16 << 20) << "\n";
  }
  // reading 96 MiB through a 16 MiB limit: the reader must reclaim its own page cache
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "-o", db_, "--",
                kWorkloads + "/mem_probe", "read", file, cg + "/cgroup.procs"});
  rmdir(cg.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  EXPECT_GT(process_sum(db, "mem_probe", "reclaims"), 0);
  EXPECT_GT(process_sum(db, "mem_probe", "reclaim_ns"), 0);
  EXPECT_GE(process_sum(db, "mem_probe", "pagein_bytes"), kMiB << 20);
}

TEST_F(RecordHost, TcpRetransmitsOfACongestedLink) {
  VethPair veth;
  ASSERT_TRUE(veth.ok()) << "could not create a veth pair in a new network namespace";
  // a link of 20 Mbit/s with a queue of 8 KiB: a sender faster than that loses segments
  ASSERT_EQ(
      system(
          ("tc qdisc add dev " + veth.a() + " root tbf rate 20mbit burst 8kb limit 8kb").c_str()),
      0);
  Process receiver(
      {"/usr/sbin/ip", "netns", "exec", veth.ns(), kWorkloads + "/tcp_probe", "recv", "5001"});
  auto r = run({kEacgm, "record", "-q", "--layers", "host", "-o", db_, "--",
                kWorkloads + "/tcp_probe", "send", "10.231.0.2", "5001", "4000000"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  receiver.wait(10);
  unsigned kernel = 0;
  ASSERT_EQ(sscanf(r.out.c_str(), "tcp_probe: sent %*lld retransmitted segments %u", &kernel), 1)
      << r.out;
  Db db(db_);
  int64_t ours = process_sum(db, "tcp_probe", "tcp_retransmits");
  std::cerr << "retransmits: kernel " << kernel << ", recorded " << ours << "\n";
  ASSERT_GT(kernel, 0u) << "the congested link lost nothing";
  // segments, as the socket's own tcp_info counts them (a retransmitted SYN, which comes before
  // the process's first send names the socket's owner, would be the only difference)
  EXPECT_NEAR(double(ours), double(kernel), std::max(3.0, 0.02 * kernel));
}

}  // namespace
}  // namespace e2e
