// Chrome trace-event JSON writer (chrome://tracing, Perfetto's legacy importer).
#pragma once
#include <memory>
#include <ostream>

#include "export/timeline.h"

namespace eacgm {

// Writes {"traceEvents":[...]} with "M" metadata events for process and thread names and one
// "X" complete event per slice (microsecond ts/dur with ns precision kept as fractions).
std::unique_ptr<TimelineSink> make_chrome_json_writer(std::ostream& out);

}  // namespace eacgm
