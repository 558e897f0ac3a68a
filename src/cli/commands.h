// The subcommands: each registers its options on the app and runs when chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace eacgm::cli {

// A comma-separated list given to `option` (record's and the agent's --layers, -p, ...): an
// empty element (a stray comma) is a typo, and so is an empty list; `example` shows a good
// value. Throws UsageError.
std::vector<std::string> split_list(const std::string& option, const std::string& s,
                                    const char* example);

// What `eacgm record` writes when not told (-o): plain `eacgm detect` and `eacgm report` read it.
inline constexpr const char* kDefaultRecording = "run.eacgm.db";
// The recording a command reads when none is given: the default one in this directory, said on
// stderr, or a usage error naming what to give.
std::string default_recording();

// A number option's finite check: NaN passes a range check (it compares false both ways), and
// a NaN duration or window once meant an agent that never stopped.
inline CLI::Validator finite_number(const std::string& what = "a finite number") {
  return CLI::Validator(
      [what](std::string& v) {
        char* end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        bool number = !v.empty() && end && *end == '\0';
        return number && std::isfinite(d) ? std::string() : "'" + v + "': give " + what;
      },
      "NUMBER");
}

// 1000000000, 0.05, 1e+20: bounds as a person writes them.
inline std::string human_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A number option's range check with one line a person can act on ("--duration: 'abc' is not
// a number of seconds from 0 to 1000000000"), refusing NaN and infinity too; `whole` for
// counts.
inline CLI::Validator number_in(double lo, double hi, const std::string& what = "a number",
                                bool whole = false) {
  return CLI::Validator(
      [=](std::string& v) {
        char* end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        bool ok = !v.empty() && end && *end == '\0' && std::isfinite(d) && d >= lo && d <= hi &&
                  (!whole || d == std::floor(d));
        return ok ? std::string()
                  : "'" + v + "' is not " + what + " from " + human_number(lo) + " to " +
                        human_number(hi);
      },
      "NUMBER");
}

// Each returns the action to run if its subcommand was selected (exit status).
std::function<int()> add_record(CLI::App& app);
std::function<int()> add_report(CLI::App& app);
std::function<int()> add_export(CLI::App& app);
std::function<int()> add_doctor(CLI::App& app);
std::function<int()> add_gmm(CLI::App& app);
std::function<int()> add_detect(CLI::App& app);
std::function<int()> add_agent(CLI::App& app);
std::function<int()> add_merge(CLI::App& app);
std::function<int()> add_gputime_library(CLI::App& app);

}  // namespace eacgm::cli
