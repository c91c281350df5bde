// Runs the built dashattn binary as a subprocess and captures its exit code, stdout and stderr.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dashattn_test {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  nlohmann::json json() const;  // stdout parsed as JSON (throws if it is not)
};

// Arguments are quoted for the shell; environment variables can be set with env (NAME=VALUE entries).
CliResult run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {});

// A fresh file name in the test's scratch directory.
std::string scratch_path(const std::string& name);

}  // namespace dashattn_test
