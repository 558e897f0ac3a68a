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

}  // namespace
}  // namespace eacgm
