// Python function filters: glob patterns over dotted names and file paths.
#include "python/code_filter.h"

#include <fnmatch.h>

#include <sstream>

#include "util/error.h"

namespace eacgm {
namespace {

// The part of a path below a folder that imports resolve from, or npos.
size_t import_root_end(std::string_view file) {
  for (std::string_view dir : {"/site-packages/", "/dist-packages/"}) {
    size_t at = file.rfind(dir);
    if (at != std::string_view::npos) return at + dir.size();
  }
  size_t lib = file.rfind("/lib/python3.");
  if (lib == std::string_view::npos) return std::string_view::npos;
  size_t slash = file.find('/', lib + 13);
  return slash == std::string_view::npos ? slash : slash + 1;
}

bool has_wildcard(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

bool matches(const std::string& pattern, std::string_view subject, char sep) {
  std::string s(subject);
  if (has_wildcard(pattern)) return fnmatch(pattern.c_str(), s.c_str(), 0) == 0;
  // a plain name covers what is under it: torch.nn -> torch.nn.X, /src/proj -> /src/proj/X
  return s == pattern || (s.size() > pattern.size() && s.starts_with(pattern) &&
                          (s[pattern.size()] == sep || pattern.back() == sep));
}

}  // namespace

std::string python_module_of(std::string_view file) {
  if (file.starts_with("<frozen ") && file.ends_with(">"))
    return std::string(file.substr(8, file.size() - 9));
  std::string rel;
  if (size_t root = import_root_end(file); root != std::string_view::npos) {
    rel = std::string(file.substr(root));
  } else {
    size_t slash = file.rfind('/');
    rel = std::string(slash == std::string_view::npos ? file : file.substr(slash + 1));
  }
  if (rel.ends_with(".py")) rel.resize(rel.size() - 3);
  if (rel.ends_with("/__init__")) rel.resize(rel.size() - 9);
  for (char& c : rel)
    if (c == '/') c = '.';
  return rel;
}

bool is_library_file(std::string_view file) {
  // "<frozen ...>" modules, and "<string>" code the library exec()s (namedtuple, dataclasses);
  // `python -c` code is "<string>" too: --python-calls '<string>*' records it
  return file.starts_with("<") || import_root_end(file) != std::string_view::npos;
}

PythonFilter::PythonFilter(const std::string& patterns) : text_(patterns) {
  std::stringstream ss(patterns);
  std::string p;
  while (std::getline(ss, p, ',')) {
    bool exclude = p.starts_with('-');
    if (exclude) p.erase(0, 1);
    if (p.empty()) continue;
    if (p == "user" && exclude)
      throw UsageError(
          fmt::format("--python-calls '{}': '-user' cannot be left out; name the "
                      "files or modules to leave out instead (-/path/ or -pkg.*)",
                      patterns));
    if (p == "user")
      user_ = true;
    else if (p.find('/') != std::string::npos)
      (exclude ? file_exclusions_ : file_patterns_).push_back(p);
    else
      (exclude ? name_exclusions_ : name_patterns_).push_back(p);
  }
  if (!user_ && name_patterns_.empty() && file_patterns_.empty())
    throw UsageError(
        fmt::format("--python-calls '{}': no pattern chooses any function (give "
                    "e.g. user,torch.nn or 'mypkg.*' or /path/to/project)",
                    patterns));
}

bool PythonFilter::wants(std::string_view module_qualname, std::string_view file) const {
  for (const auto& p : name_exclusions_)
    if (matches(p, module_qualname, '.')) return false;
  for (const auto& p : file_exclusions_)
    if (matches(p, file, '/')) return false;
  if (user_ && !is_library_file(file)) return true;
  for (const auto& p : name_patterns_)
    if (matches(p, module_qualname, '.')) return true;
  for (const auto& p : file_patterns_)
    if (matches(p, file, '/')) return true;
  return false;
}

}  // namespace eacgm
