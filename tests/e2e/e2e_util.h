// Helpers for end-to-end tests: run eacgm and workloads, read the recordings they write.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <fstream>
#include <optional>
#include <cstring>
#include <vector>

namespace e2e {

inline const std::string kEacgm = EACGM_BIN;
inline const std::string kWorkloads = EACGM_WORKLOADS;

#define E2E_REQUIRE_ROOT()                                                             \
  do {                                                                                 \
    if (geteuid() != 0) GTEST_SKIP() << "needs root to load BPF programs (run as root)"; \
  } while (0)

#define E2E_REQUIRE_CUDA()                                                                    \
  do {                                                                                        \
    if (!EACGM_HAVE_CUDA) GTEST_SKIP() << "the CUDA toolkit (nvcc, cuda.h) is not installed"; \
  } while (0)

// A fresh, empty folder for one test's files.
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "eacgm-e2e" /
                              (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Tests that record: root, and a fresh folder with the recording's path in it.
class RecordingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    E2E_REQUIRE_ROOT();
    dir_ = scratch_dir();
    db_ = dir_ + "/run.eacgm.db";
  }
  std::string dir_, db_;
};

// A child process with stdout and stderr captured; optionally in its own process group. It gets
// SIGTERM when the test process dies (ctest's timeout, Ctrl-C): an agent or recorder a killed
// test started stops then, instead of tracing the node until its --duration. (Created on the
// test's main thread only: the signal follows the thread that forked.)
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
          bool own_group = false) {
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) throw std::runtime_error("pipe");
    pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the test died before the line above
      if (own_group) setpgid(0, 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]), close(err[0]), close(out[1]), close(err[1]);
      for (const auto& e : env) putenv(strdup(e.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]), close(err[1]);
    out_fd_ = out[0], err_fd_ = err[0];
    fcntl(out_fd_, F_SETFL, O_NONBLOCK);
    fcntl(err_fd_, F_SETFL, O_NONBLOCK);
  }
  ~Process() {
    if (!status_) {
      kill(pid_, SIGKILL);
      wait(60);
    }
    close(out_fd_), close(err_fd_);
  }
  pid_t pid() const { return pid_; }

  // Waits for exit (reading output meanwhile); returns the exit code, or -1 on timeout.
  int wait(int timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!status_) {
      pump();
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pump();
    return WIFEXITED(*status_) ? WEXITSTATUS(*status_) : 128 + WTERMSIG(*status_);
  }
  // Waits until stderr contains `text`; false on timeout or exit.
  bool wait_for_stderr(const std::string& text, int timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      pump();
      if (err_.find(text) != std::string::npos) return true;
      int st;
      if (!status_ && waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
      if (status_) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // (what has come so far: a failed assertion's message shows the log up to the failure)
  const std::string& out() const { return pump(), out_; }
  const std::string& err() const { return pump(), err_; }

 private:
  void pump() const {
    char buf[4096];
    ssize_t n;
    while ((n = read(out_fd_, buf, sizeof buf)) > 0) out_.append(buf, size_t(n));
    while ((n = read(err_fd_, buf, sizeof buf)) > 0) err_.append(buf, size_t(n));
  }
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::optional<int> status_;
  mutable std::string out_, err_;
};

struct RunResult {
  int exit_code;
  std::string out, err;
};

inline RunResult run(const std::vector<std::string>& argv,
                     const std::vector<std::string>& env = {}, int timeout_s = 90) {
  Process p(argv, env);
  int code = p.wait(timeout_s);
  return {code, p.out(), p.err()};
}

// Read access to a recording for assertions.
class Db {
 public:
  explicit Db(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
      throw std::runtime_error("cannot open " + path);
  }
  ~Db() { sqlite3_close(db_); }
  int64_t scalar(const std::string& sql) const {
    int64_t v = -1;
    each(sql, [&](sqlite3_stmt* s) { v = sqlite3_column_int64(s, 0); });
    return v;
  }
  std::string text(const std::string& sql) const {
    std::string v;
    each(sql, [&](sqlite3_stmt* s) {
      auto* t = sqlite3_column_text(s, 0);
      v = t ? reinterpret_cast<const char*>(t) : "";
    });
    return v;
  }
  // Two-column query as a map from column 0 (text) to column 1 (integer).
  std::map<std::string, int64_t> pairs(const std::string& sql) const {
    std::map<std::string, int64_t> m;
    each(sql, [&](sqlite3_stmt* s) {
      auto* t = sqlite3_column_text(s, 0);
      m[t ? reinterpret_cast<const char*>(t) : ""] = sqlite3_column_int64(s, 1);
    });
    return m;
  }
  template <typename F>
  void each(const std::string& sql, F f) const {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("bad query: ") + sqlite3_errmsg(db_) + ": " + sql);
    while (sqlite3_step(s) == SQLITE_ROW) f(s);
    sqlite3_finalize(s);
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace e2e
