// Itanium C++ ABI demangling of symbol names (kernel stubs, torch ops).
#pragma once
#include <string>
#include <string_view>

namespace eacgm {

// Demangles a C++ symbol; returns the input unchanged when it is not a mangled name
// (C functions such as cudaMalloc) or cannot be demangled.
std::string demangle(std::string_view symbol);

}  // namespace eacgm
