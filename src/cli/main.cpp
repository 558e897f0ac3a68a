// eacgm entry point: subcommand dispatch and the one place errors become messages and exit codes.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "util/error.h"
#include "util/inherited_signals.h"
#include "version.h"

int main(int argc, char** argv) {
  eacgm::save_inherited_signals();
  CLI::App app{"eacgm: full-stack tracing and anomaly detection for AI/ML workloads, without "
               "changing their code: eBPF on CUDA, NCCL and the host, NVML for the GPU, Gaussian "
               "mixture models for what is not normal",
               "eacgm"};
  app.set_version_flag("--version", EACGM_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, std::function<int()>> actions;
  auto reg = [&](std::function<int()> (*add)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    auto action = add(app);
    actions[app.get_subcommands({})[before]] = std::move(action);
  };
  reg(eacgm::cli::add_record);
  reg(eacgm::cli::add_report);
  reg(eacgm::cli::add_export);
  reg(eacgm::cli::add_doctor);
  reg(eacgm::cli::add_gmm);
  reg(eacgm::cli::add_detect);
  reg(eacgm::cli::add_agent);
  reg(eacgm::cli::add_merge);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fprintf(stderr, "eacgm: %s (see eacgm --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
  } catch (const eacgm::Error& e) {
    fprintf(stderr, "eacgm: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    fprintf(stderr, "eacgm: internal error: %s (please report it)\n", e.what());
    return 1;
  }
  return 2;
}
