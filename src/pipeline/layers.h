// Which layers a session traces: the ones the user named, or `auto`, every layer whose library a
// traced process maps (decided per process, again at each dlopen), and why each one is on.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

namespace eacgm {

// What --layers asked for.
struct LayerChoice {
  bool automatic = false;       // "auto": follow what the traced processes load
  std::set<std::string> named;  // layers named explicitly ("auto,python": python)
  std::set<std::string> excluded;  // left out of auto ("auto,-gputime": gputime)
  bool calls = false;           // --python-calls: time each call of chosen Python functions

  // Parses the --layers list; `python_calls`: --python-calls was given (it implies the python
  // layer). Throws UsageError for an unknown or empty list.
  static LayerChoice parse(const std::vector<std::string>& list, bool python_calls = false);

  // Whether the layer's programs and probes are loaded (auto loads the call layers' probes,
  // which attach only in files that hold their functions, so a process that maps no such
  // library pays nothing).
  bool armed(const std::string& layer) const;
  // The python layer: per-call function timing is opt-in, --python-calls (it costs a probe per
  // Python call, whatever the filter); the python layer itself, named or with auto, reads the
  // Python stack of each cuda/comm/torch call and of each CPU profile sample.
  bool python_calls() const { return calls; }
  bool python_stacks() const {
    return calls || (automatic && !excluded.count("python")) || named.count("python") != 0;
  }
  std::string text() const;  // as given, e.g. "auto,python"
};

// The layers that turned out to trace something, with the first reason for each, and the armed
// ones that did not (with why), for the one line `record` prints and the recording's meta.
class ActiveLayers {
 public:
  // `layer` is one of cuda, comm, torch, python, python-stacks, gpu, gputime, host. The first
  // reason stays.
  void on(const std::string& layer, const std::string& why);
  void off(const std::string& layer, const std::string& why);
  bool is_on(const std::string& layer) const { return on_.count(layer) != 0; }

  // "cuda,host" in the canonical order: what the recording holds.
  std::string names() const;
  // "cuda (libcudart.so.13, pid 42), host (always); not seen: torch (no libtorch_cpu mapped)"
  std::string describe(const LayerChoice& choice) const;

 private:
  std::map<std::string, std::string> on_, off_;
};

}  // namespace eacgm
