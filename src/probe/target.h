// What to trace: a command eacgm launches (held before exec until probes are ready), or
// processes that already run.
#pragma once
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace eacgm {

class LaunchedCommand {
 public:
  // Resolves the program (PATH search) and forks a child that waits before exec. Throws
  // UsageError when the program does not exist or is not executable.
  // `env`: variables set in the command's environment (NAME=value), beside eacgm's own.
  explicit LaunchedCommand(std::vector<std::string> argv, std::vector<std::string> env = {});
  ~LaunchedCommand();
  LaunchedCommand(const LaunchedCommand&) = delete;
  LaunchedCommand& operator=(const LaunchedCommand&) = delete;

  // Throws UsageError when `name` cannot be run; returns its resolved path.
  static std::string check_program(const std::string& name);

  pid_t pid() const { return pid_; }
  const std::string& program() const { return program_; }

  // Lets the child exec, calls `at_exec` while it is held just after exec (its program and
  // loader mapped, nothing run yet), then lets it go. Throws eacgm::Error if exec failed.
  void start(const std::function<void()>& at_exec);
  // The child's wait status if it has exited, without blocking.
  std::optional<int> poll_exit();
  // The same, waiting up to `timeout_ms` for it.
  std::optional<int> wait_exit(int timeout_ms);
  void send_signal(int sig) const;

 private:
  std::vector<std::string> argv_;
  std::vector<std::string> env_;  // the command's whole environment
  std::string program_;
  pid_t pid_ = -1;
  int go_fd_ = -1;    // parent writes here to release the child
  int exec_fd_ = -1;  // child reports an exec failure here (CLOEXEC: EOF means success)
  std::optional<int> status_;
};

// Resolves a program name like execvp would; empty when not found.
std::string find_program(const std::string& name);

// Checks that each pid exists; throws eacgm::Error naming the first that does not.
void check_pids_exist(const std::vector<uint32_t>& pids);

// The pids of all descendants of `pid` alive now (children, grandchildren, ...).
std::vector<uint32_t> descendants_of(uint32_t pid);

// Exit status to report for a wait(2) status: the code, or 128 + signal like a shell.
int exit_code_of_status(int status);

}  // namespace eacgm
