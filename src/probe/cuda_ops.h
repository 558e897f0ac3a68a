// The CUDA layer's probe points: which runtime and driver functions, and where each keeps the
// arguments that matter (bytes, stream, memcpy kind, launch geometry).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

namespace eacgm {

enum class CallKind : uint8_t {
  Alloc,           // out-pointer in arg0, size in bytes_arg
  Free,            // pointer in arg0
  Memcpy,          // size in bytes_arg, kind in kind_arg or fixed_memcpy_kind
  Memset,          // size in bytes_arg
  Launch,          // cudaLaunchKernel: stub, dim3 grid/block split over registers, stack args
  LaunchConfig,    // cudaLaunchKernelExC: cudaLaunchConfig_t* in arg0, stub in arg1
  DriverLaunch,    // cuLaunchKernel: CUfunction, 6 dims, shared mem and stream on the stack
  DriverLaunchEx,  // cuLaunchKernelEx: CUlaunchConfig* in arg0, CUfunction in arg1
  GraphLaunch,
  Sync,
  KernelLookup,      // cuModuleGetFunction/cuLibraryGetKernel: handle out in arg0, name in arg2
  KernelToFunction,  // cuKernelGetFunction: CUfunction out in arg0 for the CUkernel in arg1
};

// Where an argument lives: 0..5 are the register arguments, 6..8 the stack words after the
// return address (System V x86-64 ABI).
constexpr int8_t kNoArg = -1;

struct CallOp {
  std::string_view symbol;  // exact ELF symbol, also the event name users see
  bool driver = false;      // libcuda (driver API) rather than libcudart
  CallKind kind = CallKind::Sync;
  int8_t bytes_arg = kNoArg;
  int8_t stream_arg = kNoArg;
  int8_t kind_arg = kNoArg;
  int8_t fixed_memcpy_kind = kNoArg;  // driver copies say their direction in their name
};

// All CUDA probe points; an op's id is its index (it travels in the BPF cookie).
std::span<const CallOp> cuda_ops();

// The BPF cookie for op `id`: its id plus what the kernel side must copy.
uint64_t cuda_op_cookie(uint16_t id);

// "HostToDevice" etc. for cudaMemcpyKind values; "Unknown" otherwise.
std::string_view memcpy_kind_name(int64_t kind);

}  // namespace eacgm
