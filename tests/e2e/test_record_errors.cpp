// End to end: bad input gets one clear line and the documented exit status, and a target
// without CUDA is still recorded.
#include <signal.h>

#include <chrono>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "e2e_util.h"

namespace e2e {
namespace {

class RecordErrors : public RecordingTest {};

TEST_F(RecordErrors, CommandThatDoesNotExist) {
  auto r = run({kEacgm, "record", "-o", db_, "--", "no-such-command-eacgm"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot run no-such-command-eacgm: command not found"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(db_));
}

TEST_F(RecordErrors, PidThatDoesNotExist) {
  // pid_max is at most 4194304: this pid cannot exist
  auto r = run({kEacgm, "record", "-o", db_, "-p", "4194305"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot attach to pid 4194305: no such process"), std::string::npos)
      << r.err;
}

TEST_F(RecordErrors, PidThatIsNotANumber) {
  auto r = run({kEacgm, "record", "-o", db_, "-p", "12,abc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'abc' is not a process id"), std::string::npos) << r.err;
}

TEST_F(RecordErrors, ExistingOutputNeedsForce) {
  { std::ofstream(db_) << "precious"; }
  auto r = run({kEacgm, "record", "-o", db_, "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already exists (use --force"), std::string::npos) << r.err;
  std::ifstream in(db_);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");  // untouched
  auto forced = run({kEacgm, "record", "-q", "--force", "-o", db_, "--", "/bin/true"});
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
}

TEST_F(RecordErrors, UnwritableOutputDirectory) {
  auto r = run({kEacgm, "record", "-o", dir_ + "/missing/dir/run.db", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

TEST_F(RecordErrors, NotRoot) {
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) not installed";
  std::filesystem::permissions(dir_, std::filesystem::perms::all);
  auto r = run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", kEacgm,
                "record", "-o", db_, "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("recording needs CAP_BPF and CAP_PERFMON"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing CAP_BPF and CAP_PERFMON: run as root"), std::string::npos)
      << r.err;
}

TEST_F(RecordErrors, UnknownLayer) {
  auto r = run({kEacgm, "record", "--layers", "cuda,bogus", "-o", db_, "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown layer 'bogus'"), std::string::npos) << r.err;
}

TEST_F(RecordErrors, NoTargetGiven) {
  auto r = run({kEacgm, "record", "-o", db_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("say what to trace"), std::string::npos) << r.err;
}

TEST_F(RecordErrors, TargetWithoutCudaIsRecordedAnyway) {
  auto r = run({kEacgm, "record", "-o", db_, "--layers", "cuda", "--", "/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("layer cuda: no CUDA runtime or driver library"), std::string::npos)
      << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls"), 0);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM processes WHERE name = 'sh'"), 1);
}

// By default the layers follow the program: one that loads none of the traced libraries gets
// the host layer, and one line says so, instead of a warning about CUDA it never asked for.
TEST_F(RecordErrors, DefaultLayersSayWhatTheProgramDidNotLoad) {
  auto r = run({kEacgm, "record", "-o", db_, "--", "/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.err.find("layer cuda: no CUDA"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("eacgm: layers (auto): host (always); not used by the traced processes: "
                       "cuda, comm, torch, python-stacks"),
            std::string::npos)
      << r.err;
  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'layers'"), "host");
  EXPECT_GT(db.scalar("SELECT count(*) FROM host_samples"), 0);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM processes WHERE name = 'sh'"), 1);
}

TEST_F(RecordErrors, ReportOnAFileThatIsNotARecording) {
  { std::ofstream(db_) << "not a database at all, just some text that is long enough......"; }
  auto r = run({kEacgm, "report", db_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not an eacgm recording"), std::string::npos) << r.err;
  auto missing = run({kEacgm, "report", dir_ + "/nope.db"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace e2e

namespace e2e {
namespace {

// A full disk: recording stops with a clear message, and what was committed stays readable.
TEST(RecordDiskFull, StopsWithAMessageAndKeepsWhatWasWritten) {
  E2E_REQUIRE_ROOT();
  E2E_REQUIRE_CUDA();
  std::string dir = scratch_dir() + "/small";
  std::filesystem::create_directories(dir);
  // room for the schema, the first batches and little more (the loop below writes megabytes)
  ASSERT_EQ(run({"/bin/mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", dir}).exit_code, 0);
  // unmounted on every path, a failed assertion included, so the next run starts clean
  struct Unmount {
    std::string dir;
    ~Unmount() { run({"/bin/umount", dir}); }
  } unmount{dir};
  std::string db = dir + "/run.eacgm.db";
  auto r = run({kEacgm, "record", "-q", "-o", db, "--", kWorkloads + "/cuda_api_calls",
                "--loop-seconds", "3"});
  // eacgm stops recording at the error (exit 1); the job itself is not killed
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("disk full"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("keeps running untraced"), std::string::npos) << r.err;
  // it does, for the rest of its 3 s: it must not outlive the test (a later test's agent traces
  // every process on the machine and would count its calls)
  std::smatch m;
  if (std::regex_search(r.err, m, std::regex(R"(\(pid (\d+)\) keeps running untraced)"))) {
    pid_t job = std::stoi(m[1]);
    kill(job, SIGKILL);
    for (int i = 0; i < 500 && kill(job, 0) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } else {
    ADD_FAILURE() << "no pid in: " << r.err;
  }
  {
    Db d(db);
    EXPECT_EQ(d.text("PRAGMA integrity_check"), "ok");
    EXPECT_GT(d.scalar("SELECT count(*) FROM cuda_calls"), 0);
    EXPECT_EQ(d.text("SELECT value FROM meta WHERE key = 'eacgm_version'"), "0.1.0");
  }
}


// `eacgm --help` lists each subcommand in one line, as git and perf do; the detail stays in
// the subcommand's own --help (issue 33: merge's and detect's ran to 6-9 lines there).
TEST(Help, TopLevelListsEachSubcommandInOneLine) {
  auto top = run({kEacgm, "--help"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  std::string list = top.out.substr(top.out.find("Subcommands:"));
  list = list.substr(0, list.find("\n\n"));
  std::istringstream lines(list);
  std::string line;
  std::getline(lines, line);  // the heading
  std::set<std::string> named;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 150u) << line;
    std::istringstream words(line);
    std::string name;
    words >> name;
    named.insert(name);
  }
  EXPECT_EQ(named, (std::set<std::string>{"record", "report", "export", "doctor", "gmm", "detect",
                                          "agent", "merge", "gputime-library"}))
      << list;
  EXPECT_NE(top.out.find("eacgm SUBCOMMAND --help"), std::string::npos) << top.out;
  auto merge = run({kEacgm, "merge", "--help"});
  EXPECT_NE(merge.out.find("NTP-grade offsets"), std::string::npos) << merge.out;
  EXPECT_EQ(merge.out.find("eacgm SUBCOMMAND --help"), std::string::npos) << "not its footer";
}
}  // namespace
}  // namespace e2e
