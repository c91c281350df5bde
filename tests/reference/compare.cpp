// Error statistics and the FlashAttention tolerance rule: a backend may be at most twice as far from float64 as
// a straightforward computation in the same precision, plus a small absolute slack.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "reference/reference.h"

namespace dashattn::ref {

void ErrorStats::add(double got, double want) {
  ++count;
  if (!std::isfinite(got) || !std::isfinite(want)) {
    // Equal infinities (−inf lse of padding) agree; anything else non-finite is an error.
    if (got == want) return;
    ++nonfinite;
    return;
  }
  const double e = std::fabs(got - want);
  max_abs = std::max(max_abs, e);
  sum_abs += e;
}

void ErrorStats::add(double got, double want, double allowance) {
  ++count;
  if (!std::isfinite(got) || !std::isfinite(want)) {
    if (got == want) return;
    ++nonfinite;
    return;
  }
  const double e = std::max(0.0, std::fabs(got - want) - allowance);
  max_abs = std::max(max_abs, e);
  sum_abs += e;
}

void ErrorStats::finish() { mean_abs = count > 0 ? sum_abs / double(count) : 0.0; }

bool ToleranceCheck::pass() const {
  return got.nonfinite == 0 && excess.max_abs <= 2.0 * naive.max_abs + atol &&
         excess.mean_abs <= 2.0 * naive.mean_abs + atol;
}

std::string ToleranceCheck::describe() const {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "max %.3g (naive %.3g) mean %.3g (naive %.3g) atol %.1g nonfinite %lld",
                        got.max_abs, naive.max_abs, got.mean_abs, naive.mean_abs, atol,
                        static_cast<long long>(got.nonfinite));
  if (max_allowance > 0.0 && n > 0 && n < static_cast<int>(sizeof buf))
    std::snprintf(buf + n, sizeof buf - n, "; beyond the bias budget max %.3g mean %.3g (budget up to %.3g)",
                  excess.max_abs, excess.mean_abs, max_allowance);
  return buf;
}

ToleranceCheck check_tolerance(const std::vector<double>& got, const std::vector<double>& want,
                               const std::vector<double>& naive, double atol,
                               const std::vector<double>& allowance) {
  if (got.size() != want.size() || naive.size() != want.size())
    throw std::invalid_argument("check_tolerance: sizes differ");
  if (!allowance.empty() && allowance.size() != want.size())
    throw std::invalid_argument("check_tolerance: allowance size differs");
  ToleranceCheck c;
  c.atol = atol;
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = allowance.empty() ? 0.0 : allowance[i];
    if (!(a >= 0.0)) throw std::invalid_argument("check_tolerance: allowance must be >= 0");
    c.got.add(got[i], want[i]);
    c.excess.add(got[i], want[i], a);
    c.naive.add(naive[i], want[i]);
    c.max_allowance = std::max(c.max_allowance, a);
  }
  c.got.finish();
  c.excess.finish();
  c.naive.finish();
  return c;
}

double default_atol(DType out_dtype) {
  // fp32 outputs: reordered fp32 sums over ~1e3 keys drift by ~1e-6 and a SIMD exp adds a few ulp per term,
  // while the naive fp32 error can be far smaller by luck. 16-bit outputs are dominated by the naive error.
  (void)out_dtype;
  return 1e-5;
}

double dtype_spacing(double magnitude, DType dtype) {
  int mantissa_bits = 23;  // explicit fraction bits
  int min_exp = -126;      // exponent of the smallest normal
  if (dtype == DType::kBF16) mantissa_bits = 7;
  if (dtype == DType::kF16) {
    mantissa_bits = 10;
    min_exp = -14;
  }
  if (dtype == DType::kF64) {
    mantissa_bits = 52;
    min_exp = -1022;
  }
  const int exp = magnitude > 0 ? std::max(static_cast<int>(std::floor(std::log2(magnitude))), min_exp) : min_exp;
  return std::ldexp(1.0, exp - mantissa_bits);
}

double ulp_distance(double a, double b, DType dtype) {
  if (a == b) return 0.0;
  return std::fabs(a - b) / dtype_spacing(std::max(std::fabs(a), std::fabs(b)), dtype);
}

bool agree_across_paths(double a, double b, DType out_dtype) {
  if (!std::isfinite(a) || !std::isfinite(b)) return a == b;
  if (out_dtype == DType::kF32) return std::fabs(a - b) <= 2e-5 * std::max(1.0, std::fabs(a));
  return ulp_distance(a, b, out_dtype) <= 1.0;
}

}  // namespace dashattn::ref
