// --layers parsing and the line that says which layers traced something and why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/agent.h"
#include "pipeline/layers.h"
#include "probe/call_tracer.h"
#include "probe/library_finder.h"
#include "store/sink.h"
#include "util/error.h"

namespace eacgm {
namespace {

TEST(LayerChoice, AutoArmsEveryLayerButPythonCalls) {
  LayerChoice c = LayerChoice::parse({"auto"});
  EXPECT_TRUE(c.automatic);
  for (const char* l : {"cuda", "comm", "torch", "gpu", "host"}) EXPECT_TRUE(c.armed(l)) << l;
  EXPECT_FALSE(c.armed("python"));
  EXPECT_FALSE(c.python_calls());
  EXPECT_TRUE(c.python_stacks());
  EXPECT_EQ(c.text(), "auto");
}

TEST(LayerChoice, AutoPlusALayerAddsIt) {
  LayerChoice c = LayerChoice::parse({"gpu", "auto"});
  EXPECT_TRUE(c.armed("gpu"));
  EXPECT_TRUE(c.armed("torch"));
  EXPECT_EQ(c.text(), "auto,gpu");
}

// Naming the python layer reads stacks; only --python-calls puts the probe on every call.
TEST(LayerChoice, PythonCallsOnlyWhenAsked) {
  LayerChoice named = LayerChoice::parse({"cuda", "python"});
  EXPECT_TRUE(named.python_stacks());
  EXPECT_FALSE(named.python_calls());
  EXPECT_FALSE(named.armed("python"));
  LayerChoice calls = LayerChoice::parse({"cuda"}, true);
  EXPECT_TRUE(calls.python_stacks());
  EXPECT_TRUE(calls.python_calls());
  EXPECT_TRUE(calls.armed("python"));
  EXPECT_FALSE(calls.armed("torch"));
  ActiveLayers a;
  EXPECT_EQ(a.describe(named), "layers (cuda,python): none; not used by the traced processes: "
                               "cuda, python-stacks");
  EXPECT_EQ(a.describe(calls), "layers (cuda): none; not used by the traced processes: cuda, "
                               "python");
}

TEST(LayerChoice, NamedLayersAreAllThereIs) {
  LayerChoice c = LayerChoice::parse({"host", "cuda"});
  EXPECT_FALSE(c.automatic);
  EXPECT_TRUE(c.armed("cuda"));
  EXPECT_TRUE(c.armed("host"));
  EXPECT_FALSE(c.armed("torch"));
  EXPECT_FALSE(c.armed("gpu"));
  EXPECT_FALSE(c.python_stacks());
  EXPECT_EQ(c.text(), "cuda,host");
}

TEST(LayerChoice, UnknownOrEmptyIsAUsageError) {
  EXPECT_THROW(LayerChoice::parse({"cuda", "bogus"}), UsageError);
  EXPECT_THROW(LayerChoice::parse({}), UsageError);
  try {
    LayerChoice::parse({"Auto"});
    ADD_FAILURE() << "Auto was accepted";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown layer 'Auto' (choose from auto, cuda, comm, python, torch, gpu, gputime, "
                 "host; -LAYER leaves one out of auto)");
  }
}

TEST(LayerChoice, MinusLayerLeavesItOutOfAuto) {
  LayerChoice c = LayerChoice::parse({"auto", "-gputime", "-python"});
  EXPECT_TRUE(c.armed("cuda"));
  EXPECT_FALSE(c.armed("gputime"));
  EXPECT_FALSE(c.python_stacks());
  EXPECT_EQ(c.text(), "auto,-python,-gputime");
  ActiveLayers a;
  a.on("cuda", "libcudart.so, pid 7");
  EXPECT_EQ(a.describe(c), "layers (auto,-python,-gputime): cuda (libcudart.so, pid 7); not used "
                           "by the traced processes: comm, torch, gpu, host");
  EXPECT_THROW(LayerChoice::parse({"cuda", "-gputime"}), UsageError);  // nothing to leave out of
  EXPECT_THROW(LayerChoice::parse({"auto", "cuda", "-cuda"}), UsageError);
  EXPECT_THROW(LayerChoice::parse({"auto", "-auto"}), UsageError);
  EXPECT_THROW(LayerChoice::parse({"auto", "-bogus"}), UsageError);
}

TEST(ActiveLayers, FirstReasonStaysAndOffIsOverriddenByOn) {
  LayerChoice c = LayerChoice::parse({"auto"});
  ActiveLayers a;
  a.on("host", "always");
  a.on("torch", "libtorch_cpu.so, pid 7");
  a.on("torch", "libtorch_cpu.so, pid 8");
  a.off("gpu", "no NVML");
  a.off("comm", "was off");
  a.on("comm", "libtorch_cpu.so, pid 7");
  EXPECT_EQ(a.names(), "comm,torch,host");
  EXPECT_EQ(a.describe(c),
            "layers (auto): comm (libtorch_cpu.so, pid 7), torch (libtorch_cpu.so, pid 7), host "
            "(always); not used by the traced processes: cuda, python-stacks; off: gpu (no NVML)");
}

// Why GPU time is off: the first reason given stays (record's own guess at the end does not
// replace a variable another tool held); the layer's coming on drops it.
TEST(ActiveLayers, GpuTimeOffSaysItsFirstReason) {
  LayerChoice c = LayerChoice::parse({"auto"});
  ActiveLayers a;
  a.on("cuda", "libcudart.so.13, pid 7");
  a.off("gputime", "CUDA_INJECTION64_PATH is already set");
  a.off("gputime", "no NVIDIA driver on this machine");
  EXPECT_NE(a.describe(c).find("off: gputime (CUDA_INJECTION64_PATH is already set)"),
            std::string::npos)
      << a.describe(c);
  a.on("gputime", "libeacgm_cupti.so, pid 7");
  EXPECT_EQ(a.describe(c).find("off:"), std::string::npos) << a.describe(c);
}

// A machine has an NVIDIA driver where its /proc or /dev shows one (a container is given
// /dev/nvidiactl).
TEST(GpuDriver, SaidMissingOnlyWithoutTheDriversFiles) {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("eacgm-driver-" + std::to_string(getpid()));
  fs::create_directories(root / "proc/driver/nvidia");
  fs::create_directories(root / "dev");
  EXPECT_NE(no_gpu_driver(root.string()).find("no NVIDIA driver"), std::string::npos);
  std::ofstream(root / "dev/nvidiactl") << "";
  EXPECT_EQ(no_gpu_driver(root.string()), "");
  fs::remove(root / "dev/nvidiactl");
  std::ofstream(root / "proc/driver/nvidia/version") << "NVRM version: 580.95\n";
  EXPECT_EQ(no_gpu_driver(root.string()), "");
  fs::remove_all(root);
}

TEST(ActiveLayers, NamedLayersListOnlyThemselves) {
  LayerChoice c = LayerChoice::parse({"cuda"});
  ActiveLayers a;
  EXPECT_EQ(a.describe(c), "layers (cuda): none; not used by the traced processes: cuda");
}

// The fan-out hands each row to every sink, in order, and reports the first sink's error.
TEST(SinkFanout, EverySinkSeesEveryRowAndErrorsSurface) {
  struct Counting : Sink {
    int cuda = 0, meta = 0, flushes = 0;
    std::string failure;
    void add(const CudaCallRow&) override { ++cuda; }
    void set_meta(std::string, std::string) override { ++meta; }
    void flush() override { ++flushes; }
    std::string error() const override { return failure; }
  } a, b;
  SinkFanout fan;
  fan.attach(a);
  fan.attach(b);
  fan.add(CudaCallRow{});
  fan.add(TorchCallRow{});  // neither keeps torch rows: the default ignores them
  fan.set_meta("k", "v");
  fan.flush();
  EXPECT_EQ(a.cuda + b.cuda, 2);
  EXPECT_EQ(a.meta + b.meta, 2);
  EXPECT_EQ(a.flushes + b.flushes, 2);
  EXPECT_EQ(fan.error(), "");
  b.failure = "disk full";
  EXPECT_EQ(fan.error(), "disk full");
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

TEST(ParseListen, HostAndPortOrAClearError) {
  ListenAddress a = parse_listen("127.0.0.1:9464");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9464);
  ListenAddress v6 = parse_listen("[::1]:9000");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 9000);
  for (const char* bad : {"9464", ":9464", "localhost:", "localhost:0", "localhost:65536",
                          "localhost:94x", "localhost:-1"})
    EXPECT_THROW(parse_listen(bad), UsageError) << bad;
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// The one line a refused load's error gives: the program and the verifier's last word before its
// statistics, from libbpf's log as this kernel (6.18.44) wrote it for a refused stack walk and for
// a walk it gave up on.
TEST(VerifierReason, TheProgramAndTheVerifiersLastWord) {
  const std::string stack =
      "libbpf: prog 'call_entry': BPF program load failed: Permission denied\n"
      "libbpf: prog 'call_entry': -- BEGIN PROG LOAD LOG --\n"
      "Func#5 ('py_register_code') is safe for any args that match its prototype\n"
      "combined stack size of 4 calls is 528. Too large\n"
      "processed 198337 insns (limit 1000000) max_states_per_insn 64 total_states 5658 "
      "peak_states 1110 mark_read 0\n"
      "-- END PROG LOAD LOG --\n"
      "libbpf: prog 'call_entry': failed to load: -13\n"
      "libbpf: failed to load object 'calls_bpf'\n";
  EXPECT_EQ(verifier_reason(stack),
            "program call_entry: combined stack size of 4 calls is 528. Too large");
  const std::string big =
      "libbpf: prog 'call_entry': BPF program load failed: Argument list too long\n"
      "libbpf: prog 'call_entry': -- BEGIN PROG LOAD LOG --\n"
      "1515: (c7) r2 s>>= 32\n"
      "BPF program is too large. Processed 1000001 insn\n"
      "processed 1000001 insns (limit 1000000) max_states_per_insn 48 total_states 26906\n"
      "-- END PROG LOAD LOG --\n";
  EXPECT_EQ(verifier_reason(big),
            "program call_entry: BPF program is too large. Processed 1000001 insn");
  EXPECT_EQ(verifier_reason(""), "");
  EXPECT_EQ(verifier_reason("libbpf: failed to load object 'calls_bpf'\n"), "");
  // a line of any length is cut, not copied whole into a one-line error
  std::string huge = "-- BEGIN PROG LOAD LOG --\n" + std::string(5000, 'x') + "\n-- END PROG LOAD LOG --\n";
  EXPECT_LE(verifier_reason(huge).size(), 210u);
}

}  // namespace
}  // namespace eacgm
