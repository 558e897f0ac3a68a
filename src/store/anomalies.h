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

}  // namespace eacgm
