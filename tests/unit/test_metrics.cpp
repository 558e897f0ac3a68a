// The agent's metrics sink on its own: the collective counters of a node's ranks, as /metrics
// shows them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "export/kernel_name.h"
#include "export/metrics.h"
#include "report/collectives.h"
#include "store/rows.h"

namespace eacgm {
namespace {

constexpr uint64_t ms = 1'000'000;

// The value of the one series of FAMILY whose labels include LABEL, if /metrics has it.
std::optional<double> series_value(const std::string& text, const std::string& family,
                                   const std::string& label) {
  std::istringstream in(text);
  std::optional<double> found;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) != 0 || line.find(label) == std::string::npos) continue;
    EXPECT_FALSE(found) << "two series of " << family << " with " << label;
    found = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return found;
}

// One instance of a 2-rank collective where rank 1 joined WAIT_NS after rank 0.
CollectiveMatcher::Instance instance(uint64_t t, uint64_t wait_ns) {
  CollectiveMatcher::Instance inst;
  RankCall r0, r1;
  r0.rank = 0, r0.pid = 100, r0.ts = t, r0.end = t + wait_ns + ms;
  r1.rank = 1, r1.pid = 101, r1.ts = t + wait_ns, r1.end = t + wait_ns + ms;
  inst.calls = {r0, r1};
  PeerWait w0, w1;
  w0.wait_ns = wait_ns, w0.last_rank = 1, w0.last_pid = 101;
  w1.wait_ns = 0, w1.last_rank = 1, w1.last_pid = 101;
  inst.waits = {w0, w1};
  inst.all_ranks = true;
  return inst;
}

TEST(MetricsSink, EveryRankHasItsStragglerCountersFromItsFirstInstanceAtZero) {
  MetricsSink m("node-a");
  m.add_instance("gloo:all_reduce", instance(1'000 * ms, 30 * ms));
  const std::string text = m.text();
  // Rank 0 never joined last: its counters exist at 0, so that its first late join is an
  // increase that rate() and the straggler alert see (a counter born at 1 is not).
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total", "rank=\"0\""), 0.0) << text;
  EXPECT_EQ(series_value(text, "eacgm_collective_straggling_seconds_total", "rank=\"0\""), 0.0);
  // Rank 1 joined last, 30 ms late, with nothing else to explain it: all of it is straggling.
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total", "rank=\"1\""), 1.0);
  EXPECT_NEAR(
      series_value(text, "eacgm_collective_straggling_seconds_total", "rank=\"1\"").value_or(NAN),
      0.030, 1e-9);
  EXPECT_NEAR(
      series_value(text, "eacgm_collective_peer_wait_seconds_total", "rank=\"0\"").value_or(NAN),
      0.030, 1e-9);

  m.add_instance("gloo:all_reduce", instance(2'000 * ms, 10 * ms));
  const std::string later = m.text();
  EXPECT_EQ(series_value(later, "eacgm_collective_last_joined_total", "rank=\"0\""), 0.0);
  EXPECT_EQ(series_value(later, "eacgm_collective_last_joined_total", "rank=\"1\""), 2.0);
  EXPECT_NEAR(
      series_value(later, "eacgm_collective_straggling_seconds_total", "rank=\"1\"").value_or(NAN),
      0.040, 1e-9);
}

// How many series of FAMILY /metrics has whose labels include LABEL.
size_t series_count(const std::string& text, const std::string& family, const std::string& label) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    n += line.rfind(family + "{", 0) == 0 && line.find(label) != std::string::npos;
  return n;
}

CudaCallRow cuda_call(uint32_t pid) {
  CudaCallRow r;
  r.pid = pid, r.tid = pid, r.dur_ns = 5 * 1000, r.name = "cudaMalloc", r.bytes = 4096;
  return r;
}

void start(MetricsSink& m, uint32_t pid, const std::string& name) {
  ProcessRow p;
  p.pid = pid, p.name = name;
  m.add(p);
}

void exit_(MetricsSink& m, uint32_t pid) {
  ProcessExitRow e;
  e.pid = pid;
  m.add(e);
}

constexpr uint64_t s = 1'000'000'000;
constexpr uint64_t kLinger = MetricsSink::kSeriesLingerNs;

// What the detector did not report is counted by reason, every reason at 0 from the start, and
// the counters follow the detector's running totals (set twice a second) without going back.
TEST(MetricsSink, DismissedAnomaliesAreCountedByReasonFromZero) {
  MetricsSink m("node-a");
  auto value = [&](const char* reason) {
    return series_value(m.text(), "eacgm_detector_dismissed_total",
                        std::string("reason=\"") + reason + "\"");
  };
  for (const char* reason : {"no_burst", "lone_window", "brief_slowdown"})
    EXPECT_EQ(value(reason), 0.0) << reason;
  m.set_dismissed({5, 1, 3});
  m.set_dismissed({7, 1, 3});
  EXPECT_EQ(value("no_burst"), 7.0);
  EXPECT_EQ(value("lone_window"), 1.0);
  EXPECT_EQ(value("brief_slowdown"), 3.0);
  m.set_dismissed({2, 1, 4});  // (a total that went back, as no detector's does: no decrease)
  EXPECT_EQ(value("no_burst"), 7.0);
  EXPECT_EQ(value("brief_slowdown"), 4.0);
}

TEST(MetricsSink, AFinishedJobsSeriesGoAfterTheLingerAndNotBefore) {
  MetricsSink m("node-a");
  start(m, 100, "train");
  start(m, 101, "train_r1");
  m.add(cuda_call(100));
  m.add_instance("gloo:all_reduce", instance(1'000 * ms, 30 * ms));
  m.expire_series(10 * s);
  std::string text = m.text();
  ASSERT_EQ(series_count(text, "eacgm_calls_total", "process=\"train\""), 1u) << text;
  ASSERT_EQ(series_count(text, "eacgm_collective_peer_wait_seconds_total", "rank="), 2u);
  const size_t tracked = m.process_series();
  // calls, errors, bytes and the duration histogram; 3 collective counters per rank
  EXPECT_EQ(tracked, 4u + 6u);

  exit_(m, 100);
  exit_(m, 101);
  m.expire_series(20 * s);  // the exits are seen here: the linger starts
  m.expire_series(20 * s + kLinger - 1);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_calls_total", "process=\"train\""), 1u)
      << "removed before its last scrapes could read it";
  EXPECT_EQ(series_count(text, "eacgm_collective_last_joined_total", "rank="), 2u);
  EXPECT_EQ(m.process_series(), tracked);

  m.expire_series(20 * s + kLinger);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_calls_total", "process="), 0u) << text;
  EXPECT_EQ(series_count(text, "eacgm_call_duration_seconds_count", "process="), 0u);
  EXPECT_EQ(series_count(text, "eacgm_collective_peer_wait_seconds_total", "rank="), 0u);
  EXPECT_EQ(series_count(text, "eacgm_collective_straggling_seconds_total", "rank="), 0u);
  EXPECT_EQ(m.process_series(), 0u);
  EXPECT_EQ(m.traced_processes(), 0u);
}

// A collective instance is matched once every rank joined it, which can be after a rank's
// exit row (its last all_reduce, then its exit, then the matcher): the instance counts under
// the rank's own labels (its job, read while it lived), and the dead pid does not keep the
// series for ever (it was the leak: a pid that never exits again held them open).
TEST(MetricsSink, AnInstanceMatchedAfterARanksExitCountsAndStillExpires) {
  MetricsSink m("node-a");
  int identified = 0;
  m.identify = [&](uint32_t pid) {
    ++identified;
    JobIdentity j;
    j.job = "job7", j.rank = std::to_string(pid - 100);
    return j;
  };
  start(m, 100, "train");
  start(m, 101, "train");
  m.add_instance("gloo:all_reduce", instance(1'000 * ms, 30 * ms));
  exit_(m, 100);
  exit_(m, 101);
  m.add_instance("gloo:all_reduce", instance(2'000 * ms, 10 * ms));
  std::string text = m.text();
  EXPECT_EQ(identified, 2) << "a dead pid's identity read again (from a /proc that is gone)";
  EXPECT_EQ(series_count(text, "eacgm_collective_last_joined_total", "rank="), 2u) << text;
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total",
                         "job_id=\"job7\",op=\"gloo:all_reduce\",rank=\"1\""),
            2.0)
      << text;
  m.expire_series(20 * s);
  m.expire_series(20 * s + kLinger);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_collective_last_joined_total", "rank="), 0u) << text;
  EXPECT_EQ(m.process_series(), 0u);
}

TEST(MetricsSink, ASeriesStaysWhileAnyProcessWithItsLabelsLives) {
  MetricsSink m("node-a");
  start(m, 200, "worker");
  start(m, 201, "worker");
  m.add(cuda_call(200));
  m.add(cuda_call(201));
  exit_(m, 200);
  m.expire_series(0);
  m.expire_series(10 * kLinger);
  std::string text = m.text();
  EXPECT_EQ(series_value(text, "eacgm_calls_total", "process=\"worker\""), 2.0) << text;

  // 201 exits, and a process with the same labels starts within the linger: it goes on
  // counting in the same series, which then stays while it lives.
  exit_(m, 201);
  m.expire_series(20 * kLinger);
  start(m, 202, "worker");
  m.add(cuda_call(202));
  m.expire_series(22 * kLinger);
  text = m.text();
  EXPECT_EQ(series_value(text, "eacgm_calls_total", "process=\"worker\""), 3.0) << text;

  // A process that exec's another program leaves its old name's series to expire.
  start(m, 202, "python3");
  m.add(cuda_call(202));
  m.expire_series(23 * kLinger);
  m.expire_series(24 * kLinger);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_calls_total", "process=\"worker\""), 0u) << text;
  EXPECT_EQ(series_value(text, "eacgm_calls_total", "process=\"python3\""), 1.0);
}

// GPU time (the gputime layer): kernels' GPU seconds and counts per process and device; copies
// and launches count in neither, and no kernel name becomes a label.
TEST(MetricsSink, KernelsCountTheirGpuTimePerProcessAndDevice) {
  MetricsSink m("node-a");
  start(m, 300, "trainer");
  auto kernel = [](uint32_t device, uint64_t dur_ns) {
    GpuActivityRow r;
    r.pid = 300, r.kind = "kernel", r.name = "sgemm_128x64", r.device = device, r.dur_ns = dur_ns;
    return r;
  };
  m.add(kernel(0, 2 * ms));
  m.add(kernel(0, 3 * ms));
  m.add(kernel(1, 7 * ms));
  GpuActivityRow copy = kernel(0, 50 * ms);
  copy.kind = "memcpy";
  m.add(copy);
  GpuActivityRow launch = kernel(0, 1 * ms);
  launch.kind = "launch";
  m.add(launch);
  std::string text = m.text();
  EXPECT_DOUBLE_EQ(*series_value(text, "eacgm_gpu_kernel_seconds_total", "device=\"0\""), 0.005)
      << text;
  EXPECT_DOUBLE_EQ(*series_value(text, "eacgm_gpu_kernel_seconds_total", "device=\"1\""), 0.007);
  EXPECT_EQ(*series_value(text, "eacgm_gpu_kernels_total", "device=\"0\""), 2.0);
  EXPECT_EQ(text.find("sgemm"), std::string::npos) << "a kernel name as a label";
  EXPECT_EQ(text.find("kernel=\""), std::string::npos) << "--gpu-kernel-names is off by default";
}

GpuActivityRow kernel_run(uint32_t pid, std::string_view name, uint64_t ts_ns, uint64_t dur_ns,
                          uint32_t device = 0) {
  GpuActivityRow r;
  r.pid = pid, r.kind = "kernel", r.name = name, r.ts_ns = ts_ns, r.dur_ns = dur_ns;
  r.device = device;
  return r;
}

// The kernel label values of the GPU seconds series of DEVICE, with their values.
std::map<std::string, double> kernel_seconds(const std::string& text, uint32_t device) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  const std::string dev = "device=\"" + std::to_string(device) + "\"";
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find("kernel=\"");
    if (line.rfind("eacgm_gpu_kernel_seconds_total{", 0) != 0 || line.find(dev) == line.npos ||
        at == line.npos)
      continue;
    at += 8;
    out[line.substr(at, line.find('"', at) - at)] = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

// With --gpu-kernel-names 2: after the first second (here) of a process's kernels, the two
// names with the most GPU time get a label, the others and that first second count as "other";
// a name chosen keeps its series, and no device ever has more than K + 1 kernel values.
TEST(MetricsSink, KernelNamesAreTheTopKByGpuTimeThenOther) {
  MetricsSink m("node-a");
  m.set_kernel_names(2, 1 * s);
  start(m, 300, "trainer");
  const char* gemm =
      "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_tn>"
      "(cutlass_80_tensorop_s1688gemm_128x128_tn::Params)";
  const char* add =
      "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add"
      "<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
      "at::detail::Array<char*, 3>)";
  const char* fill =
      "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor"
      "<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
      "at::detail::Array<char*, 1>)";
  const char* softmax =
      "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>"
      "(float*, float const*, int)";
  const char* nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
  // the first second: set-up first (fills: the same short name as the adds), then steps
  m.add(kernel_run(300, fill, 0, 1 * ms));
  m.add(kernel_run(300, softmax, 100 * ms, 2 * ms));
  m.add(kernel_run(300, nccl, 200 * ms, 3 * ms));
  m.add(kernel_run(300, gemm, 300 * ms, 4 * ms));
  m.add(kernel_run(300, add, 400 * ms, 3 * ms));  // elementwise: 4 ms in all
  std::string text = m.text();
  auto dev0 = kernel_seconds(text, 0);
  ASSERT_EQ(dev0.size(), 1u) << text;
  EXPECT_NEAR(dev0["other"], 0.013, 1e-12);

  // the choice, at the first kernel a second after the first: gemm (10 ms with it) and the
  // elementwise kernels (4 ms), before NCCL's (3 ms) and softmax (2 ms)
  m.add(kernel_run(300, gemm, 1 * s, 6 * ms));
  m.add(kernel_run(300, nccl, 1 * s + 10 * ms, 5 * ms));
  m.add(kernel_run(300, add, 1 * s + 20 * ms, 7 * ms));
  m.add(kernel_run(300, softmax, 1 * s + 30 * ms, 8 * ms));
  m.add(kernel_run(300, "triton_poi_fused_add_0", 1 * s + 40 * ms, 9 * ms));  // new: other
  m.add(kernel_run(300, gemm, 1 * s + 50 * ms, 10 * ms, 1));                  // another device
  m.add(kernel_run(300, nccl, 1 * s + 60 * ms, 11 * ms, 1));
  text = m.text();
  dev0 = kernel_seconds(text, 0);
  ASSERT_EQ(dev0.size(), 3u) << text;
  EXPECT_NEAR(dev0["cutlass_80_tensorop_s1688gemm_128x128_tn"], 0.006, 1e-12);
  EXPECT_NEAR(dev0["vectorized_elementwise_kernel"], 0.007, 1e-12);
  EXPECT_NEAR(dev0["other"], 0.013 + 0.005 + 0.008 + 0.009, 1e-12);
  auto dev1 = kernel_seconds(text, 1);
  ASSERT_EQ(dev1.size(), 2u) << text;
  EXPECT_NEAR(dev1["cutlass_80_tensorop_s1688gemm_128x128_tn"], 0.010, 1e-12);
  EXPECT_NEAR(dev1["other"], 0.011, 1e-12);
  EXPECT_EQ(series_value(text, "eacgm_gpu_kernels_total", "device=\"0\",kernel=\"other\""), 8.0);
  EXPECT_EQ(text.find("cunn_SoftMaxForward"), std::string::npos) << "a third name";
}

// Fewer names than K in the first second leave slots that later names take, first come; the
// choice goes with the process's series, and the next process with its labels chooses anew.
TEST(MetricsSink, KernelNameSlotsLeftOverGoFirstComeAndTheChoiceExpiresWithItsSeries) {
  MetricsSink m("node-a");
  m.set_kernel_names(2, 1 * s);
  start(m, 300, "trainer");
  m.add(kernel_run(300, "gemm_a", 0, 1 * ms));
  m.add(kernel_run(300, "gemm_a", 2 * s, 1 * ms));  // chosen: gemm_a, one slot left
  m.add(kernel_run(300, "reduce_b", 2 * s, 1 * ms));
  m.add(kernel_run(300, "softmax_c", 2 * s, 1 * ms));
  std::string text = m.text();
  auto dev0 = kernel_seconds(text, 0);
  EXPECT_EQ(dev0.size(), 3u) << text;
  EXPECT_TRUE(dev0.contains("reduce_b") && dev0.contains("other")) << text;
  EXPECT_NEAR(dev0["other"], 0.002, 1e-12) << "softmax_c, and gemm_a before the choice";

  exit_(m, 300);
  m.expire_series(10 * s);
  m.expire_series(10 * s + kLinger);
  EXPECT_EQ(m.text().find("eacgm_gpu_kernel_seconds_total{"), std::string::npos);
  EXPECT_EQ(m.process_series(), 0u);
  start(m, 301, "trainer");
  m.add(kernel_run(301, "softmax_c", 100 * s, 1 * ms));
  m.add(kernel_run(301, "softmax_c", 102 * s, 1 * ms));
  text = m.text();
  dev0 = kernel_seconds(text, 0);
  ASSERT_EQ(dev0.size(), 2u) << text;
  EXPECT_NEAR(dev0["softmax_c"], 0.001, 1e-12) << "the finished process's choice was kept";
  EXPECT_NEAR(dev0["other"], 0.001, 1e-12);
}

TEST(KernelShortName, IsTheFunctionsOwnNameWithoutTemplatesNamespacesOrArguments) {
  EXPECT_EQ(short_kernel_name("void at::native::vectorized_elementwise_kernel<4, "
                              "at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, "
                              "at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"),
            "vectorized_elementwise_kernel");
  EXPECT_EQ(short_kernel_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, "
                              "unsigned int, 1, 128, 1>(float*, at::native::(anonymous "
                              "namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>, "
                              "int, unsigned int)"),
            "CatArrayBatchedCopy");
  EXPECT_EQ(short_kernel_name("void at::native::elementwise_kernel<128, 2, "
                              "at::native::gpu_kernel_impl<at::native::AbsFunctor<float> "
                              ">(at::TensorIteratorBase&, at::native::AbsFunctor<float> "
                              "const&)::{lambda(int)#1}>(int, "
                              "at::native::gpu_kernel_impl<at::native::AbsFunctor<float> "
                              ">(at::TensorIteratorBase&, at::native::AbsFunctor<float> "
                              "const&)::{lambda(int)#1})"),
            "elementwise_kernel");
  EXPECT_EQ(short_kernel_name("ampere_sgemm_128x64_tn"), "ampere_sgemm_128x64_tn");
  EXPECT_EQ(short_kernel_name("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
  EXPECT_EQ(short_kernel_name(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  // mangled (a name the decoder could not demangle reaches the sink as it came)
  EXPECT_EQ(
      short_kernel_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE"
                        "NS_6detail5ArrayIPcLi1EEEEEviT0_T1_"),
      "vectorized_elementwise_kernel");
  // cut short (decoder: demangle_truncated)
  EXPECT_EQ(short_kernel_name("at::native::reduce_kernel<...>"), "reduce_kernel");
  EXPECT_EQ(short_kernel_name("_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_i"),
            "elementwise_kernel");
  EXPECT_EQ(short_kernel_name("at::native::..."), "at::native::...");
  // cutlass's kernels (cuBLAS's GEMMs) are cutlass::Kernel<Op>: named by Op
  EXPECT_EQ(short_kernel_name("_ZN7cutlass7Kernel2I62cutlass_80_wmma_tensorop_s161616gemm_f16_"
                              "16x16_128x2_tn_align8EEvNT_6ParamsE"),
            "cutlass_80_wmma_tensorop_s161616gemm_f16_16x16_128x2_tn_align8");
  EXPECT_EQ(short_kernel_name("void cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<"
                              "cutlass::gemm::GemmShape<128, 128, 32>, float> >(cutlass::gemm::"
                              "kernel::GemmUniversal<cutlass::gemm::GemmShape<128, 128, 32>, "
                              "float>::Params)"),
            "GemmUniversal");
  EXPECT_EQ(short_kernel_name("cutlass::Kernel<...>"), "Kernel");
}

}  // namespace
}  // namespace eacgm
