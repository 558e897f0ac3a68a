// The sinks of `eacgm agent` (store/sink.h says what a sink is): [MatchFilter (--match) in front
// of] NodeCollectives (collectives matched once, for the next two), MetricsSink (/metrics),
// DetectionSink (the online detector: agent/detection.h; what it finds is logged, counted and
// stored by the agent) and FlightRecorder (the last minute in memory, written as a recording on
// demand: agent/flight.h).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/detection.h"
#include "agent/flight.h"
#include "agent/match_filter.h"
#include "agent/node_collectives.h"
#include "export/metrics.h"
#include "store/sink.h"

namespace eacgm {

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
