// The communication layer's probe points: NCCL collectives, point-to-point calls, groups and
// communicator creation, and where each keeps count, datatype, reduction, root or peer,
// communicator and stream.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace eacgm {

enum class CommKind : uint8_t {
  Collective,    // a collective or point-to-point call on a communicator
  Group,         // ncclGroupStart / ncclGroupEnd
  InitRank,      // ncclCommInitRank(Config): communicator out in arg0, nranks, rank
  InitAll,       // ncclCommInitAll: array of ndev communicators out in arg0
  Split,         // ncclCommSplit: parent in arg0, new communicator out in arg3
};

// What the nccl-tests bandwidth formulas call the operation.
enum class Collective : uint8_t { None, AllReduce, Reduce, Broadcast, AllGather, ReduceScatter,
                                  Send, Recv };

constexpr int8_t kNoCommArg = -1;

struct CommOp {
  std::string_view symbol;
  CommKind kind = CommKind::Collective;
  Collective collective = Collective::None;
  // argument positions: 0..5 registers, 6..8 stack words (System V x86-64)
  int8_t count_arg = kNoCommArg;
  int8_t dtype_arg = kNoCommArg;
  int8_t redop_arg = kNoCommArg;
  int8_t root_arg = kNoCommArg;  // root of a rooted collective, or the peer of send/recv
  int8_t comm_arg = kNoCommArg;
  int8_t stream_arg = kNoCommArg;
  int8_t nranks_arg = kNoCommArg;  // communicator creation
  int8_t rank_arg = kNoCommArg;
};

// Op ids of the comm layer start here (the cuda layer's are below): they travel in the cookie.
constexpr uint16_t kCommOpBase = 1000;

std::span<const CommOp> comm_ops();
// The BPF cookie for comm op `index` (its id is kCommOpBase + index).
uint64_t comm_op_cookie(uint16_t index);

// A communicator's identity, the same on every rank of it: a hash of the first 24 bytes of the
// ncclUniqueId its ranks passed to ncclCommInitRank (NCCL's bootstrap handle: a random 64-bit
// magic and the root's socket address), never 0 and below 2^63 (a SQLite integer).
uint64_t nccl_comm_identity(const uint8_t* unique_id, size_t bytes);
// The identity of the communicator ncclCommSplit(parent, color, ...) gives the ranks that pass
// `color`: the same for all of them, different per color.
uint64_t nccl_split_identity(uint64_t parent, int64_t color);

// ncclDataType_t: size in bytes and name; nullopt / "unknown" for values NCCL does not define.
std::optional<uint32_t> nccl_datatype_size(int64_t datatype);
std::string_view nccl_datatype_name(int64_t datatype);
// ncclRedOp_t built-ins; user-defined ops (ncclRedOpCreatePreMulSum) as "custom".
std::string_view nccl_redop_name(int64_t op);

// nccl-tests' definitions (doc/PERFORMANCE.md there): the data size S one call is measured by,
// from the bytes of its count argument, and the bus-bandwidth factor for n ranks.
double nccl_algo_bytes(Collective c, uint64_t count_bytes, uint32_t nranks);
double nccl_bus_factor(Collective c, uint32_t nranks);

// True when a mapped file may be NCCL by its name (libnccl.so.2, libnccl.so).
bool looks_like_nccl_library(const std::string& path);

}  // namespace eacgm
