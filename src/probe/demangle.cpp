// Itanium C++ ABI demangling of symbol names (kernel stubs, torch ops).
#include "probe/demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace eacgm {
namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

bool is_mangled(std::string_view symbol) { return symbol.starts_with("_Z"); }

// "name@VER" / "name@@VER" as readelf and some .symtab entries print them; '@' never occurs in
// a mangled name, so everything from the first one on is the version.
std::string_view without_version(std::string_view symbol) {
  return symbol.substr(0, symbol.find('@'));
}

}  // namespace

std::string demangle(std::string_view symbol) {
  if (!is_mangled(symbol)) return std::string(symbol);
  const std::string mangled(without_version(symbol));  // __cxa_demangle needs a C string
  int status = 0;
  std::unique_ptr<char, FreeDeleter> text(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status));
  if (status != 0 || !text) return std::string(symbol);
  return std::string(text.get());
}

// Hand-written because __cxa_demangle (and every demangler here) rejects an incomplete symbol.
// It reads only what kernel names start with: _Z, an optional L (internal linkage), N (a
// nested name) with its qualifiers, St, then <length><identifier> parts; anything else (a
// substitution, an operator name) ends the name there.
std::string demangle_truncated(std::string_view symbol) {
  std::string whole = demangle(symbol);
  if (whole != symbol || !is_mangled(symbol)) return whole;
  std::string_view s = without_version(symbol).substr(2);
  if (s.starts_with('L')) s.remove_prefix(1);
  bool nested = s.starts_with('N');
  if (nested) {
    s.remove_prefix(1);
    while (!s.empty() && std::string_view("rVKRO").find(s[0]) != std::string_view::npos)
      s.remove_prefix(1);
  }
  std::string out;
  if (s.starts_with("St")) out = "std", s.remove_prefix(2);
  while (!s.empty() && s[0] >= '0' && s[0] <= '9') {
    size_t len = 0, digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9' && len < 100000)
      len = len * 10 + size_t(s[digits++] - '0');
    if (len == 0 || digits + len > s.size()) {  // cut inside this part
      if (out.empty() || out == "std") return std::string(symbol);
      return out + "::...";
    }
    std::string_view id = s.substr(digits, len);
    s.remove_prefix(digits + len);
    if (!out.empty()) out += "::";
    out += id.starts_with("_GLOBAL__N") ? std::string_view("(anonymous namespace)") : id;
    if (!nested) break;
  }
  if (out.empty() || out == "std") return std::string(symbol);
  return out + (s.starts_with('I') ? "<...>" : "(...)");
}

}  // namespace eacgm
