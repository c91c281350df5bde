// The subcommands of the dashattn tool. Each add_* function registers its flags on the parent app and returns the
// function main() runs when that subcommand was given; it returns the process exit code (exit_codes.h) and may
// throw dashattn::Error, which main() maps to an exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace dashattn::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_demo_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_decode_command(CLI::App& parent);
Command add_verify_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_inspect_command(CLI::App& parent);
Command add_backends_command(CLI::App& parent);

}  // namespace dashattn::cli
