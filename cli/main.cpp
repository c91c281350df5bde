// dashattn: the command-line tool over libdashattn's public API.
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "dashattn/error.h"
#include "dashattn/version.h"
#include "exit_codes.h"

namespace {

std::string version_text() {
  return std::string("dashattn ") + DASHATTN_VERSION_STRING + "\ncompiled backends: " + DASHATTN_COMPILED_BACKENDS;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dashattn::cli;
  CLI::App app{"dashattn: DashAttention sparse attention from the command line", "dashattn"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", version_text(), "Print the version and the compiled backends, then exit");
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 verification failed, 2 usage error, 3 invalid input, 4 backend unavailable, "
             "5 I/O error.\nRun 'dashattn <subcommand> --help' for the flags of a subcommand.");

  const std::vector<Command> commands = {
      add_demo_command(app),   add_run_command(app),     add_decode_command(app),   add_verify_command(app),
      add_bench_command(app),  add_inspect_command(app), add_backends_command(app),
  };

  // CLI11 reports an unknown subcommand only as "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const Command& c : commands) {
      found = found || c.app->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!found) {
      std::cerr << "error: unknown subcommand '" << argv[1] << "' (expected one of: " << known << ")\n";
      return kExitUsage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << "\nRun with --help for the accepted flags.\n";
    return kExitUsage;
  }

  try {
    for (const Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
    std::cerr << "error: no subcommand given\n";
    return kExitUsage;
  } catch (const dashattn::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return exit_code_for(e.code());
  } catch (const CLI::ParseError& e) {
    // Subcommands may raise usage errors after parsing (for example a flag that only makes sense with another).
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory\n";
    return kExitInvalidInput;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
}
