#include "cli_runner.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dashattn_test {
namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

nlohmann::json CliResult::json() const { return nlohmann::json::parse(out); }

std::string scratch_path(const std::string& name) {
  ::mkdir(DASHATTN_CLI_TEST_DIR, 0755);
  return std::string(DASHATTN_CLI_TEST_DIR) + "/" + name;
}

CliResult run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  static int counter = 0;
  const std::string err_path = scratch_path("stderr_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::string cmd;
  for (const std::string& e : env) cmd += e + " ";
  cmd += quote(DASHATTN_CLI_PATH);
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " 2>" + quote(err_path);

  CliResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed for: " + cmd);
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, got);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.err = read_file(err_path);
  std::remove(err_path.c_str());
  return r;
}

}  // namespace dashattn_test
