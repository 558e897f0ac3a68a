// eacgm entry point: subcommand dispatch and the one place errors become messages and exit codes.
#include <sqlite3.h>

#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "util/error.h"
#include "util/inherited_signals.h"
#include "version.h"

namespace {

// `eacgm --help` lists each subcommand in one line, as git and perf do: its description's first
// line, to the first ": " or ". " (the detail and the examples are in `eacgm SUBCOMMAND --help`).
class BriefSubcommands : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* sub) const override {
    std::string brief = sub->get_description();
    brief = brief.substr(0, brief.find('\n'));
    brief = brief.substr(0, std::min(brief.find(": "), brief.find(". ")));
    if (!brief.empty() && brief.back() == '.') brief.pop_back();
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), brief, column_width_);
    return out.str();
  }
};

}  // namespace

int main(int argc, char** argv) {
  eacgm::save_inherited_signals();
  // No SQLite memory statistics (eacgm reads none): they take a process-wide lock around every
  // allocation SQLite makes, each row the recorder writes. Before SQLite's first use.
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  CLI::App app{"eacgm: full-stack tracing and anomaly detection for AI/ML workloads, without "
               "changing their code: eBPF on CUDA, NCCL and the host, NVML for the GPU, Gaussian "
               "mixture models for what is not normal",
               "eacgm"};
  app.set_version_flag("--version", EACGM_VERSION);
  app.formatter(std::make_shared<BriefSubcommands>());
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
  reg(eacgm::cli::add_gputime_library);
  app.footer("eacgm SUBCOMMAND --help: its options, what it writes, examples");  // (after: not theirs)
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
