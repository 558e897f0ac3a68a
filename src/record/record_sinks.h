// The sinks of `eacgm record` (store/sink.h says what a sink is): RecordingWriter (the
// .eacgm.db); with --perfetto, the Perfetto trace is converted from the finished recording
// (export/exporter.h), so that it and `eacgm export` agree by construction.
#pragma once
#include <string>

#include "store/recording.h"
#include "store/sink.h"

namespace eacgm {

class RecordSinks {
 public:
  // Creates the recording (refused if it exists, unless `force`).
  RecordSinks(const std::string& output, bool force, std::string perfetto);
  // Unless started() was called, the recording is removed: a start that failed leaves nothing.
  ~RecordSinks();
  RecordSinks(const RecordSinks&) = delete;
  RecordSinks& operator=(const RecordSinks&) = delete;
  void started() { started_ = true; }

  Sink& sink() { return fanout_; }
  // Closes the recording and writes what is derived from it. Returns the recording's first
  // write error, or "".
  std::string close();
  // Converts the recording to Perfetto, if asked; prints why not on failure.
  void write_perfetto(bool force) const;

 private:
  std::string output_, perfetto_;
  bool started_ = false;
  RecordingWriter recording_;
  SinkFanout fanout_;
};

}  // namespace eacgm
