// The CPython builds the end-to-end tests run on: Debian's python3.11 and pyenv's 3.10-3.13.
#pragma once
#include <ostream>
#include <string>

namespace e2e {

struct Interpreter {
  std::string path;
  int minor;
  std::string label;
};

inline std::string PrintTo(const Interpreter& i) { return i.label; }
inline void PrintTo(const Interpreter& i, std::ostream* os) { *os << i.label; }

inline const Interpreter kInterpreters[] = {
    {"/usr/bin/python3.11", 11, "debian311"},
    {"/root/.pyenv/versions/3.10.13/bin/python3.10", 10, "pyenv310"},
    {"/root/.pyenv/versions/3.11.7/bin/python3.11", 11, "pyenv311"},
    {"/root/.pyenv/versions/3.12.1/bin/python3.12", 12, "pyenv312"},
    {"/root/.pyenv/versions/3.13.0/bin/python3.13", 13, "pyenv313"},
};

}  // namespace e2e
