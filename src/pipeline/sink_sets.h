// Which sinks each command drives the pipeline with (pipeline/sink.h says what a sink is).
//
//   record   RecordingWriter (the .eacgm.db); with --perfetto, the Perfetto trace is converted
//            from the finished recording (export/exporter.h), so that it and `eacgm export`
//            agree by construction.
//   agent    (issue 17: metrics registry, online detector, flight recorder; not built yet)
#pragma once
#include <string>

#include "pipeline/sink.h"
#include "store/recording.h"

namespace eacgm {

// The sinks of `eacgm record`.
class RecordSinks {
 public:
  // Creates the recording (refused if it exists, unless `force`).
  RecordSinks(const std::string& output, bool force, std::string perfetto);

  Sink& sink() { return fanout_; }
  // Closes the recording and writes what is derived from it. Returns the recording's first
  // write error, or "".
  std::string close();
  // Converts the recording to Perfetto, if asked; prints why not on failure.
  void write_perfetto(bool force) const;

 private:
  std::string output_, perfetto_;
  RecordingWriter recording_;
  SinkFanout fanout_;
};

}  // namespace eacgm
