// Itanium C++ ABI demangling of symbol names (kernel stubs, torch ops).
#pragma once
#include <string>
#include <string_view>

namespace eacgm {

// Demangles a C++ symbol; returns the input unchanged when it is not a mangled name
// (C functions such as cudaMalloc) or cannot be demangled.
std::string demangle(std::string_view symbol);

// demangle() for a symbol that may have been cut short (a kernel name read into a fixed
// buffer): where the whole does not demangle, the leading qualified name does, marked as cut:
// "_ZN2at6native18elementwise_kernelILi128E..." gives "at::native::elementwise_kernel<...>".
std::string demangle_truncated(std::string_view symbol);

}  // namespace eacgm
