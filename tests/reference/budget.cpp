// The bias budget: how far a float routing's Stage-2 bias can sit from the float64 one (see BiasBudget).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "reference/reference.h"

namespace dashattn::ref {

double BiasBudget::max_delta() const {
  double m = 0.0;
  for (double v : row) m = std::max(m, v);
  return m;
}

namespace {

// log(bound / w) for a bound of w that may be 0 or far away, clamped to ±kLogCap.
double clamped_log_ratio(double bound, double w) {
  if (!(bound > 0.0)) return -BiasBudget::kLogCap;
  return std::clamp(std::log(bound / w), -BiasBudget::kLogCap, BiasBudget::kLogCap);
}

}  // namespace

BiasBudget bias_budget(const Routing& rt, const Method& m, int64_t d) {
  BiasBudget b;
  b.n_q = rt.n_q;
  b.h_kv = rt.h_kv;
  b.num_complete = rt.num_complete;
  const size_t cells = static_cast<size_t>(rt.n_q * rt.h_kv * rt.num_complete);
  b.log_ratio_lo.assign(cells, 0.0);
  b.log_ratio_hi.assign(cells, 0.0);
  b.lo.assign(cells, 0.0);
  b.hi.assign(cells, 0.0);
  b.row.assign(static_cast<size_t>(rt.n_q * rt.h_kv), 0.0);
  if (m.prior == PriorMode::kNone) return b;  // no bias, nothing to move
  if (!(m.alpha > 1.0)) throw std::invalid_argument("alpha must be > 1");

  const int64_t g = rt.h_q / rt.h_kv, nc = rt.num_complete;
  const double p = 1.0 / (m.alpha - 1.0);
  std::vector<double> w_lo, w_hi;
  for (int64_t i = 0; i < rt.n_q; ++i) {
    const int64_t ci = rt.diagonal[i];
    if (ci == 0) continue;
    for (int64_t r = 0; r < rt.h_kv; ++r) {
      // Interval of the group weight w_c = (1/g)·Σ_h ŵ_c^h; heads round independently.
      w_lo.assign(ci, 0.0);
      w_hi.assign(ci, 0.0);
      for (int64_t h = r * g; h < (r + 1) * g; ++h) {
        const double tau = rt.tau[i * rt.h_q + h];
        // x moves by δx, τ by at most δx too, and the solver resolves τ to 1e-6·max(1, |τ|).
        const double shift = 2.0 * rt.float_x_error(i, h, d) + 1e-6 * std::max(1.0, std::fabs(tau));
        // No Σŵ = 1 narrowing here: a backend's Stage 2 rebuilds x with its own dot products (a GPU may use
        // another summation order than its Stage 1), so the τ it is given and the x it recomputes are not tied
        // together by the sum constraint; each may sit anywhere in its own rounding interval.
        for (int64_t c = 0; c < ci; ++c) {
          const double u = rt.x[(i * rt.h_q + h) * nc + c] - tau;
          w_lo[c] += std::pow(std::max(u - shift, 0.0), p) / double(g);
          w_hi[c] += std::pow(std::max(u + shift, 0.0), p) / double(g);
        }
      }

      int64_t routed = 0;
      double mean_lo = 0.0, mean_hi = 0.0;
      for (int64_t c = 0; c < ci; ++c) {
        if (!rt.routed(i, r, c)) continue;
        const double w = rt.w(i, r, c);
        const size_t at = b.at(i, r, c);
        b.log_ratio_lo[at] = std::min(clamped_log_ratio(w_lo[c], w), 0.0);
        b.log_ratio_hi[at] = std::max(clamped_log_ratio(w_hi[c], w), 0.0);
        mean_lo += b.log_ratio_lo[at];
        mean_hi += b.log_ratio_hi[at];
        ++routed;
      }
      if (routed == 0) continue;
      mean_lo /= double(routed);
      mean_hi /= double(routed);

      double delta = 0.0;
      for (int64_t c = 0; c < ci; ++c) {
        if (!rt.routed(i, r, c)) continue;
        const size_t at = b.at(i, r, c);
        if (m.prior == PriorMode::kRaw) {
          b.lo[at] = b.log_ratio_lo[at];
          b.hi[at] = b.log_ratio_hi[at];
        } else {
          // μ' − μ is the mean of the routed chunks' log(w'/w), hence within [mean_lo, mean_hi].
          b.lo[at] = (b.log_ratio_lo[at] - mean_hi) / m.sigma;
          b.hi[at] = (b.log_ratio_hi[at] - mean_lo) / m.sigma;
        }
        delta = std::max({delta, -b.lo[at], b.hi[at]});
      }
      b.row[i * rt.h_kv + r] = delta;
    }
  }
  return b;
}

}  // namespace dashattn::ref
