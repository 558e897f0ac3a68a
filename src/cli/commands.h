// The subcommands: each registers its options on the app and runs when chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace eacgm::cli {

// Each returns the action to run if its subcommand was selected (exit status).
std::function<int()> add_record(CLI::App& app);
std::function<int()> add_report(CLI::App& app);
std::function<int()> add_export(CLI::App& app);
std::function<int()> add_doctor(CLI::App& app);
std::function<int()> add_gmm(CLI::App& app);
std::function<int()> add_detect(CLI::App& app);
std::function<int()> add_agent(CLI::App& app);

}  // namespace eacgm::cli
