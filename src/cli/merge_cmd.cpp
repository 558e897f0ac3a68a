// `eacgm merge`: recordings of one job from several hosts as one recording (store/merge.h).
#include <fmt/format.h>

#include "cli/commands.h"
#include "store/merge.h"

namespace eacgm::cli {

namespace {
std::string ms(int64_t ns) { return fmt::format("{:+.3f} ms", double(ns) / 1e6); }
}  // namespace

std::function<int()> add_merge(CLI::App& app) {
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto output = std::make_shared<std::string>("job.eacgm.db");
  auto options = std::make_shared<MergeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "merge",
      "Merge the recordings of one distributed job, one per host, into one recording: one eacgm "
      "record or flight recording per host in, one out that report, detect and export read; "
      "processes keep their host (renumbered where two hosts share a pid), and each host's "
      "clock is mapped onto the first recording's by the wall clocks, then refined on the c10d "
      "collectives the hosts share: no rank completes one before every rank has begun it, and "
      "each host is placed in the middle of the bounds that gives (NTP-grade offsets of tens "
      "of ms become well under a millisecond). Or skip the merge: eacgm detect a.db b.db.");
  cmd->add_option("recordings", *inputs, "the recordings, one per host (the first sets the clock)")
      ->required();
  cmd->add_option("-o,--output", *output, "merged recording to write")->capture_default_str();
  cmd->add_flag("-f,--force", options->force, "replace an existing output file");
  cmd->add_flag("--any-job", options->any_job,
                "merge recordings whose ranks name different jobs (TORCHELASTIC_RUN_ID, "
                "SLURM_JOB_ID, ...): refused otherwise");
  return [inputs, output, options]() {
    MergeResult r = merge_recordings(*inputs, *output, *options);
    for (const auto& h : r.hosts) {
      std::string ranks;
      if (!h.ranks.empty())
        ranks = h.ranks.size() == 1 ? fmt::format(", rank {}", h.ranks[0])
                                    : fmt::format(", ranks {}-{}", h.ranks.front(), h.ranks.back());
      std::string clock;
      if (&h == &r.hosts[0])
        clock = "reference clock";
      else if (h.fix.instances)
        clock = fmt::format("clock {} (wall clocks {}, refined {} on {} collectives{})",
                            ms(h.wall_offset_ns + h.fix.offset_ns), ms(h.wall_offset_ns),
                            ms(h.fix.offset_ns), h.fix.instances,
                            h.fix.bound_ns >= 0
                                ? fmt::format(", true offset within +-{:.3f} ms", double(h.fix.bound_ns) / 1e6)
                                : std::string(", from completions alone"));
      else
        clock = fmt::format("clock {} (wall clocks only)", ms(h.wall_offset_ns));
      std::string residual = h.fix.residual_ns >= 0 ? fmt::format("; completions {:.3f} ms apart (median)",
                                                                  double(h.fix.residual_ns) / 1e6)
                                                    : "";
      fprintf(stderr, "eacgm: %s (%s): %zu process%s%s%s, %s%s\n", h.host.c_str(), h.file.c_str(),
              h.processes, h.processes == 1 ? "" : "es", ranks.c_str(),
              h.pid_base ? fmt::format(", pids +{}", h.pid_base).c_str() : "", clock.c_str(),
              residual.c_str());
    }
    for (const auto& n : r.notes) fprintf(stderr, "eacgm: note: %s\n", n.c_str());
    fprintf(stderr, "eacgm: %llu rows merged: %s (then: eacgm detect %s)\n",
            (unsigned long long)r.rows, output->c_str(), output->c_str());
    return 0;
  };
}

}  // namespace eacgm::cli
