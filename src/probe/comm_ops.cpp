// The table of NCCL functions eacgm probes, their argument layout, and NCCL's enums and
// bandwidth formulas.
#include "probe/comm_ops.h"

#include <array>
#include <filesystem>

#include "events.h"

namespace eacgm {
namespace {

using K = CommKind;
using C = Collective;

// Positions follow nccl.h. An ncclUniqueId (128 bytes) is passed by value on the stack and
// takes no register, so the rank after it is the third register argument.
constexpr CommOp coll(std::string_view s, C c, int8_t count, int8_t dtype, int8_t redop,
                      int8_t root, int8_t comm, int8_t stream) {
  return CommOp{s, K::Collective, c, count, dtype, redop, root, comm, stream};
}

constexpr int8_t N = kNoCommArg;

constexpr std::array kOps = {
    // (sendbuff, recvbuff, count, datatype, op, comm, stream)
    coll("ncclAllReduce", C::AllReduce, 2, 3, 4, N, 5, 6),
    // (sendbuff, recvbuff, count, datatype, op, root, comm, stream)
    coll("ncclReduce", C::Reduce, 2, 3, 4, 5, 6, 7),
    // (sendbuff, recvbuff, count, datatype, root, comm, stream)
    coll("ncclBroadcast", C::Broadcast, 2, 3, N, 4, 5, 6),
    // (buff, count, datatype, root, comm, stream): the in-place legacy form
    coll("ncclBcast", C::Broadcast, 1, 2, N, 3, 4, 5),
    // (sendbuff, recvbuff, sendcount, datatype, comm, stream)
    coll("ncclAllGather", C::AllGather, 2, 3, N, N, 4, 5),
    // (sendbuff, recvbuff, recvcount, datatype, op, comm, stream)
    coll("ncclReduceScatter", C::ReduceScatter, 2, 3, 4, N, 5, 6),
    // (sendbuff | recvbuff, count, datatype, peer, comm, stream)
    coll("ncclSend", C::Send, 1, 2, N, 3, 4, 5),
    coll("ncclRecv", C::Recv, 1, 2, N, 3, 4, 5),
    CommOp{"ncclGroupStart", K::Group},
    CommOp{"ncclGroupEnd", K::Group},
    // (ncclComm_t* comm, int nranks, ncclUniqueId id, int rank[, ncclConfig_t* config])
    CommOp{"ncclCommInitRank", K::InitRank, C::None, N, N, N, N, N, N, 1, 2},
    CommOp{"ncclCommInitRankConfig", K::InitRank, C::None, N, N, N, N, N, N, 1, 2},
    // (ncclComm_t* comms, int ndev, const int* devlist)
    CommOp{"ncclCommInitAll", K::InitAll, C::None, N, N, N, N, N, N, 1, N},
    // (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)
    CommOp{"ncclCommSplit", K::Split, C::None, N, N, N, N, 0, N, N, N},
};

}  // namespace

std::span<const CommOp> comm_ops() { return kOps; }

uint64_t comm_op_cookie(uint16_t index) {
  const CommOp& o = kOps.at(index);
  uint64_t flags = uint64_t(kCommOpBase) + index;
  for (int8_t arg : {o.count_arg, o.dtype_arg, o.redop_arg, o.root_arg, o.comm_arg, o.stream_arg})
    if (arg >= 6) flags |= EACGM_COOKIE_READ_STACK;
  if (o.kind == K::InitRank || o.kind == K::InitAll) flags |= EACGM_COOKIE_DEREF_OUT0;
  // the ncclUniqueId passed by value: its first 24 bytes, the communicator's identity
  if (o.kind == K::InitRank) flags |= EACGM_COOKIE_READ_STACK;
  if (o.kind == K::Split) flags |= EACGM_COOKIE_DEREF_OUT3;
  return flags;
}

namespace {
// FNV-1a: what a handful of bytes needs to become an identity (no library in reach has a
// stable 64-bit hash with a fixed definition).
uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}
uint64_t as_identity(uint64_t h) {
  h &= 0x7fffffffffffffffULL;
  return h ? h : 1;
}
}  // namespace

uint64_t nccl_comm_identity(const uint8_t* unique_id, size_t bytes) {
  return as_identity(fnv1a(unique_id, bytes));
}

uint64_t nccl_split_identity(uint64_t parent, int64_t color) {
  uint8_t b[16];
  for (int i = 0; i < 8; ++i) b[i] = uint8_t(parent >> (8 * i)), b[8 + i] = uint8_t(uint64_t(color) >> (8 * i));
  return as_identity(fnv1a(b, sizeof b));
}

std::optional<uint32_t> nccl_datatype_size(int64_t datatype) {
  static constexpr uint32_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  if (datatype < 0 || datatype >= int64_t(std::size(kSizes))) return std::nullopt;
  return kSizes[datatype];
}

std::string_view nccl_datatype_name(int64_t datatype) {
  static constexpr std::string_view kNames[] = {
      "int8",    "uint8",   "int32",    "uint32",      "int64",       "uint64",
      "float16", "float32", "float64",  "bfloat16",    "float8e4m3", "float8e5m2"};
  if (datatype < 0 || datatype >= int64_t(std::size(kNames))) return "unknown";
  return kNames[datatype];
}

std::string_view nccl_redop_name(int64_t op) {
  static constexpr std::string_view kNames[] = {"sum", "prod", "max", "min", "avg"};
  if (op < 0) return "unknown";
  return op < int64_t(std::size(kNames)) ? kNames[op] : "custom";
}

double nccl_algo_bytes(Collective c, uint64_t count_bytes, uint32_t nranks) {
  // AllGather's count is per rank (sendcount), ReduceScatter's is the per-rank result
  // (recvcount): the operation's size is n times that.
  if (c == Collective::AllGather || c == Collective::ReduceScatter)
    return double(count_bytes) * double(nranks);
  return double(count_bytes);
}

double nccl_bus_factor(Collective c, uint32_t nranks) {
  double n = double(nranks);
  switch (c) {
    case Collective::AllReduce: return nranks ? 2 * (n - 1) / n : 0;
    case Collective::AllGather:
    case Collective::ReduceScatter: return nranks ? (n - 1) / n : 0;
    case Collective::Reduce:
    case Collective::Broadcast:
    case Collective::Send:
    case Collective::Recv: return 1;
    case Collective::None: return 0;
  }
  return 0;
}

bool looks_like_nccl_library(const std::string& path) {
  std::string base = std::filesystem::path(path).filename().string();
  return base.starts_with("libnccl.so") || base.starts_with("libnccl-") ;
}

}  // namespace eacgm
