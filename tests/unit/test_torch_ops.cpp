// The torch layer's operator discovery: at::_ops symbols, schema names, pattern selection.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "probe/c10d_ops.h"
#include "probe/elf_symbols.h"
#include "probe/library_finder.h"
#include "probe/torch_ops.h"

namespace eacgm {
namespace {

TEST(TorchOps, RecognisesDispatcherCallSymbols) {
  EXPECT_EQ(aten_call_struct("_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE"),
            std::optional<std::string_view>("add_Tensor"));
  EXPECT_EQ(aten_call_struct("_ZN2at4_ops6linear4callERKNS_6TensorES4_RKN3c108optionalIS2_EE"),
            std::optional<std::string_view>("linear"));
  // redispatch entry points, other namespaces and truncated names are not operators' calls
  EXPECT_FALSE(aten_call_struct("_ZN2at4_ops6linear10redispatchEN3c1014DispatchKeySetE"));
  EXPECT_FALSE(aten_call_struct("_ZN2at6native6linearERKNS_6TensorE"));
  EXPECT_FALSE(aten_call_struct("_ZN2at4_ops99linear4callE"));
  EXPECT_FALSE(aten_call_struct("_ZN2at4_ops3bmm4callERKNS_6TensorES4_.cold"));
  EXPECT_FALSE(aten_call_struct("_ZN2at4_ops3bmm4callERKNS_6TensorES4_.constprop.0"));
  EXPECT_FALSE(aten_call_struct("_ZN2at4_ops"));
}

TEST(TorchOps, FilterMatchesNamesOverloadsAndTheDefaultSet) {
  TorchOpFilter f({"aten::linear", "softmax.int", "nll_*"});
  EXPECT_TRUE(f.matches("linear"));
  EXPECT_TRUE(f.matches("linear.out"));  // no '.' in the pattern: every overload
  EXPECT_TRUE(f.matches("softmax.int"));
  EXPECT_FALSE(f.matches("softmax.Dimname"));
  EXPECT_FALSE(f.matches("softmax"));
  EXPECT_TRUE(f.matches("nll_loss_nd"));
  EXPECT_FALSE(f.matches("linear_backward"));
  EXPECT_FALSE(f.matches("add.Tensor"));

  TorchOpFilter d({"default"});
  EXPECT_EQ(d.patterns(), default_torch_op_patterns());
  for (const char* op : {"addmm", "conv2d", "native_layer_norm", "softmax.int", "embedding",
                         "cross_entropy_loss", "_foreach_add_.List", "gelu_backward"})
    EXPECT_TRUE(d.matches(op)) << op;
  for (const char* op : {"add.Tensor", "mul.Tensor", "view", "t", "empty.memory_format"})
    EXPECT_FALSE(d.matches(op)) << op;
  EXPECT_TRUE(TorchOpFilter({"*"}).matches("empty.memory_format"));
}

// Debian's libtorch: schemas name the at::_ops structs, including ones whose schema string
// the linker stored as the tail of another (sin in asin).
TEST(TorchOps, NamesOperatorsFromTheLibrarysSchemas) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13";
  if (!std::filesystem::exists(lib))
    GTEST_SKIP() << lib << " is absent (python3-torch is not installed; scripts/setup.sh does)";
  auto names = aten_schema_names(lib);
  EXPECT_GT(names.size(), 2000u);
  EXPECT_EQ(names["add_Tensor"], "add.Tensor");
  EXPECT_EQ(names["linear"], "linear");
  EXPECT_EQ(names["softmax_int"], "softmax.int");
  EXPECT_EQ(names["native_layer_norm"], "native_layer_norm");
  EXPECT_EQ(names["sin"], "sin");
  EXPECT_EQ(names["_foreach_add__List"], "_foreach_add_.List");

  ElfSymbols elf = ElfSymbols::load(lib);
  TorchOps ops(TorchOpFilter({"linear", "addmm", "softmax.int"}));
  std::vector<ProbeSpec> specs = ops.probes_for(elf);
  std::set<std::string> found;
  for (const auto& s : specs) found.insert(std::string(ops.name(uint16_t(s.cookie))));
  EXPECT_TRUE(found.count("aten::linear"));
  EXPECT_TRUE(found.count("aten::addmm"));
  EXPECT_TRUE(found.count("aten::softmax.int"));
  EXPECT_FALSE(found.count("aten::softmax.Dimname"));
  for (const auto& s : specs) {
    EXPECT_GE(s.cookie, kTorchOpBase);
    EXPECT_NE(elf.find_function(s.symbol), nullptr) << s.symbol;
  }
  // the same operator found again (another copy of libtorch) keeps its id
  size_t before = ops.size();
  ops.probes_for(elf);
  EXPECT_EQ(ops.size(), before);
  EXPECT_TRUE(ops.name(uint16_t(kTorchOpBase + before)).empty());
}

TEST(TorchOps, LibraryNames) {
  EXPECT_TRUE(looks_like_torch_library("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13"));
  EXPECT_TRUE(looks_like_torch_library("/venv/site-packages/torch/lib/libtorch_cpu.so"));
  EXPECT_TRUE(looks_like_torch_library("/opt/libtorch/lib/libtorch.so"));
  EXPECT_FALSE(looks_like_torch_library("/venv/site-packages/torch/lib/libtorch_python.so"));
  EXPECT_FALSE(looks_like_torch_library("/usr/lib/libtorchaudio.so"));
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

TEST(C10dOps, EverySymbolIsInDebiansLibtorch) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13";
  if (!std::filesystem::exists(lib))
    GTEST_SKIP() << lib << " is absent (python3-torch is not installed; scripts/setup.sh does)";
  ElfSymbols elf = ElfSymbols::load(lib);
  for (const auto& op : c10d_ops()) EXPECT_NE(elf.find_function(op.symbol), nullptr) << op.name;
  std::string version;
  auto layout = torch_layout_for(lib, &version);
  ASSERT_TRUE(layout);
  EXPECT_EQ(version, "1.13.0");  // the library file's version (Debian package 1.13.1)
  EXPECT_EQ(layout->numel_offset, 168u);
}

TEST(C10dOps, LayoutsOnlyForKnownVersions) {
  std::string version;
  EXPECT_FALSE(torch_layout_for("/nonexistent/libtorch_cpu.so.2.3.0", &version));
  EXPECT_EQ(version, "2.3.0");
  EXPECT_TRUE(torch_layout_for("/nonexistent/libtorch_cpu.so.1.13", &version));
  EXPECT_FALSE(torch_layout_for("/nonexistent/lib/libtorch_cpu.so", &version));
  EXPECT_EQ(version, "");
  EXPECT_EQ(scalar_type_name(6), "float32");
  EXPECT_EQ(scalar_type_name(15), "bfloat16");
  EXPECT_EQ(scalar_type_name(99), "unknown");
}

}  // namespace
}  // namespace eacgm
