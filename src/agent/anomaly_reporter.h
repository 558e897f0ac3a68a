// What the agent does with each anomaly it finds: a log line (rate-limited per kind), the
// counter on /metrics, a row in the state dir's store, and a flight recording for a while of them.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "store/agent_anomalies.h"
#include "agent/detection.h"
#include "agent/flight.h"
#include "export/metrics.h"

namespace eacgm {

// How unusual a call anomaly was, in words for the log line: "15x its usual 0.93 ms; 12 such
// calls in 10 s where 1.2 are usual".
std::string unusual_text(const detect::Anomaly& a);

// What the agent does with each anomaly: one log line (rate-limited per kind: a storm of slow
// calls is one line every 10 s with the count of the others), the counter, and a row in the
// state dir's store for every one.
class AnomalyReporter {
 public:
  AnomalyReporter(MetricsSink& metrics, std::unique_ptr<AnomalyStore> store, FlightRecorder& flight,
                  uint64_t flight_ns, int64_t monotonic_to_realtime_ns)
      : metrics_(metrics),
        store_(std::move(store)),
        flight_(flight),
        flight_ns_(flight_ns),
        to_real_(monotonic_to_realtime_ns) {}

  void operator()(std::vector<AgentAnomaly>& found);

 private:
  struct Limit {
    uint64_t last = 0;
    size_t suppressed = 0;
  };
  MetricsSink& metrics_;
  std::unique_ptr<AnomalyStore> store_;
  FlightRecorder& flight_;
  uint64_t flight_ns_;
  int64_t to_real_;
  uint64_t dump_due_ = 0;
  std::string dump_path_;
  std::map<std::string, Limit> limits_;
  std::string last_error_;
};

}  // namespace eacgm
