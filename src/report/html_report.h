// `eacgm report --html`: one self-contained page of charts for a recording (the paper's
// figures for the user's own run). The chart library (Apache ECharts, from npm at setup) and the
// page's own script are compiled into eacgm, so the page opens offline and fetches nothing.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "report/html_gpu_time.h"

namespace eacgm {

class RecordingReader;

struct HtmlReportOptions {
  // Time series are cut into this many columns; each keeps its lowest and highest value (and
  // every anomaly is kept), so the page's size does not grow with the recording's.
  size_t columns = 1000;
  size_t top_operations = 6;     // per layer, drawn over time (by total time)
  size_t max_anomalies = 20000;  // the strongest, when detect found more
  size_t max_subjects = 8;       // host processes drawn (the most CPU time; a note says so)
  GpuTimelineOptions gpu_time;   // the gputime layer's time line and kernel charts
};

// Everything the page draws, as the JSON its script reads (also what tests check).
nlohmann::json html_report_data(const RecordingReader& rec, const HtmlReportOptions& options);

// Writes the page to `out` (refusing what is not a regular file, and an existing one without
// `force`; written beside it and renamed, so an interrupted write leaves no half page).
void write_html_report(const std::string& recording, const std::string& out, bool force,
                       const HtmlReportOptions& options = {});

}  // namespace eacgm
