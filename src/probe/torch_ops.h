// The torch layer's probe points: PyTorch operators through the dispatcher's exported
// `at::_ops::<op>::call` functions in libtorch_cpu, named `aten::<op>[.<overload>]`.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace eacgm {

class ElfSymbols;
struct ProbeSpec;

// Op ids of the torch layer start here (cuda below kCommOpBase, comm from kCommOpBase): they
// travel in the 16-bit op field of the cookie, assigned as operators are found.
constexpr uint16_t kTorchOpBase = 2000;
constexpr uint16_t kTorchOpLimit = 0xffff;

// "add_Tensor" for the mangled `at::_ops::add_Tensor::call(...)`; nullopt for anything else
// (`redispatch`, other namespaces).
std::optional<std::string_view> aten_call_struct(std::string_view mangled);

// The operator schemas a libtorch file registers, as strings in its read-only data
// ("add.Tensor(Tensor self, ...) -> Tensor"): at::_ops struct name ("add_Tensor") to the
// operator's name and overload ("add.Tensor"). Empty when the file has none or is unreadable.
std::unordered_map<std::string, std::string> aten_schema_names(const std::string& path);

// Which operators to trace: glob patterns (fnmatch) on "name" or "name.overload", an optional
// "aten::" prefix ignored; a pattern without a '.' matches every overload of the names it
// matches. The word "default" stands for the curated set (default_torch_op_patterns).
class TorchOpFilter {
 public:
  explicit TorchOpFilter(const std::vector<std::string>& patterns);
  // "linear" or "add.Tensor" (no "aten::")
  bool matches(std::string_view op) const;
  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
};

// The operators that matter for training and inference: matmuls, convolutions, attention,
// norms, softmax, activations, embedding, dropout, losses and optimizer updates, with their
// backward kernels. Element-wise arithmetic (add, mul...) is left out: it is called thousands of
// times per step and would cost more than it tells.
const std::vector<std::string>& default_torch_op_patterns();

// Operators found in libtorch files and the op ids given to them. Shared by the probe planner
// (which finds them) and the decoder (which names the calls); thread-safe.
class TorchOps {
 public:
  explicit TorchOps(TorchOpFilter filter) : filter_(std::move(filter)) {}

  // The probe points of the selected operators `elf` defines (none when it is not libtorch).
  std::vector<ProbeSpec> probes_for(const ElfSymbols& elf);

  // "aten::addmm" for an op id this registry gave out; empty otherwise.
  std::string_view name(uint16_t op) const;
  size_t size() const;

 private:
  TorchOpFilter filter_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, uint16_t> ids_;  // display name -> op id
  std::deque<std::string> names_;                  // by op id - kTorchOpBase (stable storage)
  std::deque<std::string> symbols_;                // mangled names the specs point to
};

// True when a mapped file may hold the dispatcher's operators by its name (libtorch_cpu.so*,
// or the monolithic libtorch.so of old builds).
bool looks_like_torch_library(const std::string& path);

}  // namespace eacgm
