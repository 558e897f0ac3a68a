// `eacgm export`: a recording to Perfetto protobuf or Chrome JSON.
#include "cli/commands.h"
#include "export/exporter.h"
#include "util/error.h"

namespace eacgm::cli {

std::function<int()> add_export(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto perfetto = std::make_shared<std::string>();
  auto chrome = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a recording as a trace file: --perfetto (open in ui.perfetto.dev) or "
                "--chrome (JSON for chrome://tracing).");
  cmd->add_option("recording", *path, "recording file")->required();
  auto* p = cmd->add_option("--perfetto", *perfetto, "write a Perfetto protobuf trace here");
  auto* c = cmd->add_option("--chrome", *chrome, "write a Chrome trace-event JSON file here");
  cmd->add_flag("-f,--force", *force, "overwrite existing output files");
  return [path, perfetto, chrome, force, p, c]() {
    if (p->count() == 0 && c->count() == 0)
      throw UsageError("say what to write: --perfetto FILE and/or --chrome FILE");
    if (!perfetto->empty())
      export_recording(*path, *perfetto, ExportFormat::Perfetto, *force);
    if (!chrome->empty()) export_recording(*path, *chrome, ExportFormat::ChromeJson, *force);
    return 0;
  };
}

}  // namespace eacgm::cli
