#include "output.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace dashattn::cli {
namespace {

bool looks_numeric(const std::string& s) {
  if (s.empty()) return false;
  const char c = s[0];
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.';
}

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& out, const std::string& indent) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::ostringstream s;
    s << indent;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool right = !header && looks_numeric(cells[c]);
      s << (right ? std::right : std::left) << std::setw(static_cast<int>(width[c])) << cells[c];
      if (c + 1 < cells.size()) s << "  ";
    }
    std::string text = s.str();
    text.erase(text.find_last_not_of(' ') + 1);
    out << text << '\n';
  };
  line(headers_, true);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule, true);
  for (const auto& row : rows_) line(row, false);
}

std::string format_fixed(double value, int decimals) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << value;
  return s.str();
}

std::string format_general(double value, int significant) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  std::ostringstream s;
  s << std::setprecision(significant) << value;
  return s.str();
}

std::string format_percent(double fraction, int decimals) { return format_fixed(100.0 * fraction, decimals) + "%"; }

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? std::to_string(bytes) + " B" : format_fixed(v, 1) + " " + units[u];
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void print_json(const nlohmann::json& value) {
  // Non-finite numbers (lse = -inf of padding) are not JSON; nlohmann writes them as null, which is what we want.
  std::cout << value.dump(2) << std::endl;
}

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 1)), enabled_(isatty(STDERR_FILENO) != 0) {
  draw();
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(int64_t steps) {
  done_ = std::min(total_, done_ + steps);
  draw();
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

void ProgressBar::draw() {
  if (!enabled_ || finished_) return;
  const int permille = static_cast<int>(1000 * done_ / total_);
  if (permille == last_permille_) return;
  last_permille_ = permille;
  constexpr int kWidth = 30;
  const int filled = permille * kWidth / 1000;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld", label_.c_str(), bar.c_str(), static_cast<long long>(done_),
               static_cast<long long>(total_));
  std::fflush(stderr);
}

}  // namespace dashattn::cli
