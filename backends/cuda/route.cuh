// Stage 1 on the GPU: routing fused into one kernel that never writes a score tensor.
//
// Block = (tile of T query tokens, KV head r, sequence). Its R = T·g rows (row = token·g + head, the GQA group
// of each token kept together) are scored against the chunk summaries with mma.sync m16n8k16 (fp32
// accumulators), 16 chunks per tile, Q held in registers for the whole kernel. Every pass below is one sweep over
// the summary tiles the block's tokens can route to, recomputing the scores instead of storing them:
//   1. row maxima m of x = (α−1)·γ·⟨q, k̄⟩/sqrt(d);
//   2. candidates x > m − 1 (only they can be in the entmax support, since τ ≥ m − 1) appended in chunk order to
//      a per-row shared-memory list of capacity K; each row's exact τ is then solved on chip by
//      dashattn::entmax_threshold over its list (one thread per row);
//   3. only if some row overflowed its list: certified passes (the same closed-form + bracket iteration as
//      entmax.h, with the sums accumulated by the sweep) until every overflowing row is certified;
//   4. emit: per (token, chunk) the group weight w = (1/g)·Σ_h [x_h − τ_h]_+^(1/(α−1)) summed in head order as
//      dashattn::group_weight does, the mask bits (plus the diagonal), μ = mean log w over routed chunks and the
//      active count, written once each.
// All reductions have a fixed order, so results are bitwise reproducible.
#pragma once

#include <cmath>

#include "cuda_internal.cuh"

namespace dashattn {
namespace cuda {

// Rows per block for a head dim: two m16 tiles per warp while Q fits in registers, one above that.
constexpr int route_rows_per_block(int head_dim) { return head_dim <= 128 ? 128 : 64; }

// Scale of Stage 1's scores: x = dot · route_x_scale(...), dot = ⟨q, k̄⟩ accumulated in fp32 by mma.sync
// m16n8k16 over ascending k-steps of 16 from zero. Stage 2 recomputing x for the bias must use the same product.
inline float route_x_scale(float alpha, float gamma, int64_t d) {
  return static_cast<float>((static_cast<double>(alpha) - 1.0) * static_cast<double>(gamma) /
                            std::sqrt(static_cast<double>(d)));
}

template <int kHeadDim, typename T>
void route_instance(const RouteParams& p, const ProblemShape& s, cudaStream_t stream, const BiasLists* lists);

}  // namespace cuda
}  // namespace dashattn
