// Tests for demangle(): expected strings are what `c++filt` prints for the same symbols.
#include "probe/demangle.h"

#include <gtest/gtest.h>

namespace eacgm {
namespace {

TEST(Demangle, CNameIsUnchanged) {
  EXPECT_EQ(demangle("cudaMalloc"), "cudaMalloc");
  EXPECT_EQ(demangle("cudaLaunchKernel"), "cudaLaunchKernel");
  EXPECT_EQ(demangle(""), "");
}

TEST(Demangle, TorchOperator) {
  EXPECT_EQ(demangle("_ZN2at4_ops5addmm4callERKNS_6TensorES4_S4_RKN3c106ScalarES8_"),
            "at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&, "
            "c10::Scalar const&, c10::Scalar const&)");
}

TEST(Demangle, KernelHostStub) {
  EXPECT_EQ(demangle("_Z6vecAddPfS_S_i"), "vecAdd(float*, float*, float*, int)");
}

TEST(Demangle, CompilerCloneSuffix) {
  EXPECT_EQ(demangle("_Z3foov.cold"), "foo() [clone .cold]");
}

TEST(Demangle, VersionSuffixIsStrippedBeforeDemangling) {
  EXPECT_EQ(demangle("_ZN7fixture5scaleEid@@VER_1"), "fixture::scale(int, double)");
  EXPECT_EQ(demangle("_ZN7fixture5scaleEid@VER_1"), "fixture::scale(int, double)");
}

TEST(Demangle, InvalidMangledNameIsUnchanged) {
  EXPECT_EQ(demangle("_Zinvalid"), "_Zinvalid");
  EXPECT_EQ(demangle("_Z"), "_Z");
  EXPECT_EQ(demangle("_Zinvalid@@VER_1"), "_Zinvalid@@VER_1");
}

TEST(Demangle, AcceptsViewIntoLargerBuffer) {
  // The view is not NUL-terminated where it ends: demangle must not read past it.
  const std::string buffer = "_Z6vecAddPfS_S_iTRAILING";
  EXPECT_EQ(demangle(std::string_view(buffer).substr(0, 16)),
            "vecAdd(float*, float*, float*, int)");
}

// Kernel names as an H100 run's lookups cut them at 128 bytes (before the buffer grew): the
// leading qualified name survives, marked as cut.
TEST(Demangle, TruncatedKernelNamesKeepTheirLeadingName) {
  EXPECT_EQ(demangle_truncated("_ZN2at6native13reduce_kernelILi128ELi4ENS0_8ReduceOpIfNS0_14func_"
                               "wrapper_tIfZNS0_11sum_functorIfffEclERNS_14TensorIteratorEEUlf"),
            "at::native::reduce_kernel<...>");
  EXPECT_EQ(demangle_truncated("_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada"
                               "8a39layer_norm_grad_input_kernel_vectorizedIffLb0EEEvPKT_S5_P"),
            "at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<...>");
  EXPECT_EQ(demangle_truncated("_ZN50_GLOBAL__N__fa15d16e_17_RangeFactories_cu_38772b0829elementwis"
                               "e_kernel_with_indexIiZZZN2at6native15arange_cuda_outERKN3c10"),
            "(anonymous namespace)::elementwise_kernel_with_index<...>");
  EXPECT_EQ(demangle_truncated("_Z16eacgm_check_axpyPfPK"), "eacgm_check_axpy(...)");
  EXPECT_EQ(demangle_truncated("_ZNSt6vectorIiSaIiEE9push_"), "std::vector<...>");
  // cut inside the first name: nothing to show but the symbol itself
  EXPECT_EQ(demangle_truncated("_ZN2at6nat"), "at::...");
  EXPECT_EQ(demangle_truncated("_ZN20at"), "_ZN20at");
  // whole names still demangle whole; plain names pass through
  EXPECT_EQ(demangle_truncated("_Z6vecAddPfS_S_i"), "vecAdd(float*, float*, float*, int)");
  EXPECT_EQ(demangle_truncated("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
}

}  // namespace
}  // namespace eacgm
