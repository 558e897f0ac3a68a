// The table of CUDA runtime and driver functions eacgm probes, and their argument layout.
#include "probe/cuda_ops.h"

#include <array>

#include "events.h"

namespace eacgm {
namespace {

using K = CallKind;

// Argument positions follow the C prototypes in cuda_runtime_api.h and cuda.h. A dim3 (12 bytes
// of integers) is passed in two registers: x|y<<32, then z. The _ptsz/_ptds variants (per-thread
// default stream builds) take the same arguments.
constexpr CallOp op(std::string_view s, K k, int8_t bytes = kNoArg, int8_t stream = kNoArg,
                    int8_t kind = kNoArg, int8_t fixed_kind = kNoArg, bool driver = false) {
  return CallOp{s, driver, k, bytes, stream, kind, fixed_kind};
}
constexpr CallOp drv(std::string_view s, K k, int8_t bytes = kNoArg, int8_t stream = kNoArg,
                     int8_t fixed_kind = kNoArg) {
  return CallOp{s, true, k, bytes, stream, kNoArg, fixed_kind};
}

constexpr std::array kOps = {
    // runtime API: allocation
    op("cudaMalloc", K::Alloc, 1),
    op("cudaMallocHost", K::Alloc, 1),
    op("cudaMallocManaged", K::Alloc, 1),
    op("cudaMallocAsync", K::Alloc, 1, 2),
    op("cudaMallocAsync_ptsz", K::Alloc, 1, 2),
    op("cudaFree", K::Free),
    op("cudaFreeHost", K::Free),
    op("cudaFreeAsync", K::Free, kNoArg, 1),
    op("cudaFreeAsync_ptsz", K::Free, kNoArg, 1),
    // runtime API: copies and sets
    op("cudaMemcpy", K::Memcpy, 2, kNoArg, 3),
    op("cudaMemcpy_ptds", K::Memcpy, 2, kNoArg, 3),
    op("cudaMemcpyAsync", K::Memcpy, 2, 4, 3),
    op("cudaMemcpyAsync_ptsz", K::Memcpy, 2, 4, 3),
    op("cudaMemset", K::Memset, 2),
    op("cudaMemset_ptds", K::Memset, 2),
    op("cudaMemsetAsync", K::Memset, 2, 3),
    op("cudaMemsetAsync_ptsz", K::Memset, 2, 3),
    // runtime API: launches (stream: 8th argument of cudaLaunchKernel = stack word 1)
    op("cudaLaunchKernel", K::Launch, kNoArg, 7),
    op("cudaLaunchKernel_ptsz", K::Launch, kNoArg, 7),
    op("cudaLaunchKernelExC", K::LaunchConfig),
    op("cudaLaunchKernelExC_ptsz", K::LaunchConfig),
    op("cudaGraphLaunch", K::GraphLaunch, kNoArg, 1),
    op("cudaGraphLaunch_ptsz", K::GraphLaunch, kNoArg, 1),
    // runtime API: synchronisation
    op("cudaStreamSynchronize", K::Sync, kNoArg, 0),
    op("cudaStreamSynchronize_ptsz", K::Sync, kNoArg, 0),
    op("cudaDeviceSynchronize", K::Sync),
    op("cudaEventSynchronize", K::Sync),
    // driver API (Triton, cuBLAS and the runtime itself launch through these)
    drv("cuLaunchKernel", K::DriverLaunch, kNoArg, 8),
    drv("cuLaunchKernel_ptsz", K::DriverLaunch, kNoArg, 8),
    drv("cuLaunchKernelEx", K::DriverLaunchEx),
    drv("cuLaunchKernelEx_ptsz", K::DriverLaunchEx),
    drv("cuMemAlloc_v2", K::Alloc, 1),
    drv("cuMemFree_v2", K::Free),
    drv("cuMemcpyHtoD_v2", K::Memcpy, 2, kNoArg, 1),
    drv("cuMemcpyHtoD_v2_ptds", K::Memcpy, 2, kNoArg, 1),
    drv("cuMemcpyDtoH_v2", K::Memcpy, 2, kNoArg, 2),
    drv("cuMemcpyDtoH_v2_ptds", K::Memcpy, 2, kNoArg, 2),
    drv("cuMemcpyDtoD_v2", K::Memcpy, 2, kNoArg, 3),
    drv("cuMemcpyDtoD_v2_ptds", K::Memcpy, 2, kNoArg, 3),
    drv("cuMemcpyHtoDAsync_v2", K::Memcpy, 2, 3, 1),
    drv("cuMemcpyHtoDAsync_v2_ptsz", K::Memcpy, 2, 3, 1),
    drv("cuMemcpyDtoHAsync_v2", K::Memcpy, 2, 3, 2),
    drv("cuMemcpyDtoHAsync_v2_ptsz", K::Memcpy, 2, 3, 2),
    drv("cuMemcpyDtoDAsync_v2", K::Memcpy, 2, 3, 3),
    drv("cuMemcpyDtoDAsync_v2_ptsz", K::Memcpy, 2, 3, 3),
    drv("cuStreamSynchronize", K::Sync, kNoArg, 0),
    drv("cuStreamSynchronize_ptsz", K::Sync, kNoArg, 0),
    drv("cuCtxSynchronize", K::Sync),
    // driver API: how launch handles get their names (a CUfunction has no ELF symbol)
    drv("cuModuleGetFunction", K::KernelLookup),
    drv("cuLibraryGetKernel", K::KernelLookup),
    drv("cuKernelGetFunction", K::KernelToFunction),
};

}  // namespace

std::span<const CallOp> cuda_ops() { return kOps; }

uint64_t cuda_op_cookie(uint16_t id) {
  const CallOp& o = kOps.at(id);
  uint64_t flags = id;
  switch (o.kind) {
    case K::Launch:
    case K::DriverLaunch:
      flags |= EACGM_COOKIE_READ_STACK;
      break;
    case K::LaunchConfig:
    case K::DriverLaunchEx:
      flags |= EACGM_COOKIE_DEREF_ARG0;
      break;
    case K::Alloc:
    case K::KernelToFunction:
      flags |= EACGM_COOKIE_DEREF_OUT0;
      break;
    case K::KernelLookup:
      flags |= EACGM_COOKIE_DEREF_OUT0 | EACGM_COOKIE_NAME_ARG2;
      break;
    default:
      break;
  }
  return flags;
}

std::string_view memcpy_kind_name(int64_t kind) {
  switch (kind) {
    case 0: return "HostToHost";
    case 1: return "HostToDevice";
    case 2: return "DeviceToHost";
    case 3: return "DeviceToDevice";
    case 4: return "Default";
    default: return "Unknown";
  }
}

}  // namespace eacgm
