// Writes the result of `eacgm detect` into a recording: its anomalies table and a few meta keys.
#pragma once
#include <string>
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

}  // namespace eacgm
