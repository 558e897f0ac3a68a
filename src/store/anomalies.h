// Writes the result of `eacgm detect` into a recording: its anomalies table and a few meta keys.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/rows.h"

namespace eacgm {

// Replaces the recording's anomalies (creating the table in recordings older than it) and sets
// the meta keys, in one transaction. Throws eacgm::Error naming the file and the fix.
void write_anomalies(const std::string& path, const std::vector<AnomalyRow>& rows,
                     const std::vector<std::pair<std::string, std::string>>& meta);

// Causes that differ only in their measurements ("joined 25.1 ms late", "joined 27.4 ms late")
// as one line with the range of each ("joined 25.1-27.4 ms late"), the most frequent first.
// A measurement is a number followed by a unit (ns, us, ms, s, %, x, B, KiB, MiB, GiB, MB, GB).
struct CauseGroup {
  std::string cause;  // with ranges in place of the measurements
  size_t count = 0;
};
std::vector<CauseGroup> group_causes(const std::vector<std::pair<std::string, size_t>>& counts);

// The features column: a JSON array, per feature that pulled the score down (the strongest
// first) [name, contribution, value, usual], value and usual in the feature's units (ms/s,
// calls/s, microseconds, bytes; recordings before session 23 have [name, contribution]).
// One feature in words: "run-queue wait 458 ms/s (usual 3 ms/s)", "took 31 ms (usual 3.2 ms)".
std::string describe_feature(const std::string& feature, double value, double usual);
// Features in words, joined by ", ". One that reads the same as its usual ("block I/O 0 MB/s
// (usual 0 MB/s)", ranked for its correlation with the others) says nothing about why a window
// was flagged: left out, unless every one reads so (then the first alone).
struct FeatureValue {
  std::string feature;
  double value = 0, usual = 0;
};
std::string describe_features(const std::vector<FeatureValue>& features);
// A window feature's name in words, as describe_feature names it ("run-queue wait", "NIC
// traffic"; calls: "torch calls"), the feature itself where it has none.
std::string feature_title(const std::string& feature);
// The first `n` features of a features column in words (name=contribution where a feature has
// no value); the text itself, cut, where it is no JSON array.
std::string features_text(std::string_view json_text, size_t n = 3);

}  // namespace eacgm
