// Which Python functions the python layer records: the user's code and torch.nn by default,
// or what --python-filter names. Decided once per code object, in userspace.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

// The dotted module a source file is, as far as its path tells: "torch.nn.modules.linear" for
// .../site-packages/torch/nn/modules/linear.py, "json.decoder" for .../lib/python3.11/json/
// decoder.py, "importlib._bootstrap" for "<frozen importlib._bootstrap>", and the file's stem
// ("train") for anything else (the user's own scripts).
std::string python_module_of(std::string_view file);

// Standard library (lib/python3.X, frozen modules, "<string>" code it exec()s) or installed
// packages (site-packages, dist-packages): not the user's own code.
bool is_library_file(std::string_view file);

// The default: the user's code and torch.nn, but not nn.Module's own private and special
// methods. Those are plumbing that runs around or inside every module call (_call_impl wraps
// each forward, __getattr__ runs at each self.linear or self.weight): in a small GPT's training
// step they were 64% of the calls recorded, each as costly to record as a forward, and they
// add nothing to the timeline that the forwards under them do not show.
inline constexpr const char* kDefaultPythonFilter =
    "user,torch.nn,-torch.nn.modules.module.Module._*";

class PythonFilter {
 public:
  // Comma-separated patterns (see --python-filter): a pattern with '/' matches the file path,
  // any other the dotted name module.qualname; '*' and '?' are wildcards, and a pattern without
  // them matches that name and everything under it (torch.nn: torch.nn.functional.relu).
  // "user" is the user's own code. A pattern after '-' leaves out what it matches, whatever the
  // others choose. Throws UsageError when no pattern chooses anything ("", ",", "-x").
  explicit PythonFilter(const std::string& patterns = kDefaultPythonFilter);

  bool wants(std::string_view module_qualname, std::string_view file) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  bool user_ = false;
  std::vector<std::string> name_patterns_, file_patterns_;
  std::vector<std::string> name_exclusions_, file_exclusions_;
};

}  // namespace eacgm
