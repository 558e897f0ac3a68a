// Whether slow calls are worth reporting: a call can be far slower than its usual time and still
// cost its job nothing that matters (three aten::addmm 1.3 ms slow in a 13 s training, while the
// job's own OpenBLAS threads took its CPU). The agent reports a burst of slow calls only where
// they lost a share of the time they came in (OnlineDetector's min_burst_share); `detect` drops
// an operation's slow calls by the same rule (issue 31: online and offline judge alike).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detect/detector.h"

namespace eacgm::detect {

// The span a burst's loss is judged over is at least this long: one slow call is judged
// against a second.
constexpr uint64_t kMinMaterialSpanNs = 1'000'000'000;
// The defaults of both drivers: 10 ms a second, 100 ms in 10 s; runs of at most 10 s.
constexpr double kDefaultMinLossShare = 0.01;
constexpr uint64_t kMaterialSpanNs = 10'000'000'000;

// Whether calls that lost `lost` us beyond their usual time, coming in over `span_ns` (first to
// last), lost at least `share` of that span, taken as at least kMinMaterialSpanNs and at most
// `max_span_ns`. A share of 0 or less: always.
bool material_loss(double lost, uint64_t span_ns, double share, uint64_t max_span_ns);

// The time a slow call (or a late join's collective) took beyond its usual one, in us.
double lost_us(const Anomaly& a);

// Whether an anomaly is a call flagged for its duration (a slow call, not a late join, a size or
// a window): the kind materiality judges.
bool judged_by_loss(const Anomaly& a);

// Offline: removes each slow call (judged_by_loss) that lies in no run of its operation's slow
// calls (same layer and name) spanning at most `max_span_ns` whose loss is material_loss, and
// returns how many were removed. Other anomalies stay; the order of those kept is unchanged.
size_t drop_immaterial(std::vector<Anomaly>& anomalies, double share, uint64_t max_span_ns);

}  // namespace eacgm::detect
