// End to end: the CPU profile (record --sample-hz) of a Python program whose main thread spends
// 70% of its CPU in a Python function and 30% in a C function, on every CPython 3.10-3.13 here:
// the shares as `report` gives them, a sleeping thread without samples, and the pprof export
// read by a real consumer (go tool pprof, from Debian's golang-go).
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "chromium.h"
#include "e2e_util.h"
#include "python_interpreters.h"

namespace e2e {
namespace {

class Profile : public RecordingTest, public ::testing::WithParamInterface<Interpreter> {
 protected:
  void SetUp() override {
    RecordingTest::SetUp();
    if (IsSkipped()) return;
    if (!std::filesystem::exists(GetParam().path))
      GTEST_SKIP() << GetParam().path << " is not installed: that CPython is not covered here";
  }
};

// The share (in % of all samples) of a function from `report --json`'s profile.
struct Share {
  double self = -1, total = -1;
};
Share share_of(const nlohmann::json& profile, const std::string& name) {
  double n = profile.at("samples").get<double>();
  for (const auto& f : profile.at("functions"))
    if (f.at("name") == name)
      return {100 * f.at("self_samples").get<double>() / n,
              100 * f.at("total_samples").get<double>() / n};
  return {};
}

TEST_P(Profile, HotPythonAndCFunctionsHaveTheirSharesAndASleeperNone) {
  // 499 Hz for 3 s of CPU: about 1,500 samples, so a 30% share is known to about +-1.2 points
  auto r =
      run({kEacgm, "record", "-q", "-o", db_, "--sample-hz", "499", "--", GetParam().path,
           std::string(EACGM_PY_WORKLOADS) + "/hot_split.py", kWorkloads + "/libhot_c.so", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(sleeper tid (\d+))"))) << r.out;
  std::string sleeper = m[1];

  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'sample_hz'"), "499");
  int64_t samples = db.scalar("SELECT count(*) FROM stack_samples");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'cpu_samples'"), std::to_string(samples));
  // The sleeper runs only to start, to say its id and to end: its samples follow the CPU time
  // it measured itself (thread bootstrap can take more than one 2 ms period on a busy machine).
  // A cpu-clock sample lands every period on the CPU the thread runs on, so each stretch on the
  // CPU gets its time x 499 Hz, rounded either way: the bound is the expected count, 3 sigma of
  // a Poisson count on top, and one for each of its stretches (start, wake-up, exit).
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(sleeper cpu ([0-9.]+) s)"))) << r.out;
  double sleeper_expected = std::stod(m[1]) * 499;
  int64_t sleeper_samples = db.scalar("SELECT count(*) FROM stack_samples WHERE tid = " + sleeper);
  printf("sleeper: %lld samples, %.2f expected from its CPU time\n", (long long)sleeper_samples,
         sleeper_expected);
  EXPECT_LE(double(sleeper_samples), sleeper_expected + 3 * std::sqrt(sleeper_expected) + 3);
  // every sample of the main thread while its loop ran has its Python stack (before and after
  // it the interpreter starts and ends in C, for a time that depends on the machine's caches)
  int64_t main_tid =
      db.scalar("SELECT tid FROM stack_samples GROUP BY tid ORDER BY count(*) DESC LIMIT 1");
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(loop from (\d+) to (\d+) ns)"))) << r.out;
  std::string in_loop = "tid = " + std::to_string(main_tid) + " AND ts_ns BETWEEN " + m[1].str() +
                        " AND " + m[2].str();
  int64_t main_samples = db.scalar("SELECT count(*) FROM stack_samples WHERE " + in_loop);
  EXPECT_GT(main_samples, 1000);  // 3 s of its CPU at 499 Hz
  EXPECT_GE(
      db.scalar("SELECT count(*) FROM stack_samples WHERE py_stack IS NOT NULL AND " + in_loop),
      main_samples * 99 / 100);

  auto rep = run({kEacgm, "report", db_, "--json"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto profile = nlohmann::json::parse(rep.out).at("cpu_profile");
  Share py = share_of(profile, "hot_split.hot_py");
  Share c = share_of(profile, "hot_c_spin");
  Share caller = share_of(profile, "hot_split.call_c");
  printf(
      "%s: %lld samples; hot_py total %.1f%%, hot_c_spin self %.1f%% total %.1f%%, call_c "
      "total %.1f%%\n",
      GetParam().label.c_str(), (long long)samples, py.total, c.self, c.total, caller.total);
  EXPECT_NEAR(py.total, 70, 4) << profile.dump();
  EXPECT_NEAR(c.total, 30, 4) << profile.dump();
  // most of it in the C function itself, the rest in the clock it reads (libc, vDSO)
  EXPECT_GT(c.self, 0.8 * c.total) << profile.dump();
  // the C function is seen under the Python function that called it
  EXPECT_NEAR(caller.total, c.total, 1) << profile.dump();
  // and the text report says the same
  auto text = run({kEacgm, "report", db_});
  EXPECT_NE(text.out.find("CPU profile ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("hot_c_spin  (libhot_c.so)"), std::string::npos) << text.out;
}

// The off-CPU profile of the same recording defaults: threads blocked in known Python functions
// for times the workload measured itself (waits.py). Long waits are kept whole, short ones
// sampled (expected weight = their time); a thread that never blocks has next to none.
TEST_P(Profile, OffCpuTimeOfEachWaitIsWhereItBlocked) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--sample-hz", "499", "--", GetParam().path,
                std::string(EACGM_PY_WORKLOADS) + "/waits.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto truth = nlohmann::json::parse(r.out);
  const auto& measured = truth.at("measured");

  Db db(db_);
  int64_t rows = db.scalar("SELECT count(*) FROM offcpu_samples");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'offcpu_samples'"), std::to_string(rows));
  // a wait shorter than the period stands for one period; a longer one for itself
  EXPECT_EQ(db.scalar("SELECT count(*) FROM offcpu_samples WHERE weight_ns != max(dur_ns, "
                      "2004008)"),
            0);
  auto rep = run({kEacgm, "report", db_, "--json"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto profile = nlohmann::json::parse(rep.out).at("offcpu_profile");
  auto seconds = [&](const std::string& name) {
    for (const auto& f : profile.at("functions"))
      if (f.at("name") == name) return f.at("total_ns").get<double>() / 1e9;
    return 0.0;
  };
  double nap = seconds("waits.nap"), doze = seconds("waits.doze"),
         lock = seconds("waits.wait_lock"), spin = seconds("waits.spin");
  printf(
      "%s: %lld off-CPU rows; blocked in nap %.3f s (measured %.3f), doze %.3f (%.3f), "
      "wait_lock %.3f (%.3f), spin %.3f (off the CPU %.3f)\n",
      GetParam().label.c_str(), (long long)rows, nap, measured.at("nap").get<double>(), doze,
      measured.at("doze").get<double>(), lock, measured.at("wait_lock").get<double>(), spin,
      measured.at("spin_off_cpu").get<double>());
  // waits of 20 ms and 0.6 s, each kept whole: within 5% of what the workload measured (which
  // also counts the call around the wait)
  EXPECT_NEAR(nap, measured.at("nap").get<double>(), 0.05 * measured.at("nap").get<double>());
  EXPECT_NEAR(lock, measured.at("wait_lock").get<double>(), 0.03);
  // 400 waits of about a period each, about half of them kept: a binomial count whose standard
  // deviation is about 5% of the total
  EXPECT_NEAR(doze, measured.at("doze").get<double>(), 0.2 * measured.at("doze").get<double>());
  // 0.6 s on the CPU without a wait of its own: what it blocked is its GIL waits, at most the
  // time it was off the CPU (blocked or preempted, which the workload measured). Waits shorter
  // than a period (most GIL waits: tens of us) are sampled, kept with probability
  // duration/period and weighing one period, so the kept count is a sum of Bernoulli draws
  // whose mean is at most lambda = off_cpu / period: bounded by the Poisson quantile of that
  // mean at 1e-6 (a sum of Bernoullis is less spread than a Poisson of its mean). With lambda
  // about 3, a normal 3-sigma bound (8 kept) failed once in a clean-clone CI run (10 kept).
  const double period = 1 / 499.0, off_cpu = measured.at("spin_off_cpu").get<double>();
  const double lambda = off_cpu / period;
  int k = 0;
  for (double pmf = std::exp(-lambda), tail = 1 - pmf; tail > 1e-6 && k < 10000;) {
    ++k;
    pmf *= lambda / k;
    tail -= pmf;
  }
  EXPECT_LE(spin, off_cpu + period * (k - lambda)) << "Poisson quantile " << k << " of " << lambda;
  // where they blocked natively is named: glibc's sleep, and its internal futex wait for the
  // lock and the GIL, which only its detached debug file names (libc6-dbg)
  ASSERT_EQ(system("dpkg-query -W -f='${Status}' libc6-dbg 2>/dev/null | grep -q 'ok installed'"),
            0)
      << "libc6-dbg is not installed: run scripts/setup.sh (glibc's symbols for profiles)";
  double blocked = profile.at("blocked_ns").get<double>(), unnamed_in_libc = 0;
  for (const auto& f : profile.at("functions")) {
    std::string name = f.at("name");
    if (f.at("where") == "libc.so.6" && (name.starts_with("unknown+") || name.starts_with("fn@")))
      unnamed_in_libc += f.at("self_ns").get<double>();
  }
  EXPECT_LT(unnamed_in_libc, 0.01 * blocked) << profile.dump();
  EXPECT_GT(seconds("__futex_abstimed_wait_common"), 0.5) << profile.dump();
  // by thread: each waiter with its time and where it waited
  std::map<int64_t, nlohmann::json> by_tid;
  for (const auto& t : profile.at("threads")) by_tid[t.at("tid").get<int64_t>()] = t;
  auto thread_of = [&](const char* name) {
    auto it = by_tid.find(truth.at("tids").at(name).get<int64_t>());
    return it == by_tid.end() ? nlohmann::json::object() : it->second;
  };
  EXPECT_EQ(thread_of("locker").value("python", ""), "waits.wait_lock") << profile.dump();
  EXPECT_NEAR(thread_of("locker").value("blocked_ns", 0.0) / 1e9,
              measured.at("wait_lock").get<double>(), 0.05);
  EXPECT_EQ(thread_of("napper").value("python", ""), "waits.nap") << profile.dump();
  // waiting is all the locker does: idle by the CPU profile's count of its samples
  EXPECT_EQ(thread_of("locker").value("idle", false), true) << profile.dump();
  EXPECT_LT(thread_of("locker").value("cpu_samples", 1000), 15) << profile.dump();
  EXPECT_GE(thread_of("napper").value("blocked_ns", 0.0) / 1e9,
            0.95 * measured.at("nap").get<double>());
  // the text report names them
  auto text = run({kEacgm, "report", db_});
  EXPECT_NE(text.out.find("Off-CPU profile ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("By thread (seconds blocked"), std::string::npos) << text.out;
  // (Python functions by total: timed() holds every wait of the three threads, the most of any
  // with the threads' own bootstrap frames)
  EXPECT_NE(text.out.find("python waits.timed"), std::string::npos) << text.out;

  // the trace: each wait of a period or more as a slice on its thread, named where it blocked
  std::string trace = dir_ + "/run.json";
  ASSERT_EQ(run({kEacgm, "export", db_, "--chrome", trace}).exit_code, 0);
  std::ifstream in(trace);
  auto events = nlohmann::json::parse(in).at("traceEvents");
  int64_t naps = 0;
  double lock_ms = 0;  // the longest: the lock itself (the GIL may be a wait of its own after)
  for (const auto& e : events) {
    if (e.value("cat", "") != "off-cpu") continue;
    if (e.at("name") == "blocked in waits.nap") ++naps;
    if (e.at("name") == "blocked in waits.wait_lock")
      lock_ms = std::max(lock_ms, e.at("dur").get<double>() / 1e3);
  }
  EXPECT_GE(naps, 40);  // every 20 ms sleep (and the GIL waits after some)
  EXPECT_NEAR(lock_ms, 1000 * measured.at("wait_lock").get<double>(), 30);
}

// A thread that blocked before it had a Python thread state (a native thread that later calls
// into Python; a Python thread that blocks in its first instants, before the interpreter bound
// its state) has its later Python waits where they blocked: here a native thread naps 0.1 s,
// then sleeps 1 s in Python (late_state.py). The whole second is in late_waiter.
TEST_P(Profile, WaitOfAThreadThatTookItsThreadStateLateHasItsPythonStack) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--sample-hz", "499", "--", GetParam().path,
                std::string(EACGM_PY_WORKLOADS) + "/late_state.py", kWorkloads + "/libhot_c.so"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto truth = nlohmann::json::parse(r.out);
  double slept = truth.at("late_waiter").get<double>();
  auto rep = run({kEacgm, "report", db_, "--json"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto profile = nlohmann::json::parse(rep.out).at("offcpu_profile");
  double waited = 0;
  for (const auto& f : profile.at("functions"))
    if (f.at("name") == "late_state.late_waiter") waited = f.at("total_ns").get<double>() / 1e9;
  // one wait, kept whole: what the workload measured around it, less the call itself
  EXPECT_NEAR(waited, slept, 0.05 * slept) << profile.dump();
  nlohmann::json thread;
  for (const auto& t : profile.at("threads"))
    if (t.at("tid") == truth.at("tid")) thread = t;
  EXPECT_EQ(thread.value("python", ""), "late_state.late_waiter") << profile.dump();
}

// A Python thread that blocked before it ran its own code, so before it bound the thread state
// its parent made for it, has its later Python waits where they blocked. The preloaded
// libslow_thread_start.so makes every new thread sleep 50 ms first (a malloc lock did it by
// chance in CI, and the sleeper's whole 2 s wait lost its stack). CPython 3.10 and 3.11 give a
// state made by the parent the parent's thread ids until the thread takes it, so such a thread
// looks like one with no state at all; 3.12+ leave the ids zero.
TEST_P(Profile, WaitOfAThreadThatBlockedBeforeItsOwnCodeHasItsPythonStack) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--sample-hz", "499", "--", "/usr/bin/env",
                "LD_PRELOAD=" + kWorkloads + "/libslow_thread_start.so", GetParam().path,
                std::string(EACGM_PY_WORKLOADS) + "/hot_split.py", kWorkloads + "/libhot_c.so",
                "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(sleeper tid (\d+))"))) << r.out;
  int64_t sleeper_tid = std::stoll(m[1]);
  auto rep = run({kEacgm, "report", db_, "--json"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto profile = nlohmann::json::parse(rep.out).at("offcpu_profile");
  // the sleeper waits in stop.wait() (threading.Event's) while the main thread spends 0.5 s of
  // CPU
  double waited = 0;
  for (const auto& f : profile.at("functions"))
    if (f.at("name") == "hot_split.sleeper") waited = f.at("total_ns").get<double>() / 1e9;
  // (one CI run had the sleeper's whole wait missing, not only its stack, on 3.12: what was
  // recorded of the sleeper, and the counts of what was lost, say which)
  Db db(db_);
  std::string rows = db.text(
      "SELECT group_concat(tid || ':' || dur_ns || ':' || coalesce(py_stack, 0), ' ') FROM "
      "offcpu_samples");
  std::string lost = db.text(
      "SELECT group_concat(key || '=' || value, ' ') FROM meta WHERE key IN "
      "('offcpu_samples', 'offcpu_waits_lost', 'dropped_events')");
  EXPECT_GT(waited, 0.4) << "sleeper tid " << sleeper_tid << "; off-CPU rows (tid:dur:py_stack) "
                         << rows << "; " << lost << "\n"
                         << profile.dump();
  nlohmann::json thread;
  for (const auto& t : profile.at("threads"))
    if (t.at("tid") == sleeper_tid) thread = t;
  // its innermost Python function (3.10's code objects have no qualified names)
  EXPECT_TRUE(std::regex_match(thread.value("python", ""),
                               std::regex(R"(threading\.(Condition\.)?wait)")))
      << profile.dump();
}

// A Python program started through a shell wrapper (pyenv's python3 is a bash script that execs
// the interpreter) is the interpreter in the profiles' thread tables and the report's process
// lists, not bash: every name follows the exec. (The sleeper thread's first event comes as it
// ends: named as its process when its /proc entry went before it was decoded.)
TEST_F(RecordingTest, AProgramStartedThroughAShellWrapperIsNamedAsTheProgramItBecame) {
  std::string shim = dir_ + "/py-shim";  // (its process is named after the script at first)
  std::ofstream(shim) << "#!/bin/bash\n# like pyenv's shim\nexec /usr/bin/python3.11 \"$@\"\n";
  std::filesystem::permissions(shim, std::filesystem::perms::owner_all);
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--sample-hz", "499", "--", shim,
                std::string(EACGM_PY_WORKLOADS) + "/hot_split.py", kWorkloads + "/libhot_c.so",
                "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  // (the premise: it was the shell running the script first, in the kernel's eyes too)
  ASSERT_EQ(db.scalar("SELECT count(*) FROM processes WHERE name = 'py-shim' AND command LIKE "
                      "'/bin/bash %'"),
            1);
  auto rep = nlohmann::json::parse(run({kEacgm, "report", db_, "--json"}).out);
  for (const char* profile : {"cpu_profile", "offcpu_profile"}) {
    const auto& threads = rep.at(profile).at("threads");
    ASSERT_FALSE(threads.empty()) << profile;
    for (const auto& t : threads) EXPECT_EQ(t.at("name"), "python3.11") << profile << t.dump();
  }
  auto text = run({kEacgm, "report", db_});
  EXPECT_EQ(text.out.find("py-shim (pid"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("python3.11 (pid"), std::string::npos) << text.out;
}

// doctor says whether glibc's debug symbols are there (scripts/setup.sh installs libc6-dbg), by
// the same lookup the profiles use.
TEST_F(RecordingTest, DoctorFindsGlibcsDebugSymbols) {
  auto d = run({kEacgm, "doctor"});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      d.out, m,
      std::regex(
          R"(ok +debug symbols +glibc's in (/usr/lib/debug/\.build-id/[0-9a-f]{2}/[0-9a-f]{38}\.debug))")))
      << d.out;
  EXPECT_TRUE(std::filesystem::is_regular_file(m[1].str())) << m[1];
}

// doctor probes each kernel feature the BPF programs use on the running kernel; this 6.18 kernel
// has them all (uprobe sessions, 6.12, are the newest), so each is "ok" with its version.
TEST_F(RecordingTest, DoctorProbesEachKernelFeatureOnThisKernel) {
  auto d = run({kEacgm, "doctor"});
  ASSERT_EQ(d.exit_code, 0) << d.out << d.err;
  for (const char* feature : {"ring buffer", "task storage", "uprobe cookies", "bpf_find_vma",
                              "socket tracepoints", "bpf_task_from_pid", "timer tracepoint",
                              "uprobe_multi",
                              "uprobe sessions"})
    EXPECT_TRUE(std::regex_search(d.out, std::regex(std::string(R"(\n  ok +)") + feature +
                                                    R"( +Linux \d+\.\d+\+\n)")))
        << feature << " not probed ok:\n"
        << d.out;
}

// doctor loads the programs as a Python job's recording does (the stack walk in three of them)
// and says how many instructions the kernel's verifier went through for the largest. Until
// session 74 the stack walk's bpf_loop callback, checked again by 6.7+ verifiers for each
// iteration, took ~650,000 of the 1,000,000 a program may take (and ~1.3 s of CPU for each of
// the three programs at every start of record and the agent); a quarter of the limit leaves the
// walk room to grow, and a kernel that counts more room to load it.
TEST_F(RecordingTest, DoctorSaysTheVerifierWentThroughAQuarterOfItsLimitAtMost) {
  auto d = run({kEacgm, "doctor"});
  ASSERT_EQ(d.exit_code, 0) << d.out << d.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      d.out, m,
      std::regex(R"(call tracer loaded and verified \(the largest, (\w+), took the verifier )"
                 R"((\d+) instructions of the 1000000 it allows a program\))")))
      << d.out;
  EXPECT_LE(std::stoul(m[2].str()), 250000u) << m[1] << ": " << d.out;
}

INSTANTIATE_TEST_SUITE_P(CPython, Profile, ::testing::ValuesIn(kInterpreters),
                         [](const auto& info) { return info.param.label; });

// The pprof export, read by go tool pprof: the same shares as report, per function.
TEST_F(RecordingTest, ProfileExportedAsPprofIsReadByGoToolPprof) {
  if (system("command -v go >/dev/null 2>&1") != 0)
    FAIL() << "go is not installed: run scripts/setup.sh (it installs golang-go, whose go tool "
              "pprof this test reads the export with)";
  auto r =
      run({kEacgm, "record", "-q", "-o", db_, "--sample-hz", "499", "--", "/usr/bin/python3.11",
           std::string(EACGM_PY_WORKLOADS) + "/hot_split.py", kWorkloads + "/libhot_c.so", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string pb = dir_ + "/run.pb.gz";
  auto e = run({kEacgm, "export", db_, "--pprof", pb});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  auto rep = run({kEacgm, "report", db_, "--json"});
  auto profile = nlohmann::json::parse(rep.out).at("cpu_profile");
  Share py = share_of(profile, "hot_split.hot_py");
  Share c = share_of(profile, "hot_c_spin");

  // go tool pprof -top: "flat flat% sum% cum cum% name", in samples
  auto top = run({"/bin/sh", "-c",
                  "HOME=" + dir_ + " go tool pprof -top -sample_index=samples -nodecount=100 " +
                      pb + " 2>&1"});
  ASSERT_EQ(top.exit_code, 0) << top.out;
  std::map<std::string, std::pair<double, double>> flat_cum;  // name -> (flat%, cum%)
  std::smatch m;
  std::regex line(R"(^\s*\d+\s+([\d.]+)%\s+[\d.]+%\s+\d+\s+([\d.]+)%\s+(.+?)\s*$)");
  std::istringstream in(top.out);
  for (std::string l; std::getline(in, l);)
    if (std::regex_search(l, m, line)) flat_cum[m[3]] = {std::stod(m[1]), std::stod(m[2])};
  ASSERT_TRUE(flat_cum.count("hot_split.hot_py")) << top.out;
  ASSERT_TRUE(flat_cum.count("hot_c_spin")) << top.out;
  EXPECT_NEAR(flat_cum["hot_split.hot_py"].second, py.total, 0.1) << top.out;
  EXPECT_NEAR(flat_cum["hot_c_spin"].first, c.self, 0.1) << top.out;
  // Python frames keep their file and line: pprof lists hot_py's lines in hot_split.py
  auto lines =
      run({"/bin/sh", "-c",
           "HOME=" + dir_ + " go tool pprof -top -lines -sample_index=samples " + pb + " 2>&1"});
  EXPECT_NE(lines.out.find("hot_split.py:"), std::string::npos) << lines.out;
  // the CPU time is the sample count times the period (1/499 s); the waits are a third type
  auto cpu = run({"/bin/sh", "-c", "HOME=" + dir_ + " go tool pprof -raw " + pb + " 2>&1"});
  EXPECT_NE(cpu.out.find("samples/count cpu/nanoseconds[dflt] off_cpu/nanoseconds"),
            std::string::npos)
      << cpu.out;
  EXPECT_NE(cpu.out.find("Period: 2004008"), std::string::npos) << cpu.out;
  // the off-CPU profile: the sleeper waits for the whole run in sleeper(); pprof's cum for it is
  // report's total (pprof prints seconds with 3 significant digits)
  auto off = nlohmann::json::parse(rep.out).at("offcpu_profile");
  double sleeper_s = 0;
  for (const auto& f : off.at("functions"))
    if (f.at("name") == "hot_split.sleeper") sleeper_s = f.at("total_ns").get<double>() / 1e9;
  EXPECT_GT(sleeper_s, 1.5) << off.dump();
  auto waits =
      run({"/bin/sh", "-c",
           "HOME=" + dir_ + " go tool pprof -top -sample_index=off_cpu -unit=ms " + pb + " 2>&1"});
  ASSERT_EQ(waits.exit_code, 0) << waits.out;
  EXPECT_NE(waits.out.find("Type: off_cpu"), std::string::npos) << waits.out;
  ASSERT_TRUE(std::regex_search(waits.out, m,
                                std::regex(R"(([\d.]+)ms\s+[\d.]+%\s+hot_split\.sleeper\s*\n)")))
      << waits.out;
  EXPECT_NEAR(std::stod(m[1]), sleeper_s * 1000, 0.01 * sleeper_s * 1000) << waits.out;
  // without -sample_index pprof shows the CPU profile (the default sample type)
  auto deflt = run({"/bin/sh", "-c", "HOME=" + dir_ + " go tool pprof -top " + pb + " 2>&1"});
  EXPECT_NE(deflt.out.find("Type: cpu"), std::string::npos) << deflt.out;

  // the Perfetto trace: one PerfSample packet (TracePacket field 66) per sample, their stacks'
  // functions interned
  std::string trace = dir_ + "/run.pftrace";
  ASSERT_EQ(run({kEacgm, "export", db_, "--perfetto", trace}).exit_code, 0);
  auto raw = run({"/bin/sh", "-c", std::string(EACGM_PROTOC) + " --decode_raw < '" + trace + "'"});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  size_t perf_samples = 0;
  for (size_t at = raw.out.find("\n  66 {"); at != std::string::npos;
       at = raw.out.find("\n  66 {", at + 1))
    ++perf_samples;
  EXPECT_EQ(perf_samples, profile.at("samples").get<size_t>());
  EXPECT_NE(raw.out.find("\"hot_c_spin\""), std::string::npos);
  EXPECT_NE(raw.out.find("\"hot_split.hot_py\""), std::string::npos);

  // the page: the flame graph drawn, hot_py and hot_c_spin in it and in the functions' table
  // with report's counts
  if (chromium_missing().empty()) {
    std::string page = dir_ + "/profile.html";
    ASSERT_EQ(run({kEacgm, "report", db_, "--html", page}).exit_code, 0);
    Rendered p = render(page, "cpu_profile");
    expect_drawn(p, {"flame", "flame-offcpu"});
    const auto& data = p.data.at("profile");
    EXPECT_EQ(data.at("samples"), profile.at("samples"));
    std::function<uint64_t(const nlohmann::json&, const std::string&)> in_tree =
        [&](const nlohmann::json& node, const std::string& name) -> uint64_t {
      uint64_t v = node.value("n", "") == name ? node.at("v").get<uint64_t>() : 0;
      for (const auto& c : node.at("c")) v += in_tree(c, name);
      return v;
    };
    double n = profile.at("samples").get<double>();
    EXPECT_NEAR(100 * double(in_tree(data.at("tree"), "hot_split.hot_py")) / n, py.total, 0.5);
    EXPECT_NEAR(100 * double(in_tree(data.at("tree"), "hot_c_spin")) / n, c.total, 0.5);
    EXPECT_NE(p.dom.find("hot_c_spin"), std::string::npos);
    // the off-CPU flame graph: the sleeper's wait, in nanoseconds, as report has it
    EXPECT_NEAR(double(in_tree(p.data.at("offcpu_profile").at("tree"), "hot_split.sleeper")) / 1e9,
                sleeper_s, 0.001);
    EXPECT_NE(p.dom.find("Off-CPU profile"), std::string::npos);
    // by thread: the sleeper's wait, and the table of threads drawn where there are two
    std::smatch tid;
    ASSERT_TRUE(std::regex_search(r.out, tid, std::regex(R"(sleeper tid (\d+))"))) << r.out;
    const auto& by_thread = p.data.at("offcpu_profile").at("by_thread");
    bool found = false;
    for (const auto& t : by_thread)
      if (std::to_string(t.at("tid").get<int64_t>()) == tid[1].str()) {
        found = true;
        // its wait in sleeper(), and its start and end (taking the GIL may be a wait)
        EXPECT_GE(t.at("weight").get<double>() / 1e9, sleeper_s - 1e-6);
        EXPECT_LE(t.at("weight").get<double>() / 1e9, sleeper_s + 0.1);
        EXPECT_EQ(t.at("python"), "threading.Condition.wait") << t.dump();
      }
    EXPECT_TRUE(found) << by_thread.dump();
    if (by_thread.size() > 1) {
      EXPECT_NE(p.dom.find("by thread"), std::string::npos);
      EXPECT_NE(p.dom.find("tid " + tid[1].str()), std::string::npos);
    }
  }

  // bad rates are usage errors, before anything runs or is written
  for (const char* bad : {"-1", "1000", "nan", "inf", "1.5", "", "99x"}) {
    auto b = run({kEacgm, "record", "-q", "-o", dir_ + "/bad.eacgm.db", "--sample-hz", bad, "--",
                  "/bin/true"});
    EXPECT_EQ(b.exit_code, 2) << bad << ": " << b.err;
    EXPECT_NE(b.err.find("--sample-hz"), std::string::npos) << bad << ": " << b.err;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/bad.eacgm.db")) << bad;
  }

  // bad outputs, and a recording without a profile
  EXPECT_EQ(run({kEacgm, "export", db_, "--pprof", pb}).exit_code, 2) << "exists, no --force";
  auto empty = run({kEacgm, "export", db_, "--pprof", ""});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("--pprof: give a file name"), std::string::npos) << empty.err;
  std::string none = dir_ + "/none.eacgm.db";
  ASSERT_EQ(
      run({kEacgm, "record", "-q", "-o", none, "--sample-hz", "0", "--", "/bin/true"}).exit_code,
      0);
  auto no = run({kEacgm, "export", none, "--pprof", dir_ + "/none.pb.gz"});
  EXPECT_EQ(no.exit_code, 1);
  EXPECT_NE(no.err.find("has no CPU profile: record it with --sample-hz above 0"),
            std::string::npos)
      << no.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/none.pb.gz"));
}

}  // namespace
}  // namespace e2e
