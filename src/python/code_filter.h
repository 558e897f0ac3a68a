// Which Python functions the python layer times per call: what --python-calls names (the
// user's code, modules, files). Decided once per code object, in userspace.
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

class PythonFilter {
 public:
  // Comma-separated patterns (see --python-calls): a pattern with '/' matches the file path,
  // any other the dotted name module.qualname; '*' and '?' are wildcards, and a pattern without
  // them matches that name and everything under it (torch.nn: torch.nn.functional.relu).
  // "user" is the user's own code. A pattern after '-' leaves out what it matches, whatever the
  // others choose. Throws UsageError when no pattern chooses anything ("", ",", "-x").
  explicit PythonFilter(const std::string& patterns);

  bool wants(std::string_view module_qualname, std::string_view file) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  bool user_ = false;
  std::vector<std::string> name_patterns_, file_patterns_;
  std::vector<std::string> name_exclusions_, file_exclusions_;
};

}  // namespace eacgm
