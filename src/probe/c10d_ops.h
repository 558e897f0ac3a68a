// PyTorch c10d (torch.distributed) in the comm layer: the Gloo process group's collectives and
// point-to-point calls, traced at entry, and their Work objects' completion. A collective's
// call returns once its work is queued; it runs on a Gloo worker thread. Userspace pairs each
// call with its completion through the Work object, so durations last until the collective
// completed (see FACTS.md).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "probe/comm_ops.h"

namespace eacgm {

enum class C10dRole : uint8_t {
  Call,            // a collective or send/recv on a process group: this in arg1 (sret in arg0)
  BindQueued,      // ProcessGroupGloo::enqueue(work): the caller's pending call gets its Work
  BindWork,        // SendWork/RecvWork constructors: the Work is arg0
  Finish,          // c10d::Work::finish(exception_ptr): work in arg0, error when *arg1 != 0
};

struct C10dOp {
  std::string_view symbol;  // mangled
  std::string_view name;    // as torch.profiler names it: "gloo:all_reduce"
  C10dRole role = C10dRole::Call;
  Collective collective = Collective::None;
  int8_t tensor_arg = -1;   // register argument holding the tensors counted for bytes
  bool one_tensor = false;  // it is one at::Tensor&, not a std::vector<at::Tensor>&
  int8_t peer_arg = -1;     // send/recv: the peer rank
};

// Op ids of the c10d probes (between the comm layer's NCCL ids and the torch layer's).
constexpr uint16_t kC10dOpBase = 1500;

std::span<const C10dOp> c10d_ops();
uint64_t c10d_op_cookie(uint16_t index);

// Where a PyTorch build keeps what the BPF side reads: c10::TensorImpl's numel_ and dtype, and
// c10d::ProcessGroup's rank_ (size_ follows it) and sequenceNum_ (the number of its next
// collective: the same on every rank of the group, as PyTorch's own desync debugging matches
// collectives; rank 0 draws its start with rand() and sends it to the others at creation).
struct TorchLayout {
  std::string version;
  uint32_t numel_offset = 0, dtype_offset = 0, pg_rank_offset = 0, pg_seq_offset = 0;
};

// The layout of the libtorch at `path` when its version is one eacgm knows (from the file's
// versioned name, or torch/version.py beside a wheel's lib/ folder). nullopt otherwise: bytes,
// ranks and sizes of its collectives are then not recorded.
std::optional<TorchLayout> torch_layout_for(const std::string& path, std::string* version);

// c10::ScalarType names and element sizes ("float32", 4); "unknown", 0 otherwise.
std::string_view scalar_type_name(uint64_t type);

}  // namespace eacgm
