// The CUDA op table and the decoder's reading of raw call records: where each API keeps its
// bytes, stream, copy kind and launch geometry (System V x86-64 argument order), what the BPF
// side is told to copy, and how launches get kernel names. Raw records are built here the way
// the BPF programs fill them, decoded, stored, and read back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "events.h"
#include "probe/cuda_ops.h"
#include "probe/symbolizer.h"
#include "pipeline/decoder.h"
#include "store/reader.h"
#include "store/recording.h"
#include "store/sqlite_util.h"

// A function with a C++ name, standing in for a kernel's host stub in this process.
namespace unit_fake {
__attribute__((noinline)) void scale_stub(float* x, float a, int n) {
  for (int i = 0; i < n; ++i) x[i] *= a;
}
}  // namespace unit_fake

namespace eacgm {
namespace {

namespace fs = std::filesystem;

uint16_t op_id(std::string_view symbol) {
  auto ops = cuda_ops();
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].symbol == symbol) return uint16_t(i);
  ADD_FAILURE() << "no op " << symbol;
  return 0;
}

eacgm_call_event call(std::string_view symbol, std::initializer_list<uint64_t> args,
                      int64_t ret = 0) {
  eacgm_call_event e{};
  e.kind = EACGM_REC_CALL;
  e.op = op_id(symbol);
  e.ts_ns = 1000;
  e.dur_ns = 10;
  e.pid = uint32_t(getpid());
  e.tid = uint32_t(gettid());
  e.ret = ret;
  size_t i = 0;
  for (uint64_t a : args) e.args[i++] = a;
  return e;
}

// The NAME record the BPF side writes before a lookup's call record: `handle` is `name`'s.
eacgm_name_event name_event(std::string_view lookup, uint64_t handle, std::string_view name) {
  eacgm_name_event n{};
  n.kind = EACGM_REC_NAME;
  n.op = op_id(lookup);
  n.pid = uint32_t(getpid());
  n.handle = handle;
  std::memcpy(n.name, name.data(), std::min(name.size(), sizeof(n.name) - 1));
  return n;
}

TEST(CudaOps, TableIsConsistent) {
  auto ops = cuda_ops();
  ASSERT_LE(ops.size(), size_t(EACGM_COOKIE_OP_MASK));
  std::set<std::string_view> names;
  for (size_t i = 0; i < ops.size(); ++i) {
    const CallOp& o = ops[i];
    SCOPED_TRACE(std::string(o.symbol));
    EXPECT_TRUE(names.insert(o.symbol).second) << "duplicate";
    EXPECT_EQ(o.driver, o.symbol.starts_with("cu") && !o.symbol.starts_with("cuda"));
    for (int8_t arg : {o.bytes_arg, o.stream_arg, o.kind_arg})
      EXPECT_TRUE(arg == kNoArg || (arg >= 0 && arg < 6 + EACGM_STACK_WORDS));
    if (o.kind == CallKind::Memcpy) EXPECT_NE(o.kind_arg != kNoArg, o.fixed_memcpy_kind != kNoArg);
    if (o.kind == CallKind::Alloc || o.kind == CallKind::Memcpy || o.kind == CallKind::Memset)
      EXPECT_NE(o.bytes_arg, kNoArg);
    // async variants are stream-ordered, so they must say which stream
    if (o.symbol.find("Async") != std::string_view::npos) EXPECT_NE(o.stream_arg, kNoArg);
    // stack arguments are only there when the BPF side was told to copy them
    uint64_t cookie = cuda_op_cookie(uint16_t(i));
    EXPECT_EQ(cookie & EACGM_COOKIE_OP_MASK, i);
    bool reads_stack = o.stream_arg >= 6 || o.kind == CallKind::Launch ||
                       o.kind == CallKind::DriverLaunch;
    EXPECT_EQ(bool(cookie & EACGM_COOKIE_READ_STACK), reads_stack);
    EXPECT_EQ(bool(cookie & EACGM_COOKIE_DEREF_OUT0),
              o.kind == CallKind::Alloc || o.kind == CallKind::KernelLookup ||
                  o.kind == CallKind::KernelToFunction);
    EXPECT_EQ(bool(cookie & EACGM_COOKIE_DEREF_ARG0),
              o.kind == CallKind::LaunchConfig || o.kind == CallKind::DriverLaunchEx);
    EXPECT_EQ(bool(cookie & EACGM_COOKIE_NAME_ARG2), o.kind == CallKind::KernelLookup);
  }
  // every _ptsz/_ptds variant has its plain function beside it, with the same layout
  for (const CallOp& o : ops) {
    for (std::string_view suffix : {"_ptsz", "_ptds"}) {
      if (!o.symbol.ends_with(suffix)) continue;
      std::string_view plain = o.symbol.substr(0, o.symbol.size() - suffix.size());
      const CallOp& p = ops[op_id(plain)];
      EXPECT_EQ(p.kind, o.kind) << o.symbol;
      EXPECT_EQ(p.bytes_arg, o.bytes_arg) << o.symbol;
      EXPECT_EQ(p.stream_arg, o.stream_arg) << o.symbol;
    }
  }
  EXPECT_THROW(cuda_op_cookie(uint16_t(ops.size())), std::out_of_range);
}

TEST(CudaOps, MemcpyKindNames) {
  EXPECT_EQ(memcpy_kind_name(0), "HostToHost");
  EXPECT_EQ(memcpy_kind_name(1), "HostToDevice");
  EXPECT_EQ(memcpy_kind_name(2), "DeviceToHost");
  EXPECT_EQ(memcpy_kind_name(3), "DeviceToDevice");
  EXPECT_EQ(memcpy_kind_name(4), "Default");
  EXPECT_EQ(memcpy_kind_name(5), "Unknown");
  EXPECT_EQ(memcpy_kind_name(-1), "Unknown");
}

// Feeds raw records to a decoder writing a real recording, then reads the rows back.
class Decode : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("eacgm_decode_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "run.eacgm.db").string();
    writer_ = std::make_unique<RecordingWriter>(path_, false);
    decoder_ = std::make_unique<EventDecoder>(*writer_, symbols_);
  }
  void TearDown() override {
    decoder_.reset();
    writer_.reset();
    fs::remove_all(dir_);
  }
  template <typename T>
  void feed(const T& record) {
    decoder_->on_record(&record, sizeof(record));
  }
  // "column=value" for every non-NULL column of each call row, in order
  std::vector<std::string> rows() {
    writer_->flush();
    EXPECT_EQ(writer_->close(), "");
    std::vector<std::string> out;
    RecordingReader r(path_);
    r.query("SELECT name, ret, bytes, memcpy_kind, stream, grid_x, grid_y, grid_z, block_x, "
            "block_y, block_z, shared_mem, kernel, address FROM cuda_calls ORDER BY rowid",
            [&](Statement& s) {
              static const char* cols[] = {"name",   "ret",    "bytes",  "kind",  "stream",
                                           "gx",     "gy",     "gz",     "bx",    "by",
                                           "bz",     "shared", "kernel", "addr"};
              std::string row;
              for (int c = 0; c < 14; ++c)
                if (!s.null_at(c)) row += std::string(cols[c]) + "=" + std::string(s.text_at(c)) + " ";
              out.push_back(row);
            });
    return out;
  }

  fs::path dir_;
  std::string path_;
  Symbolizer symbols_;
  std::unique_ptr<RecordingWriter> writer_;
  std::unique_ptr<EventDecoder> decoder_;
};

TEST_F(Decode, CopiesSetsAndSyncsReadTheirArguments) {
  // cudaMemcpyAsync(dst, src, count, kind, stream)
  feed(call("cudaMemcpyAsync", {0xd0, 0xe0, 4096, 1, 0x77}));
  // cudaMemcpy(dst, src, count, kind): no stream
  feed(call("cudaMemcpy", {0xd0, 0xe0, 100, 2}));
  // cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream): the name says the direction
  feed(call("cuMemcpyDtoHAsync_v2", {0xd0, 0xe0, 300, 0x88}));
  // cudaMemsetAsync(devPtr, value, count, stream)
  feed(call("cudaMemsetAsync", {0xd0, 7, 900, 0x99}));
  // cudaStreamSynchronize(stream); a CUDA error code is a 32-bit enum in a 64-bit register
  feed(call("cudaStreamSynchronize", {0x55}, int64_t(0xffffffff00000023)));
  EXPECT_EQ(rows(), (std::vector<std::string>{
                        "name=cudaMemcpyAsync ret=0 bytes=4096 kind=HostToDevice stream=119 ",
                        "name=cudaMemcpy ret=0 bytes=100 kind=DeviceToHost ",
                        "name=cuMemcpyDtoHAsync_v2 ret=0 bytes=300 kind=DeviceToHost stream=136 ",
                        "name=cudaMemsetAsync ret=0 bytes=900 stream=153 ",
                        "name=cudaStreamSynchronize ret=35 stream=85 "}));
  EXPECT_EQ(decoder_->stats().calls, 5u);
  EXPECT_EQ(decoder_->stats().malformed, 0u);
}

TEST_F(Decode, FreesReturnTheBytesOfTheirAllocation) {
  auto alloc = call("cudaMalloc", {0x7ff0, 1 << 20});  // cudaMalloc(&ptr, size)
  alloc.deref[0] = 0xa000;                              // *ptr read at return
  feed(alloc);
  auto failed = call("cudaMalloc", {0x7ff0, 512}, 2);  // cudaErrorMemoryAllocation
  failed.deref[0] = 0xb000;                            // whatever was in *ptr: not an allocation
  feed(failed);
  feed(call("cudaFree", {0xa000}));
  feed(call("cudaFree", {0xa000}));  // double free: the allocation is gone
  feed(call("cudaFree", {0xb000}));
  EXPECT_EQ(rows(), (std::vector<std::string>{
                        "name=cudaMalloc ret=0 bytes=1048576 addr=40960 ",
                        "name=cudaMalloc ret=2 bytes=512 addr=45056 ",
                        "name=cudaFree ret=0 bytes=1048576 addr=40960 ",
                        "name=cudaFree ret=0 addr=40960 ",
                        "name=cudaFree ret=0 addr=45056 "}));
}

TEST_F(Decode, AnExitedProcessLeavesNothingBehind) {
  // what the decoder knows of a process goes with it: a long-running agent sees days of churn,
  // and a pid used again is another process whose frees return nothing of the first's
  auto alloc = call("cudaMalloc", {0x7ff0, 4096});
  alloc.deref[0] = 0xa000;
  feed(alloc);
  EXPECT_EQ(decoder_->live_processes(), 1u);
  eacgm_proc_event exit{};
  exit.kind = EACGM_REC_PROC;
  exit.type = EACGM_PROC_EXIT;
  exit.ts_ns = 2000;
  exit.pid = uint32_t(getpid());
  feed(exit);
  EXPECT_EQ(decoder_->live_processes(), 0u);
  feed(call("cudaFree", {0xa000}));
  EXPECT_EQ(rows(), (std::vector<std::string>{"name=cudaMalloc ret=0 bytes=4096 addr=40960 ",
                                              "name=cudaFree ret=0 addr=40960 "}));
}

TEST_F(Decode, AProcesssFirstCallSaysOnceThatItMapsATracedLibrary) {
  // the agent (--all) has no mmap events: a process's first call is how it learns at once that
  // the process maps CUDA, NCCL or PyTorch (its Python is given stacks then, not at a rescan)
  std::vector<uint32_t> said;
  decoder_->on_first_call = [&](uint32_t pid) { said.push_back(pid); };
  feed(call("cudaStreamSynchronize", {0x55}));
  feed(call("cudaStreamSynchronize", {0x55}));
  auto other = call("cudaStreamSynchronize", {0x55});
  other.pid = 1;
  feed(other);
  feed(call("cudaStreamSynchronize", {0x55}));
  EXPECT_EQ(said, (std::vector<uint32_t>{uint32_t(getpid()), 1u}));
  // a process that exits and comes back (a pid used again) is another process: said again
  eacgm_proc_event exit{};
  exit.kind = EACGM_REC_PROC;
  exit.type = EACGM_PROC_EXIT;
  exit.ts_ns = 2000;
  exit.pid = 1;
  feed(exit);
  feed(other);
  EXPECT_EQ(said, (std::vector<uint32_t>{uint32_t(getpid()), 1u, 1u}));
}

TEST_F(Decode, RuntimeLaunchesReadDim3RegistersAndStackAndNameTheStub) {
  uint64_t stub = reinterpret_cast<uint64_t>(&unit_fake::scale_stub);
  // cudaLaunchKernel(func, dim3 grid, dim3 block, void** args, size_t shmem, stream):
  // grid is rsi = x | y << 32, rdx = z; block rcx, r8; args r9; shmem and stream on the stack
  auto e = call("cudaLaunchKernel", {stub, 4 | (2ull << 32), 3, 128 | (1ull << 32), 1, 0xa5});
  e.stack[0] = 256;
  e.stack[1] = 0x1234;
  feed(e);
  // cudaLaunchKernelExC(const cudaLaunchConfig_t*, func, args): the config is copied at entry
  auto ex = call("cudaLaunchKernelExC", {0x7000, stub, 0});
  uint32_t dims[6] = {7, 1, 1, 32, 2, 1};
  std::memcpy(ex.deref, dims, sizeof(dims));
  ex.deref[3] = 128;     // dynamicSmemBytes
  ex.deref[4] = 0x4321;  // stream
  feed(ex);
  feed(call("cudaLaunchKernel", {0x10, 1, 1, 1, 1, 0}));  // not code in this process
  std::string name = "unit_fake::scale_stub(float*, float, int)";
  EXPECT_EQ(rows(), (std::vector<std::string>{
                        "name=cudaLaunchKernel ret=0 stream=4660 gx=4 gy=2 gz=3 bx=128 by=1 "
                        "bz=1 shared=256 kernel=" + name + " addr=" + std::to_string(stub) + " ",
                        "name=cudaLaunchKernelExC ret=0 stream=17185 gx=7 gy=1 gz=1 bx=32 by=2 "
                        "bz=1 shared=128 kernel=" + name + " addr=" + std::to_string(stub) + " ",
                        "name=cudaLaunchKernel ret=0 stream=0 gx=1 gy=0 gz=1 bx=1 by=0 bz=1 "
                        "shared=0 kernel=unknown+0x10 addr=16 "}));
}

TEST_F(Decode, DriverLaunchesAreNamedByTheLookupThatReturnedTheirHandle) {
  // cuModuleGetFunction(&f, module, "name"): the BPF side writes a NAME record, then the call
  eacgm_name_event n = name_event("cuModuleGetFunction", 0xf00, "_Z6reduceIfEvPT_i");
  feed(n);
  auto lookup = call("cuModuleGetFunction", {0x7ff0, 0x1, 0x2});
  lookup.deref[0] = 0xf00;
  feed(lookup);
  // cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
  auto launch = call("cuLaunchKernel", {0xf00, 10, 20, 30, 1, 2});
  launch.stack[0] = 3, launch.stack[1] = 512, launch.stack[2] = 0x5678;
  feed(launch);
  // cuLaunchKernelEx(const CUlaunchConfig*, f, params, extra)
  auto ex = call("cuLaunchKernelEx", {0x7000, 0xf00});
  uint32_t words[7] = {5, 6, 7, 8, 9, 10, 1024};
  std::memcpy(ex.deref, words, sizeof(words));
  ex.deref[4] = 0x5678;
  feed(ex);
  // the same handle value in another process means nothing there
  auto other = launch;
  other.pid += 1;
  feed(other);
  std::string k = "kernel=void reduce<float>(float*, int) ";
  EXPECT_EQ(rows(), (std::vector<std::string>{
                        "name=cuModuleGetFunction ret=0 " + k + "addr=3840 ",
                        "name=cuLaunchKernel ret=0 stream=22136 gx=10 gy=20 gz=30 bx=1 by=2 bz=3 "
                        "shared=512 " + k + "addr=3840 ",
                        "name=cuLaunchKernelEx ret=0 stream=22136 gx=5 gy=6 gz=7 bx=8 by=9 bz=10 "
                        "shared=1024 " + k + "addr=3840 ",
                        "name=cuLaunchKernel ret=0 stream=22136 gx=10 gy=20 gz=30 bx=1 by=2 bz=3 "
                        "shared=512 kernel=unknown CUfunction 0xf00 addr=3840 "}));
}

TEST_F(Decode, RuntimeLaunchesOfACudaKernelHandleAreNamedByItsLookup) {
  // CUDA 12+: nvcc's stub calls cudaGetKernel (cuLibraryGetKernel inside: a NAME record), then
  // cudaLaunchKernel with the cudaKernel_t handle instead of its own address (an H100 with
  // CUDA 13 did; without a GPU the lookup fails and the stub's address goes)
  eacgm_name_event n = name_event("cuLibraryGetKernel", 0x55fed9de0120, "_Z16eacgm_check_axpyPfPKffi");
  feed(n);
  auto lookup = call("cuLibraryGetKernel", {0x7ff0, 0x1, 0x2});
  lookup.deref[0] = n.handle;
  feed(lookup);
  feed(call("cudaLaunchKernel", {n.handle, 1, 1, 1, 1, 0}));
  auto ex = call("cudaLaunchKernelExC", {0x7000, n.handle, 0});
  feed(ex);
  std::string k = "kernel=eacgm_check_axpy(float*, float const*, float, int) ";
  std::string addr = "addr=" + std::to_string(n.handle) + " ";
  std::vector<std::string> got = rows();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "name=cuLibraryGetKernel ret=0 " + k + addr);
  EXPECT_NE(got[1].find(k + addr), std::string::npos) << got[1];
  EXPECT_NE(got[2].find(k + addr), std::string::npos) << got[2];
}

TEST_F(Decode, AStubWithoutASymbolIsNamedByTheDriverLaunchInsideIt) {
  // PyTorch's wheels keep no symbols for their kernels' host stubs: the cuLaunchKernel the
  // runtime made inside cudaLaunchKernel (same thread, within its time) names it
  eacgm_name_event n = name_event("cuModuleGetFunction", 0xf00, "_Z6reduceIfEvPT_i");
  feed(n);
  auto inner = call("cuLaunchKernel", {0xf00, 1, 1, 1, 1, 1});
  inner.ts_ns = 1004;
  feed(inner);
  feed(call("cudaLaunchKernel", {0x10, 1, 1, 1, 1, 0}));  // 1000..1010: the driver's is inside
  auto later = call("cudaLaunchKernel", {0x10, 1, 1, 1, 1, 0});
  later.ts_ns = 2000;  // no driver launch inside this one
  feed(later);
  auto other_thread = call("cudaLaunchKernel", {0x10, 1, 1, 1, 1, 0});
  other_thread.tid += 1;
  feed(other_thread);
  std::vector<std::string> got = rows();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_NE(got[1].find("kernel=void reduce<float>(float*, int) "), std::string::npos) << got[1];
  EXPECT_NE(got[2].find("kernel=unknown+0x10 "), std::string::npos) << got[2];
  EXPECT_NE(got[3].find("kernel=unknown+0x10 "), std::string::npos) << got[3];
}

TEST_F(Decode, AKernelNameThatFilledItsRecordIsDemangledAsFarAsItGoes) {
  // templated kernels' mangled names run to thousands of bytes: the record keeps the first
  // EACGM_NAME_BYTES - 1, which no demangler takes whole
  std::string name = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_";
  while (name.size() < EACGM_NAME_BYTES - 1) name += "13BUnaryFunctorIfffNS0_";
  feed(name_event("cuLibraryGetKernel", 0xbeef, name));  // cut to EACGM_NAME_BYTES - 1
  feed(call("cuLaunchKernel", {0xbeef, 1, 1, 1, 1, 1}));
  std::vector<std::string> got = rows();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("kernel=at::native::vectorized_elementwise_kernel<...> "),
            std::string::npos) << got[0];
}

TEST_F(Decode, MalformedRecordsAreCountedNotDecoded) {
  auto bad_op = call("cudaMalloc", {0, 1});
  bad_op.op = uint32_t(cuda_ops().size());
  feed(bad_op);
  uint32_t unknown_kind[12] = {99};
  feed(unknown_kind);
  auto good = call("cudaDeviceSynchronize", {});
  decoder_->on_record(&good, sizeof(good) - 8);  // truncated
  decoder_->on_record(&good, 2);
  EXPECT_EQ(rows(), std::vector<std::string>{});
  EXPECT_EQ(decoder_->stats().malformed, 4u);
  EXPECT_EQ(decoder_->stats().calls, 0u);
}

}  // namespace
}  // namespace eacgm
