// The subcommands: each registers its options on the app and runs when chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <string>

namespace eacgm::cli {

// A number option's finite check: NaN passes a range check (it compares false both ways), and
// a NaN duration or window once meant an agent that never stopped.
inline CLI::Validator finite_number(const std::string& what = "a finite number") {
  return CLI::Validator(
      [what](std::string& v) {
        return std::isfinite(std::stod(v)) ? std::string() : "give " + what;
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

}  // namespace eacgm::cli
