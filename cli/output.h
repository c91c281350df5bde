// Text and JSON output helpers: aligned tables, number formatting, a progress bar for long runs.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dashattn::cli {

// Column-aligned text table; numeric-looking cells are right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);
  void print(std::ostream& out, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

std::string format_fixed(double value, int decimals);
std::string format_general(double value, int significant = 4);  // 1.234e-05, 0.1234
std::string format_percent(double fraction, int decimals = 1);  // "93.8%"
std::string format_bytes(uint64_t bytes);                        // "1.5 MiB"
std::string format_shape(const std::vector<int64_t>& shape);     // "[2, 64, 4, 128]"

void print_json(const nlohmann::json& value);  // pretty, on stdout

// A one-line progress bar on stderr, drawn only when stderr is a terminal (so logs and pipes stay clean).
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();
  void advance(int64_t steps = 1);
  void finish();

 private:
  void draw();
  std::string label_;
  int64_t total_ = 0, done_ = 0;
  bool enabled_ = false, finished_ = false;
  int last_permille_ = -1;
};

}  // namespace dashattn::cli
