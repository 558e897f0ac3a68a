// A kernel's name as a bounded label value (the agent's --gpu-kernel-names).
#pragma once
#include <string>
#include <string_view>

namespace eacgm {

// The function's own name, without its return type, namespaces, template arguments or
// parameters ("void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)" ->
// "vectorized_elementwise_kernel"); mangled names are demangled first; a cutlass::Kernel<Op> is
// named by its Op.
std::string short_kernel_name(std::string_view name);

}  // namespace eacgm
