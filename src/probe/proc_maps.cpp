// Parses /proc/PID/maps: which file backs which address range of a process.
#include "probe/proc_maps.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string>

#include "util/error.h"
#include "util/file_descriptor.h"

namespace eacgm {
namespace {

constexpr std::string_view kDeletedSuffix = " (deleted)";

// Splits the next whitespace-delimited field off the front of `rest`.
std::string_view next_field(std::string_view& rest) {
  const size_t begin = rest.find_first_not_of(' ');
  if (begin == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(begin);
  const size_t end = std::min(rest.find(' '), rest.size());
  std::string_view field = rest.substr(0, end);
  rest.remove_prefix(end);
  return field;
}

template <typename T>
bool parse_number(std::string_view text, T& out, int base) {
  if (text.empty()) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// "start-end" in hex.
bool parse_range(std::string_view text, Mapping& m) {
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) return false;
  return parse_number(text.substr(0, dash), m.start, 16) &&
         parse_number(text.substr(dash + 1), m.end, 16) && m.start <= m.end;
}

// "r-xp": the fourth letter is 's' for shared, 'p' for private (copy-on-write).
bool parse_perms(std::string_view text, Mapping& m) {
  if (text.size() != 4) return false;
  m.readable = text[0] == 'r';
  m.writable = text[1] == 'w';
  m.executable = text[2] == 'x';
  m.shared = text[3] == 's';
  return true;
}

// "major:minor" in hex.
bool parse_device(std::string_view text, Mapping& m) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  return parse_number(text.substr(0, colon), m.dev_major, 16) &&
         parse_number(text.substr(colon + 1), m.dev_minor, 16);
}

// The path is the rest of the line after the padding, and may itself contain spaces.
void parse_path(std::string_view rest, Mapping& m) {
  const size_t begin = rest.find_first_not_of(' ');
  if (begin == std::string_view::npos) return;
  rest.remove_prefix(begin);
  if (rest.size() > kDeletedSuffix.size() && rest.ends_with(kDeletedSuffix)) {
    rest.remove_suffix(kDeletedSuffix.size());
    m.deleted = true;
  }
  m.path.assign(rest);
}

std::optional<Mapping> parse_line(std::string_view line) {
  Mapping m;
  std::string_view rest = line;
  if (!parse_range(next_field(rest), m)) return std::nullopt;
  if (!parse_perms(next_field(rest), m)) return std::nullopt;
  if (!parse_number(next_field(rest), m.file_offset, 16)) return std::nullopt;
  if (!parse_device(next_field(rest), m)) return std::nullopt;
  if (!parse_number(next_field(rest), m.inode, 10)) return std::nullopt;
  parse_path(rest, m);
  return m;
}

// A process that exits between our open and read shows up as one of these.
bool process_gone(int err) { return err == ENOENT || err == ESRCH; }

[[noreturn]] void fail_to_read(const std::string& file, int err) {
  if (err == EACCES || err == EPERM) {
    fail("cannot read {}: permission denied (another user's process: eacgm needs "
         "CAP_PERFMON or CAP_SYS_PTRACE for it; run as root)", file);
  }
  fail("cannot read {}: {} (check that /proc is mounted and the process is still running)", file,
       errno_text(err));
}

}  // namespace

std::vector<Mapping> parse_proc_maps(std::string_view text) {
  std::vector<Mapping> maps;
  while (!text.empty()) {
    const size_t newline = std::min(text.find('\n'), text.size());
    if (auto m = parse_line(text.substr(0, newline))) maps.push_back(std::move(*m));
    text.remove_prefix(std::min(newline + 1, text.size()));
  }
  return maps;
}

std::optional<std::vector<Mapping>> read_proc_maps(int pid) {
  const std::string file = "/proc/" + std::to_string(pid) + "/maps";
  FileDescriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (process_gone(errno)) return std::nullopt;
    fail_to_read(file, errno);
  }
  // procfs files report size 0, so read until EOF rather than trusting fstat.
  std::string text;
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (process_gone(errno)) return std::nullopt;
      fail_to_read(file, errno);
    }
    text.append(buf, static_cast<size_t>(n));
  }
  return parse_proc_maps(text);
}

const Mapping* find_mapping(const std::vector<Mapping>& maps, uint64_t addr) {
  // The first mapping starting after addr; the one before it is the only candidate.
  auto after = std::upper_bound(maps.begin(), maps.end(), addr,
                                [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (after == maps.begin()) return nullptr;
  const Mapping& candidate = *std::prev(after);
  return addr < candidate.end ? &candidate : nullptr;
}

}  // namespace eacgm
