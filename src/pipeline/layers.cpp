// --layers parsing and the record of which layers traced something, and why.
#include "pipeline/layers.h"

#include <fmt/format.h>

#include <array>

#include "util/error.h"

namespace eacgm {
namespace {

// The order layers are listed in everywhere (help, meta, the layers line).
constexpr std::array<const char*, 8> kOrder{"cuda", "comm",    "torch", "python", "python-stacks",
                                            "gpu",  "gputime", "host"};

}  // namespace

LayerChoice LayerChoice::parse(const std::vector<std::string>& list, bool python_calls) {
  static const std::set<std::string> known{"auto",  "cuda", "comm",    "python",
                                           "torch", "gpu",  "gputime", "host"};
  LayerChoice c;
  for (const auto& l : list) {
    bool minus = l.starts_with('-');
    std::string name = minus ? l.substr(1) : l;
    if (!known.count(name) || (minus && name == "auto"))
      throw UsageError(fmt::format(
          "unknown layer '{}' (choose from auto, cuda, comm, python, torch, gpu, gputime, host; "
          "-LAYER leaves one out of auto)",
          l));
    if (minus)
      c.excluded.insert(name);
    else if (name == "auto")
      c.automatic = true;
    else
      c.named.insert(name);
  }
  if (!c.excluded.empty() && !c.automatic)
    throw UsageError("--layers: -LAYER leaves a layer out of auto: give it with auto (e.g. "
                     "auto,-gputime)");
  for (const auto& l : c.excluded)
    if (c.named.count(l))
      throw UsageError(fmt::format("--layers: {} is both named and left out", l));
  if (!c.automatic && c.named.empty())
    throw UsageError("--layers: give at least one layer (e.g. auto, or cuda,comm)");
  c.calls = python_calls;
  return c;
}

bool LayerChoice::armed(const std::string& layer) const {
  // python: the eval probe, python_calls(); its stacks are python_stacks()
  if (layer == "python") return calls;
  if (named.count(layer)) return true;
  return automatic && !excluded.count(layer);
}

std::string LayerChoice::text() const {
  std::string out = automatic ? "auto" : "";
  for (const char* l : kOrder)
    if (named.count(l)) out += (out.empty() ? "" : ",") + std::string(l);
  for (const char* l : kOrder)
    if (excluded.count(l)) out += ",-" + std::string(l);
  return out;
}

void ActiveLayers::on(const std::string& layer, const std::string& why) {
  on_.emplace(layer, why);
  off_.erase(layer);
}

void ActiveLayers::off(const std::string& layer, const std::string& why) {
  if (!on_.count(layer)) off_.emplace(layer, why);  // the first reason stays
}

std::string ActiveLayers::names() const {
  std::string out;
  for (const char* l : kOrder)
    if (on_.count(l)) out += (out.empty() ? "" : ",") + std::string(l);
  return out;
}

std::string ActiveLayers::describe(const LayerChoice& choice) const {
  std::string on, unused, off;
  auto append = [](std::string& list, const std::string& item) {
    list += (list.empty() ? "" : ", ") + item;
  };
  for (const char* l : kOrder) {
    std::string layer(l);
    if (auto it = on_.find(layer); it != on_.end()) {
      append(on, fmt::format("{} ({})", layer, it->second));
      continue;
    }
    // GPU time only matters where CUDA was used (or it was asked for by name)
    bool expected = layer == "python-stacks" ? choice.python_stacks() && !choice.python_calls()
                    : layer == "gputime"
                        ? choice.named.count(layer) || (choice.armed(layer) && on_.count("cuda"))
                        : choice.armed(layer);
    if (!expected) continue;
    if (auto it = off_.find(layer); it != off_.end())
      append(off, fmt::format("{} ({})", layer, it->second));
    else
      append(unused, layer);
  }
  std::string out = fmt::format("layers ({}): {}", choice.text(), on.empty() ? "none" : on);
  if (!unused.empty()) out += "; not used by the traced processes: " + unused;
  if (!off.empty()) out += "; off: " + off;
  return out;
}

}  // namespace eacgm
