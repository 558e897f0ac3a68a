// Least privilege (util/privileges.h): recording needs CAP_BPF and CAP_PERFMON and nothing
// more for one's own processes; other users' processes are traced with those too, but their
// job identity (environ, mode 0400) needs CAP_DAC_READ_SEARCH, and their Python stacks and
// container files CAP_SYS_PTRACE. Checked by dropping every
// other capability with setpriv, as root and as another user, and record, the agent and doctor
// must say the same thing.
#include <sys/stat.h>

#include <regex>

#include <fstream>

#include "e2e_util.h"

namespace e2e {
namespace {

// The capability sets of this test process, from /proc/self/status.
uint64_t cap_set(const char* which) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(which, 0) == 0) return std::stoull(line.substr(line.find(':') + 1), nullptr, 16);
  return 0;
}

constexpr int kCapDacReadSearch = 2, kCapSysPtrace = 19, kCapPerfmon = 38, kCapBpf = 39;

class LeastPrivilege : public RecordingTest {
 protected:
  void SetUp() override {
    RecordingTest::SetUp();
    if (IsSkipped()) return;
    if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) is missing";
    uint64_t bounding = cap_set("CapBnd");
    for (int cap : {kCapPerfmon, kCapBpf, kCapSysPtrace, kCapDacReadSearch})
      if (!(bounding >> cap & 1))
        GTEST_SKIP() << "this machine's capability bounding set lacks capability " << cap
                     << " (a container?): cannot grant it to test with it";
    std::filesystem::permissions(dir_, std::filesystem::perms::all);
  }
  // argv run as uid 0 with only `caps` (setpriv's list, e.g. "+bpf,+perfmon")
  static std::vector<std::string> as_root_with(const std::string& caps,
                                               std::vector<std::string> argv) {
    std::vector<std::string> out{"/usr/bin/setpriv", "--bounding-set=-all," + caps,
                                 "--inh-caps=-all", "--"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }
  // argv run as uid 65534 (nobody) with `caps` ambient, as a systemd unit or a capable shell
  static std::vector<std::string> as_nobody_with(const std::string& caps,
                                                 std::vector<std::string> argv) {
    std::vector<std::string> out{"/usr/bin/setpriv",
                                 "--reuid=65534",
                                 "--regid=65534",
                                 "--clear-groups",
                                 "--inh-caps=" + caps,
                                 "--ambient-caps=" + caps,
                                 "--bounding-set=-all," + caps,
                                 "--"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }
};

TEST_F(LeastPrivilege, CapBpfAndCapPerfmonAloneRecordEveryLayerOfOnesOwnCommand) {
  E2E_REQUIRE_CUDA();
  // a library loaded with dlopen after start: the dynamic loader's hook attaches too
  auto r = run(as_root_with("+bpf,+perfmon", {kEacgm, "record", "-o", db_, "--",
                                              kWorkloads + "/cuda_dlopen", "50", "20"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ermission denied"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("libbpf"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("loader's hook could not"), std::string::npos) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            (std::map<std::string, int64_t>{{"cudaMalloc", 50}, {"cudaFree", 20}}));
  EXPECT_GT(db.scalar("SELECT count(*) FROM host_samples"), 0);
  // the host layer's task scan (running threads' CPU time at each sample) too
  EXPECT_EQ(db.text("SELECT COALESCE((SELECT value FROM meta WHERE key = "
                    "'host_unavailable_metrics'), '')")
                .find("oncpu_ns"),
            std::string::npos);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'host_cpu_scan'"), "cpus");
  // the CPU profile's perf events need no more than CAP_PERFMON
  EXPECT_EQ(r.err.find("CPU profile off"), std::string::npos) << r.err;
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'sample_hz'"), "99");
}

TEST_F(LeastPrivilege, AnotherUserWithTheTwoCapabilitiesRecordsItsOwnCommand) {
  E2E_REQUIRE_CUDA();
  auto r = run(as_nobody_with("+bpf,+perfmon", {kEacgm, "record", "-o", db_, "--",
                                                kWorkloads + "/cuda_dlopen", "50", "20"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ermission denied"), std::string::npos) << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls"), 70);
  EXPECT_EQ(r.err.find("CPU profile off"), std::string::npos) << r.err;
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'sample_hz'"), "99");
  struct stat st {};
  ASSERT_EQ(stat(db_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(LeastPrivilege, AMissingCapabilityIsOneLineAndNothingIsWritten) {
  for (const auto& [caps, missing] : std::vector<std::pair<std::string, std::string>>{
           {"+bpf", "missing CAP_PERFMON"},
           {"+perfmon", "missing CAP_BPF"},
           {"+sys_ptrace", "missing CAP_BPF and CAP_PERFMON"}}) {
    auto r = run(as_root_with(caps, {kEacgm, "record", "-o", db_, "--", "/bin/true"}));
    EXPECT_EQ(r.exit_code, 1) << caps << ": " << r.err;
    EXPECT_NE(r.err.find("recording needs CAP_BPF and CAP_PERFMON"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(db_));
    auto agent = run(as_root_with(
        caps, {kEacgm, "agent", "--listen", "127.0.0.1:1", "--state-dir", dir_ + "/state"}));
    EXPECT_EQ(agent.exit_code, 1) << agent.err;
    EXPECT_NE(agent.err.find(missing), std::string::npos) << agent.err;
    // doctor says the same
    auto doctor = run(as_root_with(caps, {kEacgm, "doctor"}));
    EXPECT_NE(doctor.out.find(missing + ": cannot record"), std::string::npos) << doctor.out;
  }
  auto doctor = run(as_root_with("+bpf,+perfmon", {kEacgm, "doctor"}));
  EXPECT_NE(doctor.out.find("with CAP_BPF and CAP_PERFMON: can record; other users' processes "
                            "are traced without their job identity"),
            std::string::npos)
      << doctor.out;
}

// Another user's process (a rank of a job): CAP_PERFMON reads its maps, so it is traced; its
// job identity, from its environment (mode 0400), needs CAP_DAC_READ_SEARCH, and one line says
// what is missing.
TEST_F(LeastPrivilege, AnotherUsersProcessIsTracedAndItsIdentityNeedsMore) {
  Process other(as_nobody_with(
      "-all", {"/usr/bin/env", "RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "/bin/sleep", "30"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string pid = std::to_string(other.pid());
  auto without = run(
      as_root_with("+bpf,+perfmon", {kEacgm, "record", "-o", db_, "-p", pid, "--duration", "0.5"}));
  EXPECT_EQ(without.exit_code, 0) << without.err;
  EXPECT_NE(without.err.find("other users' processes are traced without their job identity "
                             "(environ), Python stacks or libraries inside containers (run as "
                             "root, or grant CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE)"),
            std::string::npos)
      << without.err;
  // (and CPU stalls, which need the scheduler tick's address that /proc/kallsyms shows only to
  // root or CAP_SYSLOG where kernel.perf_event_paranoid is over 1, as here: one line of its own)
  int paranoid = 2;
  std::ifstream("/proc/sys/kernel/perf_event_paranoid") >> paranoid;
  bool kallsyms_hidden = paranoid > 1;
  EXPECT_EQ(without.err.find("CPU stalls") != std::string::npos, kallsyms_hidden) << without.err;
  EXPECT_EQ(std::count(without.err.begin(), without.err.end(), '\n'), 3 + kallsyms_hidden)
      << without.err;
  {
    Db db(db_);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM processes WHERE pid = " + pid), 1);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM processes WHERE pid = " + pid + " AND rank = 3"), 0);
  }
  auto with =
      run(as_root_with("+bpf,+perfmon,+sys_ptrace,+dac_read_search",
                       {kEacgm, "record", "-f", "-o", db_, "-p", pid, "--duration", "0.5"}));
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(with.err.find("other users"), std::string::npos) << with.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT rank FROM processes WHERE pid = " + pid), 3);
  EXPECT_EQ(db.scalar("SELECT world_size FROM processes WHERE pid = " + pid), 4);
}

}  // namespace
}  // namespace e2e
