// The one error path: exceptions carrying a user-facing message and an exit status, caught in main.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace eacgm {

// A message the user reads: it names the problem, the thing involved, and the fix.
class Error : public std::runtime_error {
 public:
  Error(std::string message, int exit_code = 1)
      : std::runtime_error(std::move(message)), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Bad command line: exit status 2.
class UsageError : public Error {
 public:
  explicit UsageError(std::string message) : Error(std::move(message), 2) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// strerror(errno) as a std::string, thread-safe.
std::string errno_text(int err);

}  // namespace eacgm
