// Turns a recording into a trace file people open (Perfetto, Chrome JSON).
#pragma once
#include <string>

#include "export/timeline.h"

namespace eacgm {

class RecordingReader;

enum class ExportFormat { Perfetto, ChromeJson, Pprof };

// Streams a recording's processes, threads and calls into a sink, in wall-clock time.
void emit_timeline(const RecordingReader& recording, TimelineSink& sink);

// Writes `out` from the recording at `db`. Refuses an existing `out` unless `force`.
// Throws eacgm::Error naming the file and the fix.
void export_recording(const std::string& db, const std::string& out, ExportFormat format,
                      bool force);

}  // namespace eacgm
