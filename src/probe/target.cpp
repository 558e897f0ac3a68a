// Launching the traced command and checking given pids.
#include "probe/target.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "util/error.h"
#include "util/inherited_signals.h"

namespace eacgm {

std::string find_program(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path_env = getenv("PATH");
  std::stringstream path(path_env ? path_env : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(path, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return "";
}

std::string LaunchedCommand::check_program(const std::string& name) {
  std::string program = find_program(name);
  if (!program.empty()) return program;
  if (name.find('/') != std::string::npos)
    throw UsageError(fmt::format(
        "cannot run {}: no such executable file (check the path and that it is executable)",
        name));
  throw UsageError(fmt::format("cannot run {}: command not found (check the name and PATH)", name));
}

LaunchedCommand::LaunchedCommand(std::vector<std::string> argv, std::vector<std::string> env)
    : argv_(std::move(argv)) {
  if (argv_.empty()) throw UsageError("no command given after -- (e.g. eacgm record -- ./train)");
  program_ = check_program(argv_[0]);
  // The environment is built here: after fork, in a multi-threaded parent, the child may only
  // call async-signal-safe functions (no setenv)
  auto name_of = [](const std::string& v) { return v.substr(0, v.find('=')); };
  std::set<std::string> replaced;
  for (const auto& v : env) replaced.insert(name_of(v));
  for (char** e = environ; *e; ++e)
    if (!replaced.count(name_of(*e))) env_.emplace_back(*e);
  env_.insert(env_.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& v : env_) envp.push_back(v.data());
  envp.push_back(nullptr);
  int go[2], exec_status[2];
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(exec_status, O_CLOEXEC) != 0)
    fail("cannot create a pipe to start {}: {}", argv_[0], errno_text(errno));
  std::vector<char*> args;
  for (auto& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);

  pid_ = fork();
  if (pid_ < 0) fail("cannot fork to start {}: {}", argv_[0], errno_text(errno));
  if (pid_ == 0) {
    // Child: wait until the parent has the probes in place, then become the command.
    close(go[1]);
    close(exec_status[0]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(127);  // parent gave up before starting us
    restore_inherited_signals();  // as without eacgm: SIGPIPE, SIGINT, ... and the mask
    // Stop right after exec (SIGTRAP) so the parent can read our maps once the program is
    // mapped and before it runs; the parent detaches at once.
    ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    execve(program_.c_str(), args.data(), envp.data());
    int err = errno;
    (void)!write(exec_status[1], &err, sizeof(err));
    _exit(127);
  }
  close(go[0]);
  close(exec_status[1]);
  go_fd_ = go[1];
  exec_fd_ = exec_status[0];
}

LaunchedCommand::~LaunchedCommand() {
  if (exec_fd_ >= 0) close(exec_fd_);
  if (go_fd_ >= 0) {
    // Never started: closing the pipe makes the held child exit; reap it.
    close(go_fd_);
    int status;
    if (pid_ > 0) waitpid(pid_, &status, 0);
  }
}

void LaunchedCommand::start(const std::function<void()>& at_exec) {
  char c = 1;
  if (write(go_fd_, &c, 1) != 1) fail("cannot start {}: {}", argv_[0], errno_text(errno));
  close(go_fd_);
  go_fd_ = -1;
  int err = 0;
  ssize_t n = read(exec_fd_, &err, sizeof(err));
  close(exec_fd_);
  exec_fd_ = -1;
  if (n == sizeof(err)) {
    int status;
    waitpid(pid_, &status, 0);
    status_ = status;
    fail("cannot run {}: {}", program_, errno_text(err));
  }
  int status = 0;
  if (waitpid(pid_, &status, 0) == pid_ && WIFSTOPPED(status)) {
    if (at_exec) at_exec();
    ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);
  } else if (WIFEXITED(status) || WIFSIGNALED(status)) {
    status_ = status;
  }
}

std::optional<int> LaunchedCommand::poll_exit() {
  if (status_) return status_;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) status_ = status;
  return status_;
}

std::optional<int> LaunchedCommand::wait_exit(int timeout_ms) {
  for (int waited = 0; !poll_exit() && waited < timeout_ms; waited += 10) usleep(10'000);
  return status_;
}

void LaunchedCommand::send_signal(int sig) const {
  if (pid_ > 0 && !status_) kill(pid_, sig);
}

void check_pids_exist(const std::vector<uint32_t>& pids) {
  for (uint32_t pid : pids) {
    if (pid == 0) throw UsageError("pid 0 is not a process (give the pid of a running program)");
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      fail("cannot attach to pid {}: no such process (did it exit?)", pid);
  }
}

std::vector<uint32_t> descendants_of(uint32_t root) {
  // One pass over /proc builds the parent map; then walk it from the root.
  std::multimap<uint32_t, uint32_t> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; split at the last ')'
    size_t close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(line.substr(close_paren + 2));
    char state;
    uint32_t ppid = 0;
    rest >> state >> ppid;
    children.emplace(ppid, static_cast<uint32_t>(std::stoul(name)));
  }
  std::vector<uint32_t> out;
  std::vector<uint32_t> todo{root};
  while (!todo.empty()) {
    uint32_t p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

int exit_code_of_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace eacgm
