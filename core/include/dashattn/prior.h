// Prior bias of Stage 2 (Proposition 1 of the paper) and the routing weights it is built from.
//
// Stage 1 stores, per query, the exact entmax threshold τ of each query head and μ = mean log w over the routed
// chunks. Stage 2 (or anyone else) recomputes the group weight w_c of a routed chunk from those numbers with
// group_weight(); the bias is then prior_bias(). Keeping τ and μ instead of an [n, h_kv, num_chunks] bias array
// is what lets the GPU backend never write a score-sized tensor.
#pragma once

#include <cmath>
#include <cstdint>

#include "dashattn/dtype.h"
#include "dashattn/entmax.h"

namespace dashattn {

enum class PriorMode : uint8_t {
  kEstimateDiagonal,  // d = (log w − μ)/σ on routed chunks, 0 on the diagonal (the paper's method)
  kRaw,               // d = log w on routed chunks, 0 on the diagonal (the released model config's default)
  kNone,              // d = 0: routing mask only (σ → ∞)
};

const char* prior_mode_name(PriorMode m) noexcept;                    // "estimate_diagonal", "raw", "none"
bool parse_prior_mode(const char* name, PriorMode* out) noexcept;

// Bias d of a routed chunk whose group weight has logarithm log_w.
DASHATTN_HD float prior_bias(PriorMode mode, float log_w, float mu, float inv_sigma) {
  switch (mode) {
    case PriorMode::kEstimateDiagonal: return (log_w - mu) * inv_sigma;
    case PriorMode::kRaw: return log_w;
    default: return 0.0f;
  }
}

// The group mean sum / g of a sum of non-negative head weights, without a division where the sum is 0 (most chunks
// of a row weigh nothing; see divide_unless_zero).
DASHATTN_HD float group_mean(float sum, int g) { return divide_unless_zero(sum, static_cast<float>(g)); }

// Group weight w_c = (1/g) Σ_h ŵ^h_c of one chunk, from the g heads' scaled scores x_h = (α−1)·z̄^h_c and
// thresholds τ_h. Summed in head order in float: every backend must use this function so weights agree bitwise.
template <typename HeadX, typename HeadTau>
DASHATTN_HD float group_weight(const HeadX& x, const HeadTau& tau, int g, float alpha) {
  float sum = 0.0f;
  for (int h = 0; h < g; ++h) sum += entmax_weight(x(h), tau(h), alpha);
  return group_mean(sum, g);
}

}  // namespace dashattn
