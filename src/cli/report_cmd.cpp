// `eacgm report`: per-layer summaries of a recording.
#include "cli/commands.h"
#include "report/report.h"

namespace eacgm::cli {

std::function<int()> add_report(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "report", "Summarise a recording: per layer and operation count, total, mean, p50, p99, "
                "max, bytes; top kernels by launches.");
  cmd->add_option("recording", *path, "recording file")->required();
  cmd->add_flag("--json", *json, "print JSON instead of tables");
  return [path, json]() {
    print_report(*path, *json, stdout);
    return 0;
  };
}

}  // namespace eacgm::cli
