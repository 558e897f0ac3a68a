// End to end: how `eacgm record` treats the command it launches and the files it writes, as an
// SRE would try them. The command sees the signal dispositions and mask it would have had
// without eacgm; a stop signal sent to eacgm alone, and --duration, stop the command and say so
// (never left running unseen); a device, FIFO or symlink given as output is never replaced,
// --force or not; a recording is created 0600; a start that fails leaves no file; empty lists
// and bad patterns are usage errors before anything starts.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <regex>

#include "e2e_util.h"

namespace e2e {
namespace {

class RecordStops : public RecordingTest {};

std::string sig_lines(const std::string& status) {
  std::string out;
  std::regex line(R"((SigBlk|SigIgn):\s*([0-9a-f]+))");
  for (std::sregex_iterator it(status.begin(), status.end(), line), end; it != end; ++it)
    out += (*it)[1].str() + "=" + (*it)[2].str() + " ";
  return out;
}

TEST_F(RecordStops, TheCommandSeesTheSignalsItWouldHaveSeen) {
  const std::string show = "grep -E 'SigBlk|SigIgn' /proc/self/status";
  auto plain = run({"/bin/sh", "-c", show});
  auto traced = run({kEacgm, "record", "-q", "-o", db_, "--", "/bin/sh", "-c", show});
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_FALSE(sig_lines(plain.out).empty()) << plain.out;
  EXPECT_EQ(sig_lines(traced.out), sig_lines(plain.out));
  // what a shell's `trap '' INT` (nohup, `cmd &`) ignored stays ignored
  auto plain_ign = run({"/bin/sh", "-c", "trap '' INT HUP; exec /bin/sh -c \"" + show + "\""});
  auto traced_ign = run({"/bin/sh", "-c",
                         "trap '' INT HUP; exec " + kEacgm + " record -q -f -o " + db_ +
                             " -- /bin/sh -c \"" + show + "\""});
  ASSERT_EQ(traced_ign.exit_code, 0) << traced_ign.err;
  EXPECT_NE(sig_lines(plain_ign.out), sig_lines(plain.out));
  EXPECT_EQ(sig_lines(traced_ign.out), sig_lines(plain_ign.out));
  // a pipeline relies on SIGPIPE: `yes` dies of it quietly
  auto pipe =
      run({kEacgm, "record", "-q", "-f", "-o", db_, "--", "/bin/sh", "-c", "yes | head -1"});
  EXPECT_EQ(pipe.exit_code, 0) << pipe.err;
  EXPECT_EQ(pipe.err.find("Broken pipe"), std::string::npos) << pipe.err;
}

bool running(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return paren != std::string::npos && line.substr(paren + 2, 1) != "Z";
}

// The launched command's pid, from the recording (it is the process whose parent is eacgm).
pid_t command_pid(const std::string& db, pid_t eacgm) {
  return pid_t(Db(db).scalar("SELECT pid FROM processes WHERE ppid = " + std::to_string(eacgm)));
}

TEST_F(RecordStops, SigintSentToEacgmAloneStopsTheCommandToo) {
  // its own process group, as a shell would start it in the background: the signal reaches
  // eacgm only, not the command
  Process p({kEacgm, "record", "-o", db_, "--", "/bin/sleep", "30"}, {}, true);
  ASSERT_TRUE(p.wait_for_stderr("Ctrl-C to stop", 30)) << p.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(p.pid(), SIGINT);
  EXPECT_EQ(p.wait(15), 128 + SIGINT) << p.err();
  EXPECT_EQ(p.err().find("keeps running"), std::string::npos) << p.err();
  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'exit_status'"), "130");
  pid_t child = command_pid(db_, p.pid());
  ASSERT_GT(child, 0);
  EXPECT_FALSE(running(child)) << "sleep " << child << " was left running";
}

TEST_F(RecordStops, DurationStopsTheLaunchedCommandAndSaysSo) {
  auto t0 = std::chrono::steady_clock::now();
  Process p({kEacgm, "record", "-o", db_, "--duration", "1", "--", "/bin/sleep", "30"});
  int rc = p.wait(20);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(rc, 0) << p.err();
  EXPECT_LT(took, 10) << p.err();
  EXPECT_NE(p.err().find("--duration 1 s reached: sent SIGTERM to /bin/sleep"), std::string::npos)
      << p.err();
  EXPECT_NE(p.err().find("exited with status 143"), std::string::npos) << p.err();
  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'exit_status'"), "143");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'stopped_by_duration_s'"), "1");
  pid_t child = command_pid(db_, p.pid());
  ASSERT_GT(child, 0);
  EXPECT_FALSE(running(child));
}

// A command that crashes or fails: eacgm says so last (its own output may be far up), passes its
// status on, and the recording is whole and readable.
TEST_F(RecordStops, ACrashOrFailureOfTheCommandIsSaidLastAndTheRecordingKept) {
  Process crash({kEacgm, "record", "-o", db_, "--", "/bin/sh", "-c", "sleep 0.2; kill -SEGV $$"});
  EXPECT_EQ(crash.wait(30), 128 + SIGSEGV) << crash.err();
  EXPECT_NE(crash.err().find("eacgm: /bin/sh (pid "), std::string::npos) << crash.err();
  EXPECT_NE(crash.err().find(") was killed by SIGSEGV"), std::string::npos) << crash.err();
  EXPECT_EQ(Db(db_).text("SELECT value FROM meta WHERE key = 'exit_status'"), "139");
  EXPECT_EQ(run({kEacgm, "report", db_}).exit_code, 0);

  std::string failed = dir_ + "/failed.eacgm.db";
  Process fail({kEacgm, "record", "-o", failed, "--", "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(fail.wait(30), 3) << fail.err();
  EXPECT_NE(fail.err().find(") exited with status 3; the recording holds its run"),
            std::string::npos)
      << fail.err();
  EXPECT_EQ(Db(failed).text("SELECT value FROM meta WHERE key = 'exit_status'"), "3");
  // a command that succeeds gets no such line
  std::string ok = dir_ + "/ok.eacgm.db";
  Process fine({kEacgm, "record", "-o", ok, "--", "/bin/true"});
  EXPECT_EQ(fine.wait(30), 0) << fine.err();
  EXPECT_EQ(fine.err().find("exited with status"), std::string::npos) << fine.err();
}

// A command that ignores SIGTERM is killed 10 s after it: --duration is a limit, and nothing
// launched outlives eacgm unseen.
TEST_F(RecordStops, DurationEndsACommandThatIgnoresSigterm) {
  Process p({kEacgm, "record", "-o", db_, "--duration", "1", "--", "/bin/sh", "-c",
             "trap '' TERM; while :; do sleep 0.1; done"});
  int rc = p.wait(40);
  EXPECT_EQ(rc, 0) << p.err();
  EXPECT_NE(p.err().find("did not exit 10 s after SIGTERM: sent SIGKILL"), std::string::npos)
      << p.err();
  EXPECT_NE(p.err().find("waiting for /bin/sh"), std::string::npos) << p.err();
  EXPECT_EQ(Db(db_).text("SELECT value FROM meta WHERE key = 'exit_status'"), "137");
}

TEST_F(RecordStops, ForceNeverReplacesWhatIsNotARegularFile) {
  const std::string fifo = dir_ + "/fifo", dev = dir_ + "/null", link = dir_ + "/link",
                    target = dir_ + "/target";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);  // like /dev/null
  { std::ofstream(target) << "precious"; }
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  struct Case {
    std::string path, kind;
    mode_t type;
  };
  for (const Case& c : {Case{fifo, "a FIFO", S_IFIFO}, Case{dev, "a character device", S_IFCHR},
                        Case{link, "a symbolic link", S_IFLNK}}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"-o", c.path}, {"--perfetto", c.path}}) {
      std::vector<std::string> argv{kEacgm, "record", "-f", "-o", db_};
      if (args[0] == "-o") argv = {kEacgm, "record", "-f"};
      argv.insert(argv.end(), args.begin(), args.end());
      argv.insert(argv.end(), {"--", "/bin/true"});
      auto r = run(argv);
      EXPECT_EQ(r.exit_code, 2) << c.path << ": " << r.err;
      EXPECT_NE(r.err.find(args[0] + " " + c.path + ": is " + c.kind), std::string::npos) << r.err;
      struct stat st {};
      ASSERT_EQ(lstat(c.path.c_str(), &st), 0) << c.path << " was removed";
      EXPECT_EQ(st.st_mode & S_IFMT, c.type) << c.path << " was replaced";
    }
  }
  std::ifstream in(target);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
  // export the same
  ASSERT_EQ(run({kEacgm, "record", "-q", "-f", "-o", db_, "--", "/bin/true"}).exit_code, 0);
  auto e = run({kEacgm, "export", db_, "--perfetto", fifo, "-f"});
  EXPECT_EQ(e.exit_code, 2) << e.err;
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(RecordStops, RecordingsAreReadableByTheirOwnerOnly) {
  ASSERT_EQ(run({kEacgm, "record", "-q", "-o", db_, "--", "/bin/true"}).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat(db_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // and so after --force over an old file of mode 0644
  ASSERT_EQ(chmod(db_.c_str(), 0644), 0);
  ASSERT_EQ(run({kEacgm, "record", "-q", "-f", "-o", db_, "--", "/bin/true"}).exit_code, 0);
  ASSERT_EQ(stat(db_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(RecordStops, AFailedStartLeavesNoFileInTheWayOfTheRetry) {
  for (const char* pid : {"0", "4194305"}) {
    auto r = run({kEacgm, "record", "-o", db_, "-p", pid});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_FALSE(std::filesystem::exists(db_)) << "-p " << pid << ": " << r.err;
  }
  auto exec_fails = run({kEacgm, "record", "-o", db_, "--", "/proc/self/status"});
  EXPECT_NE(exec_fails.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(db_)) << exec_fails.err;
  auto retry = run({kEacgm, "record", "-q", "-o", db_, "--", "/bin/true"});
  EXPECT_EQ(retry.exit_code, 0) << retry.err;
}

TEST_F(RecordStops, EmptyListsAndBadPatternsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--layers", ""}, "--layers '': give at least one"},
           {{"--layers", "cuda,"}, "--layers cuda,: an empty element"},
           {{"-p", "1,,2"}, "-p 1,,2: an empty element"},
           {{"--torch-ops", "["}, "--torch-ops [: a '[' is not closed"},
           {{"--torch-ops", "lin ear"}, "--torch-ops lin ear: ' ' cannot be in an operator name"},
           {{"--torch-ops", "linear,,mm"}, "--torch-ops linear,,mm: an empty element"},
           {{"--duration", "abc"}, "--duration"},
       }) {
    std::vector<std::string> argv{kEacgm, "record", "-o", db_};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    if (c.args[0] != "-p") argv.insert(argv.end(), {"--", "/bin/true"});
    auto r = run(argv);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << " " << c.args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;       // one line
    EXPECT_FALSE(std::regex_search(r.err, std::regex("[0-9]{12}"))) << r.err;  // no 1e308
    EXPECT_FALSE(std::filesystem::exists(db_));
  }
}

}  // namespace
}  // namespace e2e

namespace e2e {
namespace {

// A recorder killed outright (SIGKILL, the OOM killer) runs no cleanup: the recording must
// still say what was recorded, how far it got and what was dropped, as of its last second.
TEST_F(RecordStops, ARecorderKilledOutrightLeavesASelfDescribingRecording) {
  E2E_REQUIRE_CUDA();
  Process rec(
      {kEacgm, "record", "-o", db_, "--", kWorkloads + "/cuda_api_calls", "--loop-seconds", "20"},
      {}, /*own_group=*/true);
  ASSERT_TRUE(rec.wait_for_stderr("Ctrl-C to stop", 30)) << rec.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  kill(rec.pid(), SIGKILL);
  rec.wait(10);
  kill(-rec.pid(), SIGKILL);  // the workload, left running by its killed recorder
  auto r = run({kEacgm, "report", db_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch events;
  ASSERT_TRUE(std::regex_search(r.out, events, std::regex(R"(events (\d+), dropped (\d+))")))
      << r.out;
  EXPECT_GT(std::stoll(events[1]), 100) << r.out;
  EXPECT_NE(r.out.find("not finished: the recorder was stopped without closing it"),
            std::string::npos)
      << r.out;
  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'recording_state'"), "recording");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'command'").find(kWorkloads), 0u);
  int64_t seconds_in =
      (std::stoll(db.text("SELECT value FROM meta WHERE key = 'end_monotonic_ns'")) -
       std::stoll(db.text("SELECT value FROM meta WHERE key = 'start_monotonic_ns'"))) /
      1'000'000'000;
  EXPECT_GE(seconds_in, 1);
  EXPECT_LE(seconds_in, 4);
  // the calls recorded up to then are there, and about as many as the meta says
  int64_t rows = db.scalar("SELECT count(*) FROM trace");
  EXPECT_GE(rows, std::stoll(events[1]));
}

}  // namespace
}  // namespace e2e
