// Kernel names short enough, and few enough, to be label values (metrics.h's --gpu-kernel-names).
// Hand-written: a demangled C++ name is parsed from its end only as far as its last identifier;
// no Debian library shortens demangled names.
#include "export/kernel_name.h"

#include <algorithm>

#include "probe/demangle.h"

namespace eacgm {
namespace {

// Where the group that ends TEXT (its last character is CLOSE) opens; npos if none.
size_t group_start(std::string_view text, char open, char close) {
  if (!text.ends_with(close)) return std::string_view::npos;
  int depth = 0;
  for (size_t i = text.size(); i-- > 0;) {
    if (text[i] == close) ++depth;
    if (text[i] == open && --depth == 0) return i;
  }
  return std::string_view::npos;
}

// The first of a list of template arguments ("A<B<1> >, C" -> "A<B<1> >"; the demangler puts a
// space between two '>').
std::string_view first_argument(std::string_view list) {
  int depth = 0;
  size_t end = 0;
  for (; end < list.size(); ++end) {
    char c = list[end];
    depth += (c == '<' || c == '(') - (c == '>' || c == ')');
    if (c == ',' && depth == 0) break;
  }
  while (end > 0 && list[end - 1] == ' ') --end;
  return list.substr(0, end);
}

bool identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

// Read from the end: whatever comes before the name (a return type, "(anonymous namespace)",
// template arguments of enclosing classes) is skipped without being parsed.
std::string short_kernel_name(std::string_view name) {
  const std::string demangled = demangle_truncated(name);  // unchanged unless mangled
  std::string_view s = demangled;
  if (size_t args = group_start(s, '(', ')'); args != std::string_view::npos) s = s.substr(0, args);
  std::string_view targs;
  if (size_t t = group_start(s, '<', '>'); t != std::string_view::npos) {
    targs = s.substr(t + 1, s.size() - t - 2);
    s = s.substr(0, t);
  }
  size_t start = s.size();
  while (start > 0 && identifier_char(s[start - 1])) --start;
  if (start == s.size()) return demangled;  // nothing to shorten it to ("at::native::...")
  // cutlass, cuBLAS's GEMMs among its users, runs each kernel as cutlass::Kernel<Op>: Op says
  // which one it is (unless the name was cut there)
  if (s.ends_with("cutlass::Kernel") || s.ends_with("cutlass::Kernel2")) {
    std::string op = short_kernel_name(first_argument(targs));
    if (!op.empty() && std::all_of(op.begin(), op.end(), identifier_char)) return op;
  }
  return std::string(s.substr(start));
}

}  // namespace eacgm
