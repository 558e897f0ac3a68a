// Native Perfetto protobuf trace writer (open the file in ui.perfetto.dev).
#pragma once
#include <memory>
#include <ostream>

#include "export/timeline.h"

namespace eacgm {

// Writes a perfetto.protos.Trace: a process track per process, a thread track per thread
// (child of its process), one SLICE_BEGIN/SLICE_END TrackEvent pair per slice with its args
// as debug annotations. Event names and categories are interned per sequence.
std::unique_ptr<TimelineSink> make_perfetto_writer(std::ostream& out);

}  // namespace eacgm
