// α-entmax threshold, the textbook way: sort, then test each top-k closed form against its support certificate.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "reference/reference.h"

namespace dashattn::ref {

namespace {

double weight_of(double y, double alpha) {
  if (!(y > 0.0)) return 0.0;
  if (alpha == 2.0) return y;
  if (alpha == 1.5) return y * y;
  return std::pow(y, 1.0 / (alpha - 1.0));
}

double max_of(const std::vector<double>& x) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v);
  return m;
}

// Root of Σ_{top k} (y − τ)^{1/(α−1)} = 1 assuming exactly the top k values are above τ, for y already shifted
// by the maximum. NaN when that support admits no root (the quadratic has no real solution).
double top_k_threshold(double s1, double s2, int64_t k, double alpha) {
  const double kd = static_cast<double>(k);
  if (alpha == 2.0) return (s1 - 1.0) / kd;
  // α = 1.5: Σ (y − τ)² = 1  ⇔  k·τ² − 2·S1·τ + S2 − 1 = 0; the support lies above τ, so the smaller root.
  const double mean = s1 / kd;
  const double spread = 1.0 / kd - (s2 / kd - mean * mean);
  if (spread < 0.0) return std::numeric_limits<double>::quiet_NaN();
  return mean - std::sqrt(spread);
}

}  // namespace

double entmax_threshold_bisection(const std::vector<double>& x, double alpha, double tol) {
  if (x.empty()) throw std::invalid_argument("entmax of an empty vector");
  if (!(alpha > 1.0)) throw std::invalid_argument("entmax needs alpha > 1");
  const double m = max_of(x);
  // At m − 1 the maximum alone weighs 1 (sum ≥ 1); at m nothing weighs anything (sum 0 < 1).
  double lo = m - 1.0, hi = m;
  const double width = tol * std::max(1.0, std::fabs(m));
  for (int it = 0; it < 4000 && hi - lo > width; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;  // the bracket no longer shrinks in double
    if (entmax_weight_sum(x, mid, alpha) >= 1.0) lo = mid; else hi = mid;
  }
  return 0.5 * (lo + hi);
}

double entmax_threshold_sorted(const std::vector<double>& x, double alpha) {
  if (x.empty()) throw std::invalid_argument("entmax of an empty vector");
  if (alpha != 1.5 && alpha != 2.0) return entmax_threshold_bisection(x, alpha);

  // Work on y = x − max so that the closed forms see values in (−1, 0] on the support, whatever the magnitude.
  const double m = max_of(x);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] - m;
  std::sort(y.begin(), y.end(), std::greater<double>());

  const int64_t n = static_cast<int64_t>(y.size());
  double s1 = 0.0, s2 = 0.0;
  for (int64_t k = 1; k <= n; ++k) {
    s1 += y[k - 1];
    s2 += y[k - 1] * y[k - 1];
    const double tau = top_k_threshold(s1, s2, k, alpha);
    if (std::isnan(tau)) continue;
    const double next = k < n ? y[k] : -std::numeric_limits<double>::infinity();
    // Certificate: exactly the top k lie above τ, so the closed form is the root of the full weight sum.
    if (tau < y[k - 1] && tau >= next) return m + tau;
  }
  // Rounding can void every certificate by an ulp (heavy ties); the bisection answer is then the threshold.
  return entmax_threshold_bisection(x, alpha);
}

std::vector<double> entmax_weights(const std::vector<double>& x, double tau, double alpha) {
  std::vector<double> w(x.size());
  for (size_t i = 0; i < x.size(); ++i) w[i] = weight_of(x[i] - tau, alpha);
  return w;
}

double entmax_weight_sum(const std::vector<double>& x, double tau, double alpha) {
  double sum = 0.0;
  for (double v : x) sum += weight_of(v - tau, alpha);
  return sum;
}

bool is_entmax_tie(double x, double tau) { return std::fabs(x - tau) <= 1e-6 * std::max(1.0, std::fabs(tau)); }

}  // namespace dashattn::ref
