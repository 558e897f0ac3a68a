// Inserts for the python layer's tables (python_calls, python_stacks).
#pragma once
#include <sqlite3.h>

#include <vector>

#include "store/python_rows.h"

namespace eacgm {

class Statements;  // store/sqlite_util.h

// Inside the caller's transaction. Returns false on an SQLite error (see sqlite3_errmsg).
bool write_python_rows(Statements& db, const std::vector<PythonCallRow>& calls,
                       const std::vector<PythonStackFrameRow>& frames);

}  // namespace eacgm
