// The sinks of `eacgm record`, put together (record/record_sinks.h).
#include "record/record_sinks.h"

#include <cstdio>

#include "export/exporter.h"
#include "util/error.h"

namespace eacgm {

RecordSinks::RecordSinks(const std::string& output, bool force, std::string perfetto)
    : output_(output), perfetto_(std::move(perfetto)), recording_(output, force) {
  fanout_.attach(recording_);
}

RecordSinks::~RecordSinks() {
  if (!started_) recording_.discard();
}

std::string RecordSinks::close() { return recording_.close(); }

void RecordSinks::write_perfetto(bool force) const {
  if (perfetto_.empty()) return;
  try {
    export_recording(output_, perfetto_, ExportFormat::Perfetto, force);
  } catch (const Error& e) {
    fprintf(stderr, "eacgm: %s (the recording %s is complete; retry with eacgm export)\n", e.what(),
            output_.c_str());
  }
}

}  // namespace eacgm
