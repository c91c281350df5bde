// dashattn backends: the registry with availability, reason and priority.
#include <iostream>
#include <memory>

#include "commands.h"
#include "dashattn/dashattn.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"

namespace dashattn::cli {

Command add_backends_command(CLI::App& parent) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* app = parent.add_subcommand("backends", "List the backends of this build: availability, reason, priority");
  app->add_flag("--json", options->json, "Machine-readable JSON on stdout instead of text");

  auto run = [options]() -> int {
    Registry& registry = Registry::instance();
    const std::vector<Backend*> all = registry.all();
    Backend* chosen = nullptr;
    std::string auto_error;
    try {
      chosen = &registry.select("auto");
    } catch (const Error& e) {
      auto_error = e.what();
    }

    if (options->json) {
      nlohmann::json j;
      j["compiled"] = compiled_backends();
      j["auto"] = chosen != nullptr ? nlohmann::json(chosen->name()) : nlohmann::json(nullptr);
      j["backends"] = nlohmann::json::array();
      for (Backend* b : all) {
        const Probe pr = b->probe();
        j["backends"].push_back({{"name", b->name()},
                                 {"device", device_type_name(b->device_type())},
                                 {"available", pr.available},
                                 {"reason", pr.reason},
                                 {"priority", b->priority()}});
      }
      print_json(j);
      return kExitOk;
    }

    Table table({"backend", "device", "available", "priority", "details"});
    for (Backend* b : all) {
      const Probe pr = b->probe();
      table.add_row({b->name(), device_type_name(b->device_type()), pr.available ? "yes" : "no",
                     std::to_string(b->priority()), pr.reason});
    }
    table.print(std::cout);
    if (chosen != nullptr) {
      std::cout << "auto selects: " << chosen->name() << "\n";
    } else {
      std::cout << "auto selects nothing: " << auto_error << "\n";
    }
    return kExitOk;
  };
  return {app, run};
}

}  // namespace dashattn::cli
