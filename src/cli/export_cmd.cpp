// `eacgm export`: a recording to Perfetto protobuf or Chrome JSON.
#include "cli/commands.h"
#include "export/exporter.h"
#include "util/error.h"

namespace eacgm::cli {

std::function<int()> add_export(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto perfetto = std::make_shared<std::string>();
  auto chrome = std::make_shared<std::string>();
  auto pprof = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a recording as a trace file: --perfetto (open in ui.perfetto.dev) or "
                "--chrome (JSON for chrome://tracing); or its CPU profile as --pprof (go tool "
                "pprof, speedscope, Pyroscope, Parca).");
  cmd->add_option("recording", *path, "recording file")->required();
  auto* p = cmd->add_option("--perfetto", *perfetto, "write a Perfetto protobuf trace here");
  auto* c = cmd->add_option("--chrome", *chrome, "write a Chrome trace-event JSON file here");
  auto* pp = cmd->add_option("--pprof", *pprof,
                             "write the CPU profile (record --sample-hz) as a gzipped pprof "
                             "profile.proto here, e.g. run.pb.gz");
  cmd->add_flag("-f,--force", *force, "overwrite existing output files");
  return [path, perfetto, chrome, pprof, force, p, c, pp]() {
    if (p->count() == 0 && c->count() == 0 && pp->count() == 0)
      throw UsageError("say what to write: --perfetto FILE, --chrome FILE and/or --pprof FILE");
    for (auto [opt, value] : {std::pair{p, perfetto}, {c, chrome}, {pp, pprof}})
      if (opt->count() && value->empty())
        throw UsageError(fmt::format("{}: give a file name", opt->get_name()));
    if (!perfetto->empty())
      export_recording(*path, *perfetto, ExportFormat::Perfetto, *force);
    if (!chrome->empty()) export_recording(*path, *chrome, ExportFormat::ChromeJson, *force);
    if (!pprof->empty()) export_recording(*path, *pprof, ExportFormat::Pprof, *force);
    return 0;
  };
}

}  // namespace eacgm::cli
