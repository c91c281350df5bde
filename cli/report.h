// JSON descriptions shared by several subcommands (stdout reports, output-file metadata).
#pragma once

#include <nlohmann/json.hpp>

#include "dashattn/dashattn.h"
#include "problem.h"

namespace dashattn::cli {

nlohmann::json method_json(const MethodParams& m);
nlohmann::json problem_json(const HostProblem& p);
nlohmann::json stats_json(const RoutingStats& s);

}  // namespace dashattn::cli
