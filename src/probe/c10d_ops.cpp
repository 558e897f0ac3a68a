// The c10d probe points and the PyTorch layouts they read.
#include "probe/c10d_ops.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <regex>

#include "events.h"

namespace eacgm {
namespace {

using R = C10dRole;
using C = Collective;

// Symbols of Debian's python3-torch 1.13 (libtorch_cpu), the same in later releases where the
// signatures did not change. Every ProcessGroupGloo method returns c10::intrusive_ptr<Work>
// through a hidden pointer in arg0, so `this` is arg1 and the first argument arg2.
constexpr std::array kOps = {
    C10dOp{"_ZN4c10d16ProcessGroupGloo9allreduceERSt6vectorIN2at6TensorESaIS3_EERKNS_"
           "16AllreduceOptionsE",
           "gloo:all_reduce", R::Call, C::AllReduce, 2},
    C10dOp{"_ZN4c10d16ProcessGroupGloo19allreduce_coalescedERSt6vectorIN2at6TensorESaIS3_EERKNS_"
           "25AllreduceCoalescedOptionsE",
           "gloo:all_reduce_coalesced", R::Call, C::AllReduce, 2},
    C10dOp{"_ZN4c10d16ProcessGroupGloo9broadcastERSt6vectorIN2at6TensorESaIS3_EERKNS_"
           "16BroadcastOptionsE",
           "gloo:broadcast", R::Call, C::Broadcast, 2},
    C10dOp{"_ZN4c10d16ProcessGroupGloo6reduceERSt6vectorIN2at6TensorESaIS3_EERKNS_"
           "13ReduceOptionsE",
           "gloo:reduce", R::Call, C::Reduce, 2},
    // the inputs of allgather and gather are their second argument
    C10dOp{"_ZN4c10d16ProcessGroupGloo9allgatherERSt6vectorIS1_IN2at6TensorESaIS3_EESaIS5_EERS5_"
           "RKNS_16AllgatherOptionsE",
           "gloo:all_gather", R::Call, C::AllGather, 3},
    C10dOp{"_ZN4c10d16ProcessGroupGloo19allgather_coalescedERSt6vectorIS1_IN2at6TensorESaIS3_EES"
           "aIS5_EERS5_RKNS_16AllgatherOptionsE",
           "gloo:all_gather_coalesced", R::Call, C::AllGather, 3},
    C10dOp{"_ZN4c10d16ProcessGroupGloo6gatherERSt6vectorIS1_IN2at6TensorESaIS3_EESaIS5_EERS5_"
           "RKNS_13GatherOptionsE",
           "gloo:gather", R::Call, C::None, 3},
    // scatter: what this rank receives (its first argument)
    C10dOp{"_ZN4c10d16ProcessGroupGloo7scatterERSt6vectorIN2at6TensorESaIS3_EERS1_IS5_SaIS5_EERK"
           "NS_14ScatterOptionsE",
           "gloo:scatter", R::Call, C::None, 2},
    C10dOp{"_ZN4c10d16ProcessGroupGloo13alltoall_baseERN2at6TensorES3_RSt6vectorIlSaIlEES7_RKNS_"
           "15AllToAllOptionsE",
           "gloo:all_to_all", R::Call, C::None, 3, true},
    C10dOp{"_ZN4c10d16ProcessGroupGloo7barrierERKNS_14BarrierOptionsE", "gloo:barrier", R::Call,
           C::None},
    C10dOp{"_ZN4c10d16ProcessGroupGloo4sendERSt6vectorIN2at6TensorESaIS3_EEii", "gloo:send",
           R::Call, C::Send, 2, false, 3},
    C10dOp{"_ZN4c10d16ProcessGroupGloo4recvERSt6vectorIN2at6TensorESaIS3_EEii", "gloo:recv",
           R::Call, C::Recv, 2, false, 3},
    C10dOp{"_ZN4c10d16ProcessGroupGloo13recvAnysourceERSt6vectorIN2at6TensorESaIS3_EEi",
           "gloo:recvAnySource", R::Call, C::Recv, 2},
    // Gloo refuses these two (they raise at once); traced so the attempt shows
    C10dOp{"_ZN4c10d16ProcessGroupGloo14reduce_scatterERSt6vectorIN2at6TensorESaIS3_EERS1_IS5_Sa"
           "IS5_EERKNS_20ReduceScatterOptionsE",
           "gloo:reduce_scatter", R::Call, C::ReduceScatter, 2},
    C10dOp{"_ZN4c10d16ProcessGroupGloo15_allgather_baseERN2at6TensorES3_RKNS_16AllgatherOptionsE",
           "gloo:_allgather_base", R::Call, C::AllGather, 3, true},
    C10dOp{"_ZN4c10d16ProcessGroupGloo7enqueueEN3c1013intrusive_ptrINS0_9AsyncWorkENS1_6detail34"
           "intrusive_target_default_null_typeIS3_EEEE",
           "enqueue", R::BindQueued},
    C10dOp{"_ZN4c10d16ProcessGroupGloo8SendWorkC1ERN2at6TensorESt10unique_ptrIN4gloo9transport13U"
           "nboundBufferESt14default_deleteIS8_EE",
           "SendWork", R::BindWork},
    C10dOp{"_ZN4c10d16ProcessGroupGloo8RecvWorkC1ERN2at6TensorESt10unique_ptrIN4gloo9transport13U"
           "nboundBufferESt14default_deleteIS8_EEPKc",
           "RecvWork", R::BindWork},
    // AsyncWork completes on the worker (finishWorkGloo / finishWorkGlooError call it);
    // SendWork and RecvWork in wait(), through finishAndThrow
    C10dOp{"_ZN4c10d4Work6finishENSt15__exception_ptr13exception_ptrE", "finish", R::Finish},
    C10dOp{"_ZN4c10d4Work14finishAndThrowENSt15__exception_ptr13exception_ptrE", "finishAndThrow",
           R::Finish},
};

struct KnownLayout {
  const char* version_prefix;
  TorchLayout layout;
};
// Measured on Debian's python3-torch 1.13.1 (see FACTS.md): TensorImpl::numel_ at 168, its
// TypeMeta (the ScalarType for built-in dtypes) at 176, ProcessGroup::rank_ at 0x18, and
// ProcessGroup::sequenceNum_'s number at 0x30 (found where
// _get_sequence_number_for_group()'s value sits in two live groups of two ranks).
const KnownLayout kLayouts[] = {{"1.13.", {"1.13", 168, 176, 0x18, 0x30}}};

}  // namespace

std::span<const C10dOp> c10d_ops() { return kOps; }

uint64_t c10d_op_cookie(uint16_t index) {
  const C10dOp& op = kOps[index];
  uint64_t cookie = uint64_t(kC10dOpBase + index) | EACGM_COOKIE_ENTRY_ONLY;
  switch (op.role) {
    case R::Call:
      cookie |= EACGM_COOKIE_PG_ARG1;
      if (op.tensor_arg >= 0)
        cookie |= EACGM_COOKIE_TENSORS | (uint64_t(op.tensor_arg) << EACGM_COOKIE_TENSOR_ARG_SHIFT) |
                  (op.one_tensor ? EACGM_COOKIE_TENSOR_ONE : 0);
      break;
    case R::BindQueued:
    case R::Finish:
      cookie |= EACGM_COOKIE_DEREF_ARG1;  // the work (enqueue), the exception (finish)
      break;
    case R::BindWork:
      break;
  }
  return cookie;
}

std::optional<TorchLayout> torch_layout_for(const std::string& path, std::string* version) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string v;
  fs::path real = fs::canonical(path, ec);
  static const std::regex versioned(R"(libtorch(_cpu)?\.so\.(\d+\.\d+(\.\d+)?))");
  std::smatch m;
  std::string name = ec ? fs::path(path).filename().string() : real.filename().string();
  if (std::regex_search(name, m, versioned)) {
    v = m[2];
  } else {
    // a wheel: site-packages/torch/lib/libtorch_cpu.so beside site-packages/torch/version.py
    std::ifstream py(fs::path(path).parent_path().parent_path() / "version.py");
    static const std::regex line(R"(__version__\s*=\s*['"]([0-9][^'"+]*))");
    for (std::string l; std::getline(py, l);)
      if (std::regex_search(l, m, line)) {
        v = m[1];
        break;
      }
  }
  if (version) *version = v;
  for (const auto& k : kLayouts)
    if ((v + ".").starts_with(k.version_prefix)) return k.layout;
  return std::nullopt;
}

std::string_view scalar_type_name(uint64_t type) {
  static constexpr std::string_view names[] = {
      "uint8",     "int8",       "int16", "int32", "int64", "float16", "float32",  "float64",
      "complex32", "complex64", "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16"};
  return type < std::size(names) ? names[type] : "unknown";
}

}  // namespace eacgm
