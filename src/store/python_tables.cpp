// The python layer's inserts; the schema is in recording.cpp with the others.
#include "store/python_tables.h"

#include "store/sqlite_util.h"

namespace eacgm {

bool write_python_rows(Statements& db, const std::vector<PythonCallRow>& calls,
                       const std::vector<PythonStackFrameRow>& frames) {
  if (!calls.empty()) {
    Statement& insert = db("INSERT INTO python_calls VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)");
    for (const auto& c : calls) {
      insert.bind(1, int64_t(c.ts_ns));
      insert.bind(2, int64_t(c.dur_ns));
      insert.bind(3, int64_t(c.pid));
      insert.bind(4, int64_t(c.tid));
      insert.bind(5, c.name);
      insert.bind(6, c.file);
      insert.bind(7, c.line);
      insert.bind(8, int64_t(c.depth));
      if (c.runq_ns >= 0) insert.bind(9, c.runq_ns);
      if (insert.run() != SQLITE_DONE) return false;
    }
  }
  if (!frames.empty()) {
    Statement& insert = db("INSERT INTO python_stacks VALUES(?1,?2,?3,?4,?5)");
    for (const auto& f : frames) {
      insert.bind(1, f.id);
      insert.bind(2, int64_t(f.depth));
      insert.bind(3, f.name);
      insert.bind(4, f.file);
      if (f.line >= 0) insert.bind(5, f.line);
      if (insert.run() != SQLITE_DONE) return false;
    }
  }
  return true;
}

}  // namespace eacgm
