// End to end: the python layer on real CPython interpreters (Debian's python3.11 and the pyenv
// 3.10, 3.11, 3.12 and 3.13 builds): exact calls, counts and nesting, Python stacks of CUDA calls,
// filters, attaching to a running interpreter, and unsupported versions.
#include "e2e_util.h"
#include "probe/library_finder.h"
#include "python_interpreters.h"

namespace e2e {
namespace {

inline const std::string kPyWorkloads = EACGM_PY_WORKLOADS;

class RecordPython : public RecordingTest, public ::testing::WithParamInterface<Interpreter> {
 protected:
  void SetUp() override {
    RecordingTest::SetUp();
    if (IsSkipped()) return;
    if (!std::filesystem::exists(GetParam().path))
      GTEST_SKIP() << GetParam().path << " is not installed: CPython 3." << GetParam().minor
                   << " is not covered here";
  }
  // 3.10 code objects carry no qualified name: a method is module.method there.
  std::string method(const std::string& module, const std::string& cls, const std::string& m) {
    return GetParam().minor == 10 ? module + "." + m : module + "." + cls + "." + m;
  }
};

TEST_P(RecordPython, CallsCountsAndNestingAreExact) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", "user", "--",
                GetParam().path, kPyWorkloads + "/nesting.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  std::string forward = method("nesting", "Model", "forward");
  // A generator's resumptions are calls of their own: 3 yields and the final StopIteration.
  // From 3.11 on, calling a generator function runs its frame once more, to its first
  // instruction (RETURN_GENERATOR), which makes the generator object.
  int64_t gens = GetParam().minor >= 11 ? 5 : 4;
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM python_calls GROUP BY name"),
            (std::map<std::string, int64_t>{{"nesting.<module>", 1}, {"nesting.Model", 1},
                                            {"nesting.main", 1}, {"nesting.f", 1},
                                            {"nesting.g", 4}, {"nesting.h", 61},
                                            {forward, 1}, {"nesting.loop", 1},
                                            {"nesting.consume", 1}, {"nesting.gen", gens}}));
  // each call's parent: the traced call one level up that contains it in time, same thread
  EXPECT_EQ(db.pairs("SELECT c.name || ' <- ' || p.name, count(*) FROM python_calls c "
                     "JOIN python_calls p ON p.tid = c.tid AND p.depth = c.depth - 1 AND "
                     "p.ts_ns <= c.ts_ns AND c.ts_ns + c.dur_ns <= p.ts_ns + p.dur_ns "
                     "GROUP BY 1"),
            (std::map<std::string, int64_t>{{"nesting.Model <- nesting.<module>", 1},
                                            {"nesting.main <- nesting.<module>", 1},
                                            {"nesting.f <- nesting.main", 1},
                                            {forward + " <- nesting.main", 1},
                                            {"nesting.loop <- nesting.main", 1},
                                            {"nesting.consume <- nesting.main", 1},
                                            {"nesting.g <- nesting.f", 3},
                                            {"nesting.g <- " + forward, 1},
                                            {"nesting.h <- nesting.g", 8},
                                            {"nesting.h <- nesting.loop", 50},
                                            {"nesting.gen <- nesting.consume", gens},
                                            {"nesting.h <- nesting.gen", 3}}));
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE depth = 0"), 1);
  EXPECT_EQ(db.pairs("SELECT name, line FROM python_calls WHERE name IN ('nesting.h', "
                     "'nesting.g', 'nesting.main') GROUP BY name"),
            (std::map<std::string, int64_t>{{"nesting.h", 5}, {"nesting.g", 9},
                                            {"nesting.main", 42}}));
  // the standard library is not the user's code: not recorded by default
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE file != '" + kPyWorkloads +
                      "/nesting.py'"),
            0);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM trace WHERE layer = 'python'"), 72 + gens);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'python_calls'"), std::to_string(72 + gens));
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'dropped_events'"), "0");
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE dur_ns <= 0"), 0);
  // each call knows how long its thread waited for a CPU meanwhile, within its duration
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE runq_ns IS NULL OR runq_ns < 0 "
                      "OR runq_ns > dur_ns"),
            0);
}

// The Python frames of each call named `call` in the recording of `script` (in kPyWorkloads):
// "depth name" -> line.
std::map<std::string, int64_t> cuda_stack_frames(Db& db, const std::string& call,
                                                 const std::string& script = "cuda_stack.py") {
  std::map<std::string, int64_t> m;
  db.each("SELECT s.depth, s.name, s.file, s.line FROM cuda_calls c JOIN python_stacks s "
          "ON s.id = c.py_stack WHERE c.name = '" + call + "' ORDER BY s.depth",
          [&](sqlite3_stmt* s) {
            std::string file = reinterpret_cast<const char*>(sqlite3_column_text(s, 2));
            EXPECT_EQ(file, kPyWorkloads + "/" + script);
            m[std::to_string(sqlite3_column_int64(s, 0)) + " " +
              reinterpret_cast<const char*>(sqlite3_column_text(s, 1))] =
                sqlite3_column_int64(s, 3);
          });
  return m;
}

// `step`: Trainer.step's name in this Python version (RecordPython::method).
void expect_cuda_stack_frames(Db& db, const std::string& step, bool only_these = true) {
  if (only_these)
    EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
              (std::map<std::string, int64_t>{{"cudaMalloc", 1}, {"cudaFree", 1}}));
  EXPECT_EQ(cuda_stack_frames(db, "cudaMalloc"),
            (std::map<std::string, int64_t>{{"0 cuda_stack.allocate", 11},
                                            {"1 cuda_stack.layer", 15},
                                            {"2 " + step, 20},
                                            {"3 cuda_stack.<module>", 23}}));
  EXPECT_EQ(cuda_stack_frames(db, "cudaFree"),
            (std::map<std::string, int64_t>{{"0 cuda_stack.<module>", 24}}));
}

TEST_P(RecordPython, CudaCallsCarryTheirPythonStacks) {
  E2E_REQUIRE_CUDA();
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "cuda,python", "--python-calls",
                "user", "--", GetParam().path, kPyWorkloads + "/cuda_stack.py",
                std::string(EACGM_CUDA_HOME) + "/lib64/libcudart.so.13"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  expect_cuda_stack_frames(db, method("cuda_stack", "Trainer", "step"));
  // the call lies inside the Python call that made it
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls c JOIN python_calls p ON p.tid = c.tid "
                      "AND p.name = 'cuda_stack.allocate' AND p.ts_ns <= c.ts_ns AND "
                      "c.ts_ns + c.dur_ns <= p.ts_ns + p.dur_ns WHERE c.name = 'cudaMalloc'"),
            1);
}

// Frames outside the thread's data stack (a generator's, a coroutine's: 3.11+ keeps them in
// their objects) and a walk of 27 frames, several 2 KiB blocks of them, which the walk reads a
// block at a time (py_window_span): every frame in order, with its line.
TEST_P(RecordPython, StacksThroughGeneratorsCoroutinesAndManyFrames) {
  E2E_REQUIRE_CUDA();
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "cuda,python",
                "--python-stack-depth", "32", "--", GetParam().path,
                kPyWorkloads + "/cuda_gen_stack.py",
                std::string(EACGM_CUDA_HOME) + "/lib64/libcudart.so.13"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            (std::map<std::string, int64_t>{{"cudaMalloc", 1}, {"cudaFree", 1}}));
  for (const auto& [call, inner] :
       std::vector<std::pair<std::string, std::pair<std::string, int64_t>>>{
           {"cudaMalloc", {"cuda_gen_stack.batches", 13}},
           {"cudaFree", {"cuda_gen_stack.release", 17}}}) {
    std::map<std::string, int64_t> want{{"0 " + inner.first, inner.second},
                                        {"1 cuda_gen_stack.deep", call == "cudaMalloc" ? 23 : 27}};
    for (int d = 2; d <= 25; d++) want[std::to_string(d) + " cuda_gen_stack.deep"] = 31;
    want["26 cuda_gen_stack.<module>"] = 34;
    EXPECT_EQ(cuda_stack_frames(db, call, "cuda_gen_stack.py"), want) << call;
  }
}

// A thread whose CUDA calls found its process was no Python one (so it stops looking) and that
// then execs Python: its calls from Python get their stacks, the ones before have none.
TEST_P(RecordPython, AThreadThatBecomesPythonGetsItsStacks) {
  E2E_REQUIRE_CUDA();
  std::string cudart = std::string(EACGM_CUDA_HOME) + "/lib64/libcudart.so.13";
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_then_exec",
                GetParam().path, kPyWorkloads + "/cuda_stack.py", cudart});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE name = 'cudaDeviceSynchronize' AND "
                      "py_stack IS NULL"),
            3);
  expect_cuda_stack_frames(db, method("cuda_stack", "Trainer", "step"), false);
  // the thread's name followed the exec: first the C program, then (its latest row, which the
  // profile, the page and the exports read) the interpreter it became
  std::string pid = std::to_string(db.scalar("SELECT pid FROM cuda_calls LIMIT 1"));
  EXPECT_EQ(db.text("SELECT name FROM threads WHERE pid = " + pid + " AND tid = " + pid +
                    " ORDER BY rowid LIMIT 1"),
            "cuda_then_exec");
  EXPECT_EQ(db.text("SELECT name FROM threads WHERE pid = " + pid + " AND tid = " + pid +
                    " ORDER BY rowid DESC LIMIT 1"),
            std::filesystem::path(GetParam().path).filename().string().substr(0, 15));
}

// The default layers (auto) give a Python process's CUDA calls their stacks, read from the
// interpreter's thread states, without probing Python calls (no eval probe, no hook).
TEST_P(RecordPython, DefaultLayersGiveStacksWithoutPythonCalls) {
  E2E_REQUIRE_CUDA();
  auto r = run({kEacgm, "record", "-o", db_, "--", GetParam().path,
                kPyWorkloads + "/cuda_stack.py",
                std::string(EACGM_CUDA_HOME) + "/lib64/libcudart.so.13"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  expect_cuda_stack_frames(db, method("cuda_stack", "Trainer", "step"));
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls"), 0);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'python_hook'"), "off");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'layers'"), "cuda,python-stacks,host");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'layers_requested'"), "auto");
  // one line says which layers were traced and why
  EXPECT_NE(r.err.find("eacgm: layers (auto): cuda (libcudart.so.13, pid "), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("python-stacks (CPython 3." + std::to_string(GetParam().minor)),
            std::string::npos)
      << r.err;
  // gputime: CUDA was used but loaded no injection library, and the line says why (here, where
  // no NVIDIA driver runs, that there is none; with a driver, that CUDA never loaded it)
  EXPECT_NE(r.err.find("not used by the traced processes: comm, torch;"), std::string::npos)
      << r.err;
  const std::string why = eacgm::no_gpu_driver().empty()
                              ? "gputime (CUDA never loaded eacgm's injection library"
                              : "gputime (no NVIDIA driver on this machine";
  EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
}

TEST_P(RecordPython, FilterChoosesTheFunctions) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", "nesting.?,json", "--",
                GetParam().path, kPyWorkloads + "/nesting.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM python_calls GROUP BY name"),
            (std::map<std::string, int64_t>{{"nesting.f", 1}, {"nesting.g", 4},
                                            {"nesting.h", 61}}));
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'python_filter'"), "nesting.?,json");
}

// The eval-frame hook (3.11+) turns inlined calls into C calls and deoptimises specialised
// instructions: what the program does must not change (generators, asyncio, tracebacks, ...).
TEST_P(RecordPython, ProgramOutputIsUnchanged) {
  const std::string script = kPyWorkloads + "/behaviour.py";
  auto plain = run({GetParam().path, script});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", "user", "--",
                GetParam().path, script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  Db db(db_);
  // recurse(500) nests 501 calls; the kernel keeps 64 return probes per thread, <module> holds
  // one: the 63 outermost are timed, the rest are not recorded
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE name = 'behaviour.recurse'"), 63);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE name = 'behaviour.leaf'"),
            GetParam().minor >= 11 ? 15 : 10);  // each coroutine: created (3.11+), run, resumed
}

INSTANTIATE_TEST_SUITE_P(Interpreters, RecordPython, ::testing::ValuesIn(kInterpreters),
                         [](const auto& info) { return info.param.label; });

TEST_F(RecordingTest, PythonAttachRecordsAndGivesBackTheHook) {
  const std::string python = "/usr/bin/python3.11";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is not installed";
  // 8 s: eacgm takes 2-3 s to start on a loaded 2-core machine, and the hook can only be given
  // back to a process that outlives the 1 s recording
  Process target({python, kPyWorkloads + "/busy_loop.py", "8"});
  ASSERT_TRUE(target.wait_for_stderr("ready", 20)) << target.err();
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", "user", "--duration", "1",
                "-p", std::to_string(target.pid())});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(target.wait(30), 0) << target.err();
  EXPECT_EQ(target.out(), "True\n");
  Db db(db_);
  // the loop's calls, inlined by 3.11 until the hook, are seen once it is in
  EXPECT_GT(db.scalar("SELECT count(*) FROM python_calls WHERE name = 'busy_loop.work'"), 1000);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'python_hooks_restored'"), "1");
}

TEST_F(RecordingTest, PythonUnsupportedVersionIsNamed) {
  // 3.14 (a newer, unread layout) where installed, else the older 3.9
  std::string python = "/root/.pyenv/versions/3.14.0/bin/python3.14";
  if (!std::filesystem::exists(python)) python = "/root/.pyenv/versions/3.9.18/bin/python3.9";
  if (!std::filesystem::exists(python))
    GTEST_SKIP() << "no unsupported CPython (pyenv 3.14.0 or 3.9.18) is installed";
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", "user", "--", python,
                kPyWorkloads + "/nesting.py"});
  EXPECT_EQ(r.exit_code, 0) << r.err;  // the job runs; only its Python calls are not traced
  EXPECT_NE(r.err.find("which eacgm cannot read (supported: 3.10, 3.11, 3.12, 3.13); its Python "
                       "calls and stacks are not traced"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("eacgm: layer python: /root/.pyenv/versions/"), std::string::npos) << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls"), 0);
  EXPECT_NE(db.text("SELECT value FROM meta WHERE key = 'python_warnings'").find("is CPython 3."),
            std::string::npos);
}

TEST_F(RecordingTest, PythonBadFilterIsAUsageError) {
  for (const char* bad : {",", "-user", "-json"}) {
    auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", bad, "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find(std::string("--python-calls '") + bad + "': "), std::string::npos)
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(db_));
  }
  auto both = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", "user",
                   "--python-filter", "user", "--", "/bin/true"});
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_NE(both.err.find("give --python-calls only"), std::string::npos) << both.err;
  EXPECT_FALSE(std::filesystem::exists(db_));
  // and --help says nothing of the hidden former name (an empty "Excludes:" until session 25)
  auto help = run({kEacgm, "record", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.find("Excludes"), std::string::npos) << help.out;
}

// The python layer by itself costs no probe per Python call: it reads the Python stacks of the
// other layers' calls and of the CPU profile's samples. Per-call timing is --python-calls (and
// --python-filter, its former name, still turns it on, with a line saying so).
TEST_F(RecordingTest, PythonLayerTimesCallsOnlyWhenAsked) {
  const std::string python = "/usr/bin/python3.11";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is not installed";
  auto r = run({kEacgm, "record", "-o", db_, "--layers", "python", "--sample-hz", "499", "--",
                python, kPyWorkloads + "/hot_split.py", kWorkloads + "/libhot_c.so", "1.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    Db db(db_);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls"), 0);
    EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'python_hook'"), "off");
    EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'python_filter'"), "(stacks only)");
    EXPECT_NE(db.text("SELECT value FROM meta WHERE key = 'python_interpreters'").find("(3.11"),
              std::string::npos);
    // the samples carry Python stacks, and the hot function is in most of them
    EXPECT_GT(db.scalar("SELECT count(*) FROM stack_samples s JOIN python_stacks p ON "
                        "p.id = s.py_stack WHERE p.name = 'hot_split.hot_py'"),
              db.scalar("SELECT count(*) FROM stack_samples") / 3);
  }
  std::string old = dir_ + "/old.eacgm.db";
  auto former = run({kEacgm, "record", "-o", old, "--sample-hz", "0", "--python-filter",
                     "nesting.h", "--", python, kPyWorkloads + "/nesting.py"});
  ASSERT_EQ(former.exit_code, 0) << former.err;
  EXPECT_NE(former.err.find("--python-filter is now --python-calls"), std::string::npos)
      << former.err;
  Db db(old);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM python_calls GROUP BY name"),
            (std::map<std::string, int64_t>{{"nesting.h", 61}}));
}

TEST_F(RecordingTest, NoPythonStacksWithoutThePythonLayer) {
  E2E_REQUIRE_CUDA();
  const std::string python = "/usr/bin/python3.11";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is not installed";
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "cuda", "--", python,
                kPyWorkloads + "/cuda_stack.py",
                std::string(EACGM_CUDA_HOME) + "/lib64/libcudart.so.13"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls"), 2);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE py_stack IS NOT NULL"), 0);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_stacks"), 0);
}

// A kernel whose verifier refuses the python layer's programs (6.18.44 refused a version of its
// stack walk) costs the default recording its Python stacks, said in one line, not the recording;
// asked for by name, the python layer is the error it was. (EACGM_TEST_REFUSE_PYTHON makes the
// call tracer fail as such a kernel's verifier would, after loading the programs.)
TEST_F(RecordingTest, AKernelRefusingThePythonProgramsCostsOnlyThePythonStacks) {
  E2E_REQUIRE_CUDA();
  const std::string python = "/usr/bin/python3.11";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is not installed";
  const std::vector<std::string> refuse = {"EACGM_TEST_REFUSE_PYTHON=1"};
  const std::string cudart = std::string(EACGM_CUDA_HOME) + "/lib64/libcudart.so.13";
  auto r = run({kEacgm, "record", "-o", db_, "--", python, kPyWorkloads + "/cuda_stack.py", cudart},
               refuse);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("eacgm: layer python-stacks is off: the kernel's BPF verifier"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("refused for the test (EACGM_TEST_REFUSE_PYTHON)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("BEGIN PROG LOAD LOG"), std::string::npos) << r.err;  // one line, no log
  {
    Db db(db_);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls"), 2);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM python_stacks"), 0);
    EXPECT_NE(db.text("SELECT value FROM meta WHERE key = 'layers_why'").find("off: python-stacks ("),
              std::string::npos);
  }
  std::string named = dir_ + "/named.eacgm.db";
  auto asked = run({kEacgm, "record", "-o", named, "--layers", "cuda,python", "--", python,
                    kPyWorkloads + "/cuda_stack.py", cudart},
                   refuse);
  EXPECT_NE(asked.exit_code, 0);
  EXPECT_NE(asked.err.find("cannot load the BPF programs: the kernel's BPF verifier"),
            std::string::npos)
      << asked.err;
  auto doctor = run({kEacgm, "doctor"}, refuse);
  EXPECT_NE(doctor.out.find("call tracer loaded and verified without the python layer's programs"),
            std::string::npos)
      << doctor.out;
  EXPECT_NE(doctor.out.find("Python stacks"), std::string::npos) << doctor.out;
  // without the fault the same job has its stacks (the test sees what it says it sees)
  auto plain = run({kEacgm, "record", "-f", "-o", db_, "--", python, kPyWorkloads + "/cuda_stack.py",
                    cudart});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE py_stack IS NOT NULL"), 2);
}

}  // namespace
}  // namespace e2e

namespace e2e {
namespace {

// Without the hook, CPython 3.12 and 3.13 inline Python-to-Python calls: only frames entered
// from C (the module, the class body run by __build_class__) reach the probe. This is what the
// hook is for, and --python-no-hook gives it up for the user's recursion depth.
class PythonNoHook : public RecordingTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(PythonNoHook, SeesOnlyCallsFromC) {
  const std::string python = GetParam();
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is not installed";
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-calls", "user", "--python-no-hook",
                "--", python, kPyWorkloads + "/nesting.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE name = 'nesting.<module>'"), 1);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE name = 'nesting.Model'"), 1);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM python_calls WHERE name IN ('nesting.h', "
                      "'nesting.g', 'nesting.f', 'nesting.main')"),
            0);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'python_hook'"), "off");
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonNoHook,
                         ::testing::Values("/root/.pyenv/versions/3.12.1/bin/python3.12",
                                           "/root/.pyenv/versions/3.13.0/bin/python3.13"),
                         [](const auto& info) {
                           return "pyenv3" + info.param.substr(info.param.rfind('.') + 1);
                         });

}  // namespace
}  // namespace e2e

namespace e2e {
namespace {

// --python-stack-depth goes up to 32 frames (the walk is a bpf_loop, verified once: an unrolled
// loop was refused beyond 14 with "Argument list too long"); 33 is a usage error before anything
// runs. CPU profile samples keep the innermost 32 frames whatever the option says.
TEST_F(RecordingTest, PythonStackDepthGoesTo32AndSamplesKeep32) {
  const std::string deep_loop =
      "import time\n"
      "def f(n):\n"
      "    if n == 0:\n"
      "        end = time.thread_time() + 0.5\n"
      "        while time.thread_time() < end: pass\n"
      "        return\n"
      "    f(n - 1)\n"
      "f(40)\n";
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--python-stack-depth", "32", "--sample-hz",
                "499", "--", "/usr/bin/python3.11", "-c", deep_loop});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("cannot load"), std::string::npos) << r.err;
  Db db(db_);
  // the busy loop's samples: f 32 deep (the innermost 32 of 42 frames)
  EXPECT_GT(db.scalar("SELECT count(*) FROM stack_samples s WHERE (SELECT count(*) FROM "
                      "python_stacks p WHERE p.id = s.py_stack AND p.name = '<string>.f') = 32"),
            100);
  EXPECT_EQ(db.scalar("SELECT max(depth) FROM python_stacks"), 31);
  std::string other = dir_ + "/deep.eacgm.db";
  auto deep = run({kEacgm, "record", "-q", "-o", other, "--python-stack-depth", "33", "--",
                   "/usr/bin/python3.11", "-c", "pass"});
  EXPECT_EQ(deep.exit_code, 2) << deep.err;
  EXPECT_NE(deep.err.find("--python-stack-depth"), std::string::npos) << deep.err;
  EXPECT_FALSE(std::filesystem::exists(other));
}

}  // namespace
}  // namespace e2e
