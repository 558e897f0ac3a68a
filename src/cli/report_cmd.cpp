// `eacgm report`: per-layer summaries of a recording, as text, JSON or one HTML page of charts.
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "report/html_report.h"
#include "report/report.h"
#include "util/error.h"

namespace eacgm::cli {

std::string default_recording() {
  std::error_code ec;
  if (!std::filesystem::exists(kDefaultRecording, ec))
    throw UsageError(fmt::format(
        "give a recording (e.g. eacgm record -- CMD writes {} here; there is none in {})",
        kDefaultRecording, std::filesystem::current_path(ec).string()));
  fmt::print(stderr, "eacgm: reading {} (the default recording)\n", kDefaultRecording);
  return kDefaultRecording;
}

std::function<int()> add_report(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto html = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "report", "Summarise a recording: per layer and operation count, total, mean, p50, p99, "
                "max, bytes; top kernels by launches; host, GPU and collectives; anomalies.");
  cmd->add_option("recording", *path,
                  "recording file (default: run.eacgm.db here, what `eacgm record` writes)");
  cmd->add_flag("--json", *json, "print JSON instead of tables");
  CLI::Option* html_option = cmd->add_option("--html", *html,
                  "write one self-contained page of charts to this file instead (latency over "
                  "time with anomalies as red crosses, distributions, GPU and host metrics, "
                  "collectives per rank, top operations, the anomalies table); opens offline in "
                  "any browser")
      ->excludes("--json");
  cmd->add_flag("-f,--force", *force, "replace an existing --html file")->needs(html_option);
  return [path, json, html, force, html_option]() {
    if (path->empty()) *path = default_recording();
    if (html_option->count() > 0) {  // an empty name is refused by write_html_report
      write_html_report(*path, *html, *force);
      fmt::print(stderr, "eacgm: wrote {} (open it in a browser)\n", *html);
      return 0;
    }
    print_report(*path, *json, stdout);
    return 0;
  };
}

}  // namespace eacgm::cli
