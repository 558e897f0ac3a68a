// Decoding of call and process records; the hot path after the BPF side, so no allocation per
// call beyond amortised vector growth in the writer's batch.
#include "pipeline/decoder.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "probe/comm_ops.h"
#include "probe/cuda_ops.h"
#include "probe/demangle.h"
#include "probe/job_identity.h"
#include "probe/library_finder.h"
#include "python/python_decoder.h"
#include "util/error.h"
#include "util/read_file.h"

namespace eacgm {
namespace {

static_assert(sizeof(eacgm_call_event) == 8 + 16 + 8 + 8 + 48 + 24 + 40 + 8 + 8 + 8,
              "event layout");
static_assert(sizeof(eacgm_proc_event) == 48, "event layout");
static_assert(sizeof(eacgm_name_event) == 24 + EACGM_NAME_BYTES, "event layout");
static_assert(sizeof(eacgm_exec_image_event) == 48 + EACGM_PATH_BYTES, "event layout");
static_assert(sizeof(eacgm_gpu_batch_event) == 24 + EACGM_GPU_BATCH_BYTES, "event layout");

// /proc/PID/cmdline with NULs turned into spaces; empty if the process is gone.
std::string command_line(uint32_t pid) {
  std::string s = read_small_file(fmt::format("/proc/{}/cmdline", pid));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

std::string comm_of(uint32_t pid, uint32_t tid) {
  std::string s = read_small_file(fmt::format("/proc/{}/task/{}/comm", pid, tid));
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The file an exec'd program was started from, as an absolute path, if one of the places the
// execve path can mean still holds that very file (same device and inode).
std::string locate_exec_file(std::string_view path, const std::vector<uint32_t>& lineage,
                             uint32_t dev, uint64_t ino) {
  namespace fs = std::filesystem;
  if (path.empty() || lineage.empty()) return {};
  std::vector<std::string> candidates;
  if (path[0] == '/') {
    candidates = {std::string(path), fmt::format("/proc/{}/root{}", lineage[0], path)};
  } else {  // relative to the cwd of the process or of an ancestor still running (a launcher)
    for (uint32_t p : lineage) candidates.push_back(fmt::format("/proc/{}/cwd/{}", p, path));
    candidates.push_back(std::string(path));
  }
  for (const auto& c : candidates) {
    struct stat st {};
    if (stat(c.c_str(), &st) != 0 || st.st_ino != ino || major(st.st_dev) != (dev >> 20) ||
        minor(st.st_dev) != (dev & 0xfffff))
      continue;
    std::error_code ec;
    fs::path canonical = fs::canonical(c, ec);
    return ec ? c : canonical.string();
  }
  return {};
}

}  // namespace

void set_bandwidths(CommCallRow& row, Collective collective) {
  if (row.ret != 0 || row.bytes < 0 || row.dur_ns == 0 || collective == Collective::None) return;
  uint32_t n = row.nranks > 0 ? uint32_t(row.nranks) : 0;
  bool needs_n = collective == Collective::AllGather || collective == Collective::ReduceScatter ||
                 collective == Collective::AllReduce;
  if (!n && needs_n) return;
  // bytes per ns = GB/s
  row.algbw_gbps = nccl_algo_bytes(collective, uint64_t(row.bytes), n) / double(row.dur_ns);
  row.busbw_gbps = row.algbw_gbps * nccl_bus_factor(collective, n);
}

// The calling thread's wait for a CPU during the call; -1 where the kernel side could not tell.
int64_t runq_of(const eacgm_call_event& e) {
  return e.runq_ns == EACGM_RUNQ_UNKNOWN ? -1 : int64_t(e.runq_ns);
}

int64_t run_delay_of(const eacgm_call_event& e) {
  return e.entry_run_delay == EACGM_RUNQ_UNKNOWN ? -1 : int64_t(e.entry_run_delay);
}

uint64_t call_arg(const eacgm_call_event& e, int index) {
  if (index < 0) return 0;
  if (index < 6) return e.args[index];
  return e.stack[index - 6];
}

EventDecoder::EventDecoder(Sink& out, Symbolizer& symbols)
    : out_(out), symbols_(symbols) {}

void EventDecoder::on_record(const void* data, size_t size) {
  uint32_t kind = 0;
  if (size < sizeof(kind)) {
    ++stats_.malformed;
    return;
  }
  std::memcpy(&kind, data, sizeof(kind));
  if (kind == EACGM_REC_CALL && size >= sizeof(eacgm_call_event)) {
    decode_call(*static_cast<const eacgm_call_event*>(data));
  } else if (kind == EACGM_REC_PROC && size >= sizeof(eacgm_proc_event)) {
    decode_proc(*static_cast<const eacgm_proc_event*>(data));
  } else if (kind == EACGM_REC_NAME && size >= sizeof(eacgm_name_event)) {
    decode_name(*static_cast<const eacgm_name_event*>(data));
  } else if (kind == EACGM_REC_EXEC_IMAGE && size >= sizeof(eacgm_exec_image_event)) {
    decode_exec_image(*static_cast<const eacgm_exec_image_event*>(data));
  } else if (kind == EACGM_REC_SAMPLE && size >= sizeof(eacgm_sample_event)) {
    decode_sample(*static_cast<const eacgm_sample_event*>(data));
  } else if (kind == EACGM_REC_OFFCPU && size >= sizeof(eacgm_offcpu_event)) {
    decode_offcpu(*static_cast<const eacgm_offcpu_event*>(data));
  } else if (kind == EACGM_REC_GPU_BATCH && size >= sizeof(eacgm_gpu_batch_event)) {
    decode_gpu_batch(*static_cast<const eacgm_gpu_batch_event*>(data));
  } else if (kind == EACGM_REC_MMAP && size >= sizeof(eacgm_mmap_event)) {
    if (on_code_mapped) on_code_mapped(static_cast<const eacgm_mmap_event*>(data)->pid);
  } else if (python_ && python_->on_record(kind, data, size)) {
  } else {
    ++stats_.malformed;
  }
}

template <class Event, class Row>
void EventDecoder::take_stacks(const Event& e, Row& row) {
  if (python_) row.py_stack = python_->take_stack(e.pid, e.tid, e.ts_ns);
  row.native_stack = native_stack_id(e.pid, reinterpret_cast<const uint64_t*>(e.ips), e.nframes);
  note_thread(e.pid, e.tid);
}

void EventDecoder::decode_sample(const eacgm_sample_event& e) {
  StackSampleRow row{e.ts_ns, e.pid, e.tid};
  take_stacks(e, row);
  ++stats_.samples;
  out_.add(row);
}

void EventDecoder::decode_offcpu(const eacgm_offcpu_event& e) {
  OffCpuSampleRow row{e.ts_ns, e.dur_ns, e.weight_ns, e.pid, e.tid};
  take_stacks(e, row);
  ++stats_.offcpu_samples;
  out_.add(row);
}

int64_t EventDecoder::native_stack_id(uint32_t pid, const uint64_t* ips, uint32_t nframes) {
  uint32_t n = std::min<uint32_t>(nframes, EACGM_SAMPLE_MAX_FRAMES);
  if (!n) return 0;
  Symbolizer::Frame frames[EACGM_SAMPLE_MAX_FRAMES];
  std::string key;
  for (uint32_t i = 0; i < n; ++i) {
    // a caller's frame holds the return address, just after its call instruction
    frames[i] = symbols_.frame_at(pid, ips[i] - (i > 0 && ips[i] ? 1 : 0));
    key.append(frames[i].function).push_back('\0');
    key.append(frames[i].module).push_back('\n');
  }
  auto [it, fresh] = native_ids_.try_emplace(std::move(key), int64_t(native_ids_.size() + 1));
  if (fresh) {
    ++stats_.native_stacks;
    for (uint32_t i = 0; i < n; ++i)
      out_.add(NativeFrameRow{it->second, i, frames[i].function, frames[i].module});
  }
  return it->second;
}

namespace {
int64_t number_or_unknown(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(s);
}
}  // namespace

void EventDecoder::note_place(ProcessRow& row, const ProcessRow* parent) {
  // A forked child has its parent's environment; an exec'd or attached process says its own.
  if (parent) {
    row.job_id = parent->job_id;
    row.rank = parent->rank, row.local_rank = parent->local_rank;
    row.world_size = parent->world_size;
  } else {
    JobIdentity id = read_job_identity(row.pid);
    row.job_id = id.job;
    row.rank = number_or_unknown(id.rank);
    row.local_rank = number_or_unknown(id.local_rank);
    row.world_size = number_or_unknown(id.world_size);
  }
  if (row.job_id.empty() && row.rank < 0 && row.world_size < 0) {
    places_.erase(row.pid);
    return;
  }
  ProcessRow& place = places_[row.pid];  // only the place is kept
  place.job_id = row.job_id;
  place.rank = row.rank, place.local_rank = row.local_rank, place.world_size = row.world_size;
}

void EventDecoder::add_process(uint32_t pid, uint32_t ppid, uint64_t ts_ns) {
  parents_[pid] = ppid;
  ProcessRow row;
  row.pid = pid;
  row.ppid = ppid;
  row.name = comm_of(pid, pid);
  row.command = command_line(pid);
  row.start_ns = ts_ns;
  state_of(pid).name = row.name;
  commands_[pid] = row.command;
  note_place(row, nullptr);
  out_.add(std::move(row));
}

EventDecoder::ProcessState& EventDecoder::state_of(uint32_t pid) {
  // calls come in runs from one process: one hash lookup per run, not several per call
  if (!last_state_ || last_pid_ != pid) last_state_ = &state_[pid], last_pid_ = pid;
  return *last_state_;  // unordered_map elements stay put until erased
}

void EventDecoder::note_thread(uint32_t pid, uint32_t tid) {
  if (!state_of(pid).threads.insert(tid).second) return;
  std::string name = comm_of(pid, tid);
  if (name.empty()) name = state_of(pid).name;
  out_.add(ThreadRow{pid, tid, name.empty() ? fmt::format("thread {}", tid) : name});
}

void EventDecoder::decode_comm(const eacgm_call_event& e) {
  auto ops = comm_ops();
  size_t index = e.op - kCommOpBase;
  if (index >= ops.size()) {
    ++stats_.malformed;
    return;
  }
  ++stats_.calls;
  note_thread(e.pid, e.tid);
  const CommOp& op = ops[index];
  CommCallRow row;
  row.ts_ns = e.ts_ns;
  row.dur_ns = e.dur_ns;
  row.runq_ns = runq_of(e);
  row.entry_run_delay_ns = run_delay_of(e);
  row.pid = e.pid;
  row.tid = e.tid;
  row.name = op.symbol;
  row.ret = static_cast<int32_t>(e.ret);  // ncclResult_t
  if (python_) row.py_stack = python_->stack_of_call(e.pid, e.tid, e.ts_ns, e.py_stack_ts);
  auto arg = [&](int8_t i) { return call_arg(e, i); };
  if (op.count_arg != kNoCommArg) row.count = int64_t(arg(op.count_arg));
  if (op.dtype_arg != kNoCommArg) {
    int64_t dtype = int32_t(arg(op.dtype_arg));
    row.datatype = nccl_datatype_name(dtype);
    if (auto size = nccl_datatype_size(dtype); size && row.count >= 0)
      row.bytes = row.count * int64_t(*size);
  }
  if (op.redop_arg != kNoCommArg) row.redop = nccl_redop_name(int32_t(arg(op.redop_arg)));
  if (op.root_arg != kNoCommArg) row.peer = int32_t(arg(op.root_arg));
  if (op.stream_arg != kNoCommArg) {
    row.has_stream = true;
    row.stream = arg(op.stream_arg);
  }
  switch (op.kind) {
    case CommKind::Collective: {
      row.comm = arg(op.comm_arg);
      auto& comms = state_of(e.pid).comms;
      if (auto it = comms.find(row.comm); it != comms.end()) {
        row.rank = it->second.rank;
        row.nranks = it->second.nranks;
        row.comm_id = it->second.id;
      }
      set_bandwidths(row, op.collective);
      break;
    }
    case CommKind::InitRank:
    case CommKind::InitAll:
      row.comm = e.deref[0];
      row.nranks = int32_t(arg(op.nranks_arg));
      row.rank = op.rank_arg != kNoCommArg ? int32_t(arg(op.rank_arg)) : 0;
      if (op.kind == CommKind::InitRank) {  // the ncclUniqueId's first 24 bytes, off the stack
        uint8_t id[sizeof e.stack];
        memcpy(id, e.stack, sizeof id);
        row.comm_id = nccl_comm_identity(id, sizeof id);
      }
      if (row.ret == 0 && row.comm)
        state_of(e.pid).comms[row.comm] = {row.rank, row.nranks, row.comm_id};
      break;
    case CommKind::Split: {
      // the new communicator's rank and size are NCCL's to decide: not known from the call;
      // its identity is the parent's and the color's
      uint64_t parent = arg(op.comm_arg);
      row.comm = e.deref[1];
      auto& comms = state_of(e.pid).comms;
      if (auto it = comms.find(parent); it != comms.end() && it->second.id)
        row.comm_id = nccl_split_identity(it->second.id, int64_t(int32_t(arg(1))));
      if (row.ret == 0 && row.comm) comms[row.comm] = {-1, -1, row.comm_id};
      break;
    }
    case CommKind::Group:
      break;
  }
  out_.add(row);
}

void EventDecoder::decode_torch(const eacgm_call_event& e) {
  // names are kept here: the registry takes a lock, and every operator call comes this way
  size_t index = e.op - kTorchOpBase;
  if (index >= torch_names_.size()) torch_names_.resize(index + 1);
  std::string_view& name = torch_names_[index];
  if (name.empty() && torch_ops_) name = torch_ops_->name(uint16_t(e.op));
  if (name.empty()) {
    ++stats_.malformed;
    return;
  }
  ++stats_.calls;
  note_thread(e.pid, e.tid);
  TorchCallRow row{e.ts_ns, e.dur_ns, e.pid, e.tid, name};
  row.runq_ns = runq_of(e);
  if (python_) row.py_stack = python_->stack_of_call(e.pid, e.tid, e.ts_ns, e.py_stack_ts);
  out_.add(row);
}

std::map<std::string, EventDecoder::FirstCall> EventDecoder::first_calls() const {
  std::map<std::string, FirstCall> out;
  for (const FirstCall& f : first_calls_)
    if (f.op != ~0ull) out.emplace(layer_of_op(f.op), f);
  return out;
}

void EventDecoder::decode_call(const eacgm_call_event& e) {
  size_t layer = e.op >= kTorchOpBase ? 2 : e.op >= kCommOpBase ? 1 : 0;
  if (first_calls_[layer].op == ~0ull && (layer > 0 || e.op < cuda_ops().size()))
    first_calls_[layer] = {e.pid, e.op};
  if (ProcessState& st = state_of(e.pid); !st.called) {
    st.called = true;
    if (on_first_call) on_first_call(e.pid);
  }
  if (e.op >= kTorchOpBase) return decode_torch(e);
  if (e.op >= kC10dOpBase) return decode_c10d(e);
  if (e.op >= kCommOpBase) return decode_comm(e);
  decode_cuda(e);
}

void EventDecoder::decode_cuda(const eacgm_call_event& e) {
  auto ops = cuda_ops();
  if (e.op >= ops.size()) {
    ++stats_.malformed;
    return;
  }
  ++stats_.calls;
  note_thread(e.pid, e.tid);

  const CallOp& op = ops[e.op];
  CudaCallRow row;
  row.ts_ns = e.ts_ns;
  row.dur_ns = e.dur_ns;
  row.runq_ns = runq_of(e);
  row.pid = e.pid;
  row.tid = e.tid;
  row.name = op.symbol;
  // CUDA error codes are C enums: the low 32 bits of the return register.
  row.ret = static_cast<int32_t>(e.ret);
  if (python_) row.py_stack = python_->stack_of_call(e.pid, e.tid, e.ts_ns, e.py_stack_ts);
  if (op.bytes_arg != kNoArg) row.bytes = static_cast<int64_t>(call_arg(e, op.bytes_arg));
  if (op.stream_arg != kNoArg) {
    row.has_stream = true;
    row.stream = call_arg(e, op.stream_arg);
  }
  if (op.kind_arg != kNoArg) row.memcpy_kind = memcpy_kind_name(int64_t(call_arg(e, op.kind_arg)));
  if (op.fixed_memcpy_kind != kNoArg) row.memcpy_kind = memcpy_kind_name(op.fixed_memcpy_kind);

  if (is_launch(op.kind))
    fill_launch(op.kind, e, row);
  else
    fill_memory_or_lookup(op.kind, e, row);
  out_.add(row);
}

// Allocations and frees (their sizes, remembered by address), and the driver's kernel
// lookups (the names of kernel handles).
void EventDecoder::fill_memory_or_lookup(CallKind kind, const eacgm_call_event& e,
                                         CudaCallRow& row) {
  switch (kind) {
    case CallKind::Alloc:
      row.address = e.deref[0];
      if (row.ret == 0 && row.address) state_of(e.pid).allocations[row.address] = row.bytes;
      break;
    case CallKind::Free: {
      row.address = e.args[0];
      auto& allocations = state_of(e.pid).allocations;
      auto it = allocations.find(row.address);
      if (it != allocations.end()) {
        row.bytes = it->second;
        if (row.ret == 0) allocations.erase(it);
      }
      break;
    }
    case CallKind::KernelLookup:
      // the NAME record written just before this one has taught us the handle's name
      row.address = e.deref[0];
      if (row.ret == 0) row.kernel = driver_kernel_name(e.pid, row.address);
      break;
    case CallKind::KernelToFunction:
      // the CUfunction of a CUkernel launches the same kernel: it inherits the name
      row.address = e.deref[0];
      if (row.ret == 0) {
        row.kernel = driver_kernel_name(e.pid, e.args[1]);
        state_of(e.pid).driver_names[row.address] = row.kernel;
      }
      break;
    default:
      break;
  }
}

bool EventDecoder::is_launch(CallKind kind) {
  return kind == CallKind::Launch || kind == CallKind::LaunchConfig ||
         kind == CallKind::DriverLaunch || kind == CallKind::DriverLaunchEx;
}

// A kernel launch: its grid, block, shared memory, stream and kernel name.
void EventDecoder::fill_launch(CallKind kind, const eacgm_call_event& e, CudaCallRow& row) {
  switch (kind) {
    case CallKind::Launch:
      // dim3 travels in two registers each: x | y << 32, then z
      row.is_launch = true;
      row.address = e.args[0];
      row.grid[0] = uint32_t(e.args[1]), row.grid[1] = uint32_t(e.args[1] >> 32);
      row.grid[2] = uint32_t(e.args[2]);
      row.block[0] = uint32_t(e.args[3]), row.block[1] = uint32_t(e.args[3] >> 32);
      row.block[2] = uint32_t(e.args[4]);
      row.shared_mem = e.stack[0];
      row.kernel = runtime_kernel_name(e, row.address);
      break;
    case CallKind::LaunchConfig: {
      // cudaLaunchConfig_t: dim3 gridDim, dim3 blockDim, size_t dynamicSmemBytes, stream, ...
      uint32_t dims[6];
      std::memcpy(dims, e.deref, sizeof(dims));
      row.is_launch = true;
      row.address = e.args[1];
      std::copy(dims, dims + 3, row.grid);
      std::copy(dims + 3, dims + 6, row.block);
      row.shared_mem = e.deref[3];
      row.has_stream = true;
      row.stream = e.deref[4];
      row.kernel = runtime_kernel_name(e, row.address);
      break;
    }
    case CallKind::DriverLaunch:
      row.is_launch = true;
      row.address = e.args[0];
      row.grid[0] = uint32_t(e.args[1]), row.grid[1] = uint32_t(e.args[2]);
      row.grid[2] = uint32_t(e.args[3]);
      row.block[0] = uint32_t(e.args[4]), row.block[1] = uint32_t(e.args[5]);
      row.block[2] = uint32_t(e.stack[0]);
      row.shared_mem = e.stack[1];
      // A CUfunction is a driver handle, not a code address: its name comes from the lookup.
      row.kernel = driver_kernel_name(e.pid, row.address);
      state_of(e.pid).last_driver_launch[e.tid] = {e.ts_ns, row.kernel};
      break;
    case CallKind::DriverLaunchEx: {
      // CUlaunchConfig: 6 unsigned dims, unsigned sharedMemBytes, (pad), CUstream hStream
      uint32_t words[7];
      std::memcpy(words, e.deref, sizeof(words));
      row.is_launch = true;
      row.address = e.args[1];
      std::copy(words, words + 3, row.grid);
      std::copy(words + 3, words + 6, row.block);
      row.shared_mem = words[6];
      row.has_stream = true;
      row.stream = e.deref[4];
      row.kernel = driver_kernel_name(e.pid, row.address);
      state_of(e.pid).last_driver_launch[e.tid] = {e.ts_ns, row.kernel};
      break;
    }
    default:
      break;
  }
}

void EventDecoder::set_python(PythonDecoder* python) {
  python_ = python;
  if (python_) python_->note_thread = [this](uint32_t pid, uint32_t tid) { note_thread(pid, tid); };
}

void EventDecoder::decode_exec_image(const eacgm_exec_image_event& e) {
  std::vector<uint32_t> lineage{e.pid};
  for (auto it = parents_.find(e.pid); it != parents_.end() && it->second && lineage.size() < 8;
       it = parents_.find(it->second))
    lineage.push_back(it->second);
  std::string path = locate_exec_file(std::string_view(e.path, strnlen(e.path, sizeof(e.path))),
                                      lineage, e.dev, e.ino);
  if (path.empty()) return;  // the maps snapshot that follows is all there is
  Mapping text;
  text.start = e.start;
  text.end = e.end;
  text.readable = text.executable = true;
  text.file_offset = e.offset;
  text.dev_major = e.dev >> 20;
  text.dev_minor = e.dev & 0xfffff;
  text.inode = e.ino;
  text.path = std::move(path);
  // the old program's maps are gone with the exec; a full snapshot replaces this if it can
  symbols_.update_maps(e.pid, {std::move(text)});
}

void EventDecoder::decode_name(const eacgm_name_event& e) {
  std::string_view raw(e.name, strnlen(e.name, sizeof(e.name)));
  // CUDA C++ kernels are looked up by their mangled names; Triton's are plain. A name that
  // filled the event was cut short, and a cut mangled name does not demangle whole: its
  // leading function name still does
  bool cut = raw.size() == sizeof(e.name) - 1;
  state_of(e.pid).driver_names[e.handle] =
      names_.intern(cut ? demangle_truncated(raw) : demangle(raw));
}

std::string_view EventDecoder::runtime_kernel_name(const eacgm_call_event& e, uint64_t func) {
  // The runtime takes a host stub's address or, since CUDA 12, a cudaKernel_t: a CUkernel
  // handle. nvcc's stubs pass the handle where cudaGetKernel works (on a GPU: seen on an H100
  // with CUDA 13), the stub where it fails. A handle that a lookup named is not code.
  ProcessState& state = state_of(e.pid);
  if (auto it = state.driver_names.find(func); it != state.driver_names.end()) return it->second;
  std::string_view name = symbols_.function_name(e.pid, func);
  // a stub in a library without its local symbols (PyTorch's wheels): the driver launch this
  // call made, on this thread within its time, has the kernel's name
  if (auto it = state.last_driver_launch.find(e.tid);
      name.starts_with("unknown") && it != state.last_driver_launch.end() &&
      it->second.first >= e.ts_ns && it->second.first <= e.ts_ns + e.dur_ns &&
      !it->second.second.starts_with("unknown"))
    return it->second.second;
  return name;
}

std::string_view EventDecoder::driver_kernel_name(uint32_t pid, uint64_t handle) {
  auto& names = state_of(pid).driver_names;
  auto it = names.find(handle);
  if (it != names.end()) return it->second;
  // looked up before tracing started, or through a path eacgm does not probe: named once,
  // not formatted again at every launch of it
  std::string_view name = names_.intern(fmt::format("unknown CUfunction {:#x}", handle));
  names.emplace(handle, name);
  return name;
}

void EventDecoder::decode_proc(const eacgm_proc_event& e) {
  ++stats_.proc_events;
  switch (e.type) {
    case EACGM_PROC_FORK: {
      // At fork the child is a copy of its parent: name it from the event, not from /proc
      // (by the time we read /proc it may have exec'd something else).
      parents_[e.pid] = e.ppid;
      ProcessRow row;
      row.pid = e.pid;
      row.ppid = e.ppid;
      row.name = std::string(e.comm, strnlen(e.comm, sizeof(e.comm)));
      auto it = commands_.find(e.ppid);
      row.command = it != commands_.end() ? it->second : row.name;
      row.start_ns = e.ts_ns;
      commands_[e.pid] = row.command;
      auto parent = places_.find(e.ppid);
      if (parent != places_.end()) note_place(row, &parent->second);
      if (on_process_named) on_process_named(e.pid, row.name);
      state_of(e.pid).name = row.name;
      out_.add(std::move(row));
      break;
    }
    case EACGM_PROC_EXEC: {
      // exec replaces the program: a new row with the new command line
      ProcessRow row;
      row.pid = e.pid;
      if (auto it = parents_.find(e.pid); it != parents_.end()) row.ppid = it->second;
      row.name = std::string(e.comm, strnlen(e.comm, sizeof(e.comm)));
      row.command = command_line(e.pid);
      if (row.command.empty()) row.command = row.name;
      row.start_ns = e.ts_ns;
      commands_[e.pid] = row.command;
      note_place(row, nullptr);
      if (on_process_named) on_process_named(e.pid, row.name);
      // exec leaves one thread, the pid's own, running the new program: its name follows (a
      // Python program started through a shell wrapper is that program, not "bash")
      ProcessState& st = state_of(e.pid);
      st.name = row.name;
      bool known = st.threads.count(e.pid) != 0;
      st.threads.clear();
      if (known) {
        st.threads.insert(e.pid);
        out_.add(ThreadRow{e.pid, e.pid, row.name});
      }
      out_.add(std::move(row));
      if (on_code_mapped) on_code_mapped(e.pid);
      break;
    }
    case EACGM_PROC_EXIT:
      // the kernel keeps a wait(2) status; store it the way a shell reports it
      out_.add(ProcessExitRow{e.pid, e.ts_ns,
                              (e.exit_code & 0x7f) ? 128 + (e.exit_code & 0x7f)
                                                   : (e.exit_code >> 8) & 0xff});
      parents_.erase(e.pid);
      commands_.erase(e.pid);
      state_.erase(e.pid);
      last_state_ = nullptr;  // the cache below may point at it
      places_.erase(e.pid);
      forget_c10d(e.pid);
      if (on_process_exit) on_process_exit(e.pid, e.exit_code);
      break;
    default:
      ++stats_.malformed;
  }
}

}  // namespace eacgm
