// Which sinks each command drives the pipeline with (pipeline/sink.h says what a sink is).
//
//   record   RecordingWriter (the .eacgm.db); with --perfetto, the Perfetto trace is converted
//            from the finished recording (export/exporter.h), so that it and `eacgm export`
//            agree by construction.
//   agent    [MatchFilter (--match) in front of] NodeCollectives (collectives matched once, for
//            the next two), MetricsSink (/metrics), DetectionSink (the online detector:
//            agent/detection.h; what it finds is logged, counted and stored by the agent) and
//            FlightRecorder (the last minute in memory, written as a recording on demand:
//            agent/flight.h).
#pragma once
#include <memory>
#include <string>

#include "agent/detection.h"
#include "agent/flight.h"
#include "agent/match_filter.h"
#include "agent/node_collectives.h"
#include "export/metrics.h"
#include "pipeline/sink.h"
#include "store/recording.h"

namespace eacgm {

// The sinks of `eacgm record`.
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

// The sinks of `eacgm agent`.
class AgentSinks {
 public:
  AgentSinks(std::string hostname, DetectionOptions detection,
             std::function<void(std::vector<AgentAnomaly>&)> report, FlightOptions flight,
             const std::vector<std::string>& match = {});
  Sink& sink() { return match_ ? static_cast<Sink&>(*match_) : fanout_; }
  MetricsSink& metrics() { return metrics_; }
  DetectionSink& detection() { return detection_; }
  FlightRecorder& flight() { return flight_; }

 private:
  MetricsSink metrics_;
  DetectionSink detection_;
  FlightRecorder flight_;
  NodeCollectives collectives_;
  SinkFanout fanout_;
  std::unique_ptr<MatchFilter> match_;
};

}  // namespace eacgm
