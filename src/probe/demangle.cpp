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

}  // namespace eacgm
