// The sinks of `eacgm agent`, put together (agent/agent_sinks.h).
#include "agent/agent_sinks.h"

namespace eacgm {

AgentSinks::AgentSinks(std::string hostname, DetectionOptions detection,
                       std::function<void(std::vector<AgentAnomaly>&)> report, FlightOptions flight,
                       const std::vector<std::string>& match)
    : metrics_(std::move(hostname)),
      detection_(std::move(detection), std::move(report)),
      flight_(std::move(flight)),
      collectives_([this](uint32_t pid) { return metrics_.job_of(pid); }) {
  collectives_.on_instance([this](std::string_view op, const CollectiveMatcher::Instance& inst) {
    metrics_.add_instance(op, inst);
  });
  detection_.use_collectives(collectives_);
  detection_.use_flight(flight_);
  fanout_.attach(collectives_);
  fanout_.attach(metrics_);
  fanout_.attach(detection_);
  fanout_.attach(flight_);  // last: a dump asked for by this flush's anomalies holds them
  if (!match.empty()) match_ = std::make_unique<MatchFilter>(match, fanout_, read_command_line);
}

}  // namespace eacgm
