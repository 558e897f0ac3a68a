// --match (agent/match_filter.h).
#include "agent/match_filter.h"


#include "util/error.h"
#include "util/read_file.h"

namespace eacgm {

MatchFilter::MatchFilter(const std::vector<std::string>& patterns, Sink& next,
                         std::function<std::string(uint32_t)> command_line)
    : next_(next), command_line_(std::move(command_line)) {
  for (const auto& p : patterns) {
    if (p.empty())
      throw UsageError("--match '': an empty pattern matches every process (leave --match out)");
    try {
      patterns_.emplace_back(p, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      throw UsageError(
          fmt::format("--match {}: not a regular expression ({}); e.g. "
                      "--match 'torchrun|train\\.py'",
                      p, e.what()));
    }
  }
  if (patterns_.empty()) throw UsageError("--match needs a pattern");
}

bool MatchFilter::match_text(const std::string& command) const {
  for (const auto& re : patterns_)
    if (std::regex_search(command, re)) return true;
  return false;
}

bool MatchFilter::matches(uint32_t pid) {
  auto it = verdicts_.find(pid);
  if (it == verdicts_.end()) it = verdicts_.emplace(pid, match_text(command_line_(pid))).first;
  return it->second;
}

void MatchFilter::add(const ProcessRow& r) {
  // an exec: the new program decides (its command line is in the row)
  bool match = match_text(r.command.empty() ? r.name : r.command);
  verdicts_[r.pid] = match;
  if (match) next_.add(r);
}

void MatchFilter::add(const ProcessExitRow& r) {
  auto it = verdicts_.find(r.pid);
  bool match = it != verdicts_.end() && it->second;
  if (it != verdicts_.end()) verdicts_.erase(it);
  if (match) next_.add(r);
}

void MatchFilter::add(const HostSampleRow& r) {
  // interfaces and disks are the node's; per-process samples only of matching processes known
  // by their calls (the host layer samples every process: asking about each would hold a
  // verdict per process of the node, and only traced ones are told to have exited)
  if (r.scope != HostScope::Process) return next_.add(r);
  auto it = verdicts_.find(uint32_t(r.id));
  if (it != verdicts_.end() && it->second) next_.add(r);
}

std::string read_command_line(uint32_t pid) {
  std::string s = read_small_file("/proc/" + std::to_string(pid) + "/cmdline");
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

}  // namespace eacgm
