// Finding PyTorch's dispatcher operators in libtorch and naming them as PyTorch does.
#include "probe/torch_ops.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <memory>

#include "probe/elf_symbols.h"
#include "probe/library_finder.h"
#include "util/error.h"

namespace eacgm {
namespace {

constexpr std::string_view kOpsPrefix = "_ZN2at4_ops";
constexpr std::string_view kCallSuffix = "4callE";

bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One string of the read-only data that may be a schema: collects "name[.overload]" for the
// identifier before its first '(' and, because the linker merges strings that are tails of
// others ("sin(Tensor self)" may live inside "asin(Tensor self)"), for each tail of it too.
void add_schema_candidates(std::string_view s, std::unordered_map<std::string, std::string>& out,
                           std::unordered_map<std::string, bool>& from_start) {
  if (s.starts_with("aten::")) s.remove_prefix(6);
  size_t paren = s.find('(');
  if (paren == std::string_view::npos || paren == 0 || paren > 200) return;
  if (s.find(") -> ") == std::string_view::npos) return;
  std::string_view ident = s.substr(0, paren);
  size_t dot = ident.find('.');
  if (dot != std::string_view::npos && ident.find('.', dot + 1) != std::string_view::npos) return;
  for (char c : ident)
    if (!ident_char(c) && c != '.') return;
  for (size_t k = 0; k < (dot == std::string_view::npos ? ident.size() : dot); ++k) {
    char c = ident[k];
    if (!((c >= 'a' && c <= 'z') || c == '_')) continue;
    std::string name(ident.substr(k));
    std::string key = name;
    if (size_t d = key.find('.'); d != std::string::npos) key[d] = '_';
    bool whole = k == 0;
    auto it = from_start.find(key);
    // a schema string of its own beats a tail of another one
    if (it == from_start.end() || (whole && !it->second)) {
      out[key] = std::move(name);
      from_start[key] = whole;
    }
  }
}

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};

}  // namespace

std::optional<std::string_view> aten_call_struct(std::string_view mangled) {
  if (!mangled.starts_with(kOpsPrefix)) return std::nullopt;
  // no mangled name has a '.': "call(...).cold", ".isra.0", ".part.0" are pieces or clones GCC
  // split off (PyTorch 2.11's wheels have .cold ones), not the function callers enter
  if (mangled.find('.') != std::string_view::npos) return std::nullopt;
  std::string_view rest = mangled.substr(kOpsPrefix.size());
  size_t len = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), len);
  if (ec != std::errc() || len == 0) return std::nullopt;
  size_t digits = size_t(p - rest.data());
  if (rest.size() < digits + len + kCallSuffix.size()) return std::nullopt;
  if (rest.substr(digits + len, kCallSuffix.size()) != kCallSuffix) return std::nullopt;
  return rest.substr(digits, len);
}

std::unordered_map<std::string, std::string> aten_schema_names(const std::string& path) {
  std::unordered_map<std::string, std::string> out;
  std::unordered_map<std::string, bool> from_start;
  if (elf_version(EV_CURRENT) == EV_NONE) return out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  std::unique_ptr<Elf, ElfCloser> elf(elf_begin(fd, ELF_C_READ_MMAP, nullptr));
  size_t shstrndx = 0;
  if (elf && elf_getshdrstrndx(elf.get(), &shstrndx) == 0) {
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf.get(), scn)) != nullptr;) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS) continue;
      const char* name = elf_strptr(elf.get(), shstrndx, sh.sh_name);
      if (!name || std::strcmp(name, ".rodata") != 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (!data || !data->d_buf) break;
      std::string_view all(static_cast<const char*>(data->d_buf), data->d_size);
      size_t start = 0;
      while (start < all.size()) {
        size_t end = all.find('\0', start);
        if (end == std::string_view::npos) end = all.size();
        if (end - start > 8) add_schema_candidates(all.substr(start, end - start), out, from_start);
        start = end + 1;
      }
      break;
    }
  }
  elf.reset();
  close(fd);
  return out;
}

namespace {

// Operator names are identifiers with an overload after a '.': a pattern with anything else in
// it, or a bracket left open, can match nothing and is a typo to report now, not at the end.
void check_pattern(const std::string& p) {
  if (p.empty()) throw UsageError("--torch-ops: an empty pattern (e.g. a stray comma); give globs such as linear,addmm");
  int depth = 0;
  for (char c : p) {
    bool word = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':';
    bool glob = c == '*' || c == '?' || c == '[' || c == ']' || c == '!' || c == '^' || c == '-';
    if (!word && !glob)
      throw UsageError(fmt::format(
          "--torch-ops {}: '{}' cannot be in an operator name (give globs on names such as "
          "linear, add.Tensor, conv*)", p, c));
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
  }
  if (depth > 0)
    throw UsageError(fmt::format("--torch-ops {}: a '[' is not closed (e.g. conv[12]d)", p));
}

}  // namespace

TorchOpFilter::TorchOpFilter(const std::vector<std::string>& patterns) {
  for (std::string p : patterns) {
    check_pattern(p);
    if (p == "default") {
      for (const auto& d : default_torch_op_patterns()) patterns_.push_back(d);
      continue;
    }
    if (p.starts_with("aten::")) p.erase(0, 6);
    if (!p.empty()) patterns_.push_back(std::move(p));
  }
}

bool TorchOpFilter::matches(std::string_view op) const {
  std::string full(op);
  std::string base = full.substr(0, full.find('.'));
  for (const auto& p : patterns_) {
    if (fnmatch(p.c_str(), full.c_str(), 0) == 0) return true;
    if (p.find('.') == std::string::npos && fnmatch(p.c_str(), base.c_str(), 0) == 0) return true;
  }
  return false;
}

const std::vector<std::string>& default_torch_op_patterns() {
  static const std::vector<std::string> ops{
      // matrix products
      "linear", "addmm", "mm", "bmm", "matmul", "baddbmm", "addbmm", "einsum",
      "linear_backward",
      // convolutions
      "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
      "convolution", "convolution_backward",
      // attention
      "scaled_dot_product_attention", "_scaled_dot_product_attention",
      "_native_multi_head_attention", "_scaled_dot_product_flash_attention",
      "_scaled_dot_product_efficient_attention",
      // normalisation
      "layer_norm", "native_layer_norm", "native_layer_norm_backward", "batch_norm",
      "native_batch_norm", "native_batch_norm_backward", "group_norm", "native_group_norm",
      "native_group_norm_backward", "rms_norm",
      // softmax
      "softmax", "_softmax", "_softmax_backward_data", "log_softmax", "_log_softmax",
      "_log_softmax_backward_data",
      // activations
      "relu", "relu_", "gelu", "gelu_backward", "silu", "silu_backward", "tanh", "sigmoid",
      // embedding and dropout
      "embedding", "embedding_backward", "embedding_dense_backward", "embedding_bag",
      "dropout", "native_dropout", "native_dropout_backward",
      // losses
      "cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss_forward", "nll_loss_backward",
      "mse_loss", "mse_loss_backward", "binary_cross_entropy",
      "binary_cross_entropy_with_logits", "l1_loss", "smooth_l1_loss",
      // optimizer updates (per-parameter and multi-tensor forms)
      "addcmul_", "addcdiv_", "_foreach_add_", "_foreach_mul_", "_foreach_addcmul_",
      "_foreach_addcdiv_", "_foreach_sqrt", "_foreach_div_", "_foreach_norm", "_fused_adam_",
      "_fused_adamw_",
  };
  return ops;
}

std::vector<ProbeSpec> TorchOps::probes_for(const ElfSymbols& elf) {
  std::vector<std::pair<const ElfSymbol*, std::string_view>> calls;
  for (const ElfSymbol& s : elf.symbols())
    if (s.function && s.value != 0)
      if (auto st = aten_call_struct(s.name)) calls.emplace_back(&s, *st);
  std::vector<ProbeSpec> out;
  if (calls.empty()) return out;
  std::unordered_map<std::string, std::string> schemas = aten_schema_names(elf.path());
  std::lock_guard lock(mu_);
  for (auto [sym, st] : calls) {
    auto it = schemas.find(std::string(st));
    std::string op = it != schemas.end() ? it->second : std::string(st);
    if (!filter_.matches(op)) continue;
    std::string display = "aten::" + op;
    uint16_t id;
    if (auto found = ids_.find(display); found != ids_.end()) {
      id = found->second;
    } else {
      if (size_t(kTorchOpBase) + names_.size() >= kTorchOpLimit) break;
      id = uint16_t(kTorchOpBase + names_.size());
      names_.push_back(display);
      ids_.emplace(display, id);
    }
    symbols_.push_back(sym->name);
    // operators throw (shape errors reach Python as RuntimeError): no uretprobes on them
    out.push_back({symbols_.back(), uint64_t(id), ProbeSpec::End::ExitInstructions});
  }
  return out;
}

std::string_view TorchOps::name(uint16_t op) const {
  std::lock_guard lock(mu_);
  if (op < kTorchOpBase || size_t(op - kTorchOpBase) >= names_.size()) return {};
  return names_[op - kTorchOpBase];
}

size_t TorchOps::size() const {
  std::lock_guard lock(mu_);
  return names_.size();
}

bool looks_like_torch_library(const std::string& path) {
  std::string base = std::filesystem::path(path).filename().string();
  return base.starts_with("libtorch_cpu.so") || base == "libtorch.so" ||
         base.starts_with("libtorch.so.");
}

}  // namespace eacgm
