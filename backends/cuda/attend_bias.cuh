// The prior bias of routed chunks inside the Stage-2 kernel: one warp per chunk (chunk_bias_log2) or the
// producer warp's per-stage table (fill_stage_bias). See attend_kernel.cuh for when each is used.
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_config.cuh"
#include "mma_tiles.cuh"

namespace dashattn::cuda {

// Bias (log2 units) of routed chunk c for token i: the group weight w_c recomputed from tau as Stage 1 defined it,
// by one warp. A small group leaves lanes idle, so each head's dot product is spread over `lanes_per_head` lanes
// (a power of two, each a contiguous slice of the head dim); the per-head weights are then summed in head order
// as dashattn::group_weight does.
template <class Cfg>
__device__ float chunk_bias_log2(const AttendArgs& a, const SequenceSpan& sp, int64_t seq, int kv_head,
                                 int64_t token, int64_t c, int lane) {
  using Element = typename Cfg::Element;
  constexpr int D = Cfg::kHeadDim;
  const Element* qb = static_cast<const Element*>(a.q.data);
  const Element* kbar = static_cast<const Element*>(a.summaries.data) + a.summaries.offset(seq, c, kv_head);
  const float x_scale = (a.alpha - 1.0f) * a.gamma * rsqrtf(float(D));
  int lanes_per_head = 1;
  while (lanes_per_head * a.group < 32 && lanes_per_head * 16 <= D) lanes_per_head *= 2;
  const int heads_per_pass = 32 / lanes_per_head;
  const int span = D / lanes_per_head;  // a multiple of 8
  const int sub = lane % lanes_per_head;
  float sum = 0.0f;
  for (int h0 = 0; h0 < a.group; h0 += heads_per_pass) {
    const int h = h0 + lane / lanes_per_head;
    float dot = 0.0f;
    if (h < a.group) {
      const Element* qrow = qb + a.q.offset(sp.batch_index, sp.q_begin + token, kv_head * a.group + h);
      for (int e = sub * span; e < (sub + 1) * span; e += 8) {
        const uint4 qv = __ldg(reinterpret_cast<const uint4*>(qrow + e));
        const uint4 kv = __ldg(reinterpret_cast<const uint4*>(kbar + e));
        const Element* qe = reinterpret_cast<const Element*>(&qv);
        const Element* ke = reinterpret_cast<const Element*>(&kv);
#pragma unroll
        for (int u = 0; u < 8; ++u) dot = fmaf(float(qe[u]), float(ke[u]), dot);
      }
    }
    for (int off = lanes_per_head / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    float wh = 0.0f;
    if (h < a.group) {
      const int qh = kv_head * a.group + h;
      const float tau = static_cast<const float*>(a.tau.data)[row_output_offset(a.tau, sp, qh, token)];
      wh = entmax_weight(x_scale * dot, tau, a.alpha);
    }
    for (int j = 0; j < heads_per_pass && h0 + j < a.group; ++j)
      sum += __shfl_sync(0xffffffffu, wh, j * lanes_per_head);
  }
  float w = sum / float(a.group);
  // The mask bit is ground truth: a weight that recomputes to zero still gets a finite bias.
  if (!(w > 0.0f)) w = kMinRoutedWeight;
  const float mu = static_cast<const float*>(a.mu.data)[row_output_offset(a.mu, sp, kv_head, token)];
  return prior_bias(a.prior, logf(w), mu, a.inv_sigma) * 1.4426950408889634f;
}

// The producer warp's bias table of one stage: entry [token slot][chunk of the tile] for the CTA's tokens, the
// bias of each routed chunk (c < c_i with its bit set) and 0 elsewhere (such entries are masked or diagonal).
// The work is one dot product <q_h, kbar_c> per (token, chunk, head) unit; the 32 lanes take different units so
// their loads are in flight together (one warp per unit, with a latency chain per head, was far slower than the
// tile it served), park the head weights in `scratch`, then sum each item's heads in head order.
template <class Cfg>
__device__ void fill_stage_bias(const AttendArgs& a, const SequenceSpan& sp, int64_t seq, int kv_head,
                                int64_t first_token, int n_tokens, int64_t k0, float* table, float* scratch,
                                int lane) {
  using Element = typename Cfg::Element;
  constexpr int D = Cfg::kHeadDim;
  constexpr int kScratch = Cfg::kBiasScratch;
  const int g = a.group;
  const int per_tile = a.chunk >= kTileKeys ? 1 : (kTileKeys >> a.log2_chunk);
  const int64_t c0 = k0 >> a.log2_chunk;
  const int n_items = n_tokens * per_tile;
  // Item = (token slot t, chunk qd of the tile): its token, its chunk, and whether it carries a bias (a routed
  // chunk c < c_i whose mask bit is set).
  struct Item {
    int t, qd;
    int64_t token, c;
    bool routed;
  };
  auto item_at = [&](int item) {
    Item it;
    it.t = item / per_tile;
    it.qd = item % per_tile;
    it.token = first_token + it.t;
    it.c = c0 + it.qd;
    const int64_t diag = (sp.n_k - sp.n_q + it.token) >> a.log2_chunk;
    const uint32_t* mrow = mask_row_ptr(a, sp, kv_head, it.token);
    it.routed = it.c < diag && ((mrow[it.c >> 5] >> (it.c & 31)) & 1u);
    return it;
  };
  if (g > kScratch) {  // groups wider than the scratch: one warp per item
    for (int item = 0; item < n_items; ++item) {
      const Item it = item_at(item);
      const float bias = it.routed ? chunk_bias_log2<Cfg>(a, sp, seq, kv_head, it.token, it.c, lane) : 0.0f;
      if (lane == 0) table[it.t * 4 + it.qd] = bias;
    }
    return;
  }
  const Element* qb = static_cast<const Element*>(a.q.data);
  const float x_scale = (a.alpha - 1.0f) * a.gamma * rsqrtf(float(D));
  const int items_per_batch = kScratch / g;
  for (int item0 = 0; item0 < n_items; item0 += items_per_batch) {
    const int batch_items = min(items_per_batch, n_items - item0);
    for (int u = lane; u < batch_items * g; u += 32) {
      const int h = u % g;
      const Item it = item_at(item0 + u / g);
      const int64_t token = it.token, c = it.c;
      float wh = 0.0f;
      if (it.routed) {
        const int qh = kv_head * g + h;
        const Element* qrow = qb + a.q.offset(sp.batch_index, sp.q_begin + token, qh);
        const Element* kbar = static_cast<const Element*>(a.summaries.data) + a.summaries.offset(seq, c, kv_head);
        float dot0 = 0.0f, dot1 = 0.0f;
#pragma unroll 4
        for (int e = 0; e < D; e += 16) {
          const uint4 q0 = __ldg(reinterpret_cast<const uint4*>(qrow + e));
          const uint4 q1 = __ldg(reinterpret_cast<const uint4*>(qrow + e + 8));
          const uint4 k0v = __ldg(reinterpret_cast<const uint4*>(kbar + e));
          const uint4 k1v = __ldg(reinterpret_cast<const uint4*>(kbar + e + 8));
          const Element* qe0 = reinterpret_cast<const Element*>(&q0);
          const Element* qe1 = reinterpret_cast<const Element*>(&q1);
          const Element* ke0 = reinterpret_cast<const Element*>(&k0v);
          const Element* ke1 = reinterpret_cast<const Element*>(&k1v);
#pragma unroll
          for (int v = 0; v < 8; ++v) {
            dot0 = fmaf(float(qe0[v]), float(ke0[v]), dot0);
            dot1 = fmaf(float(qe1[v]), float(ke1[v]), dot1);
          }
        }
        const float tau = static_cast<const float*>(a.tau.data)[row_output_offset(a.tau, sp, qh, token)];
        wh = entmax_weight(x_scale * (dot0 + dot1), tau, a.alpha);
      }
      scratch[u] = wh;
    }
    __syncwarp();
    for (int i = lane; i < batch_items; i += 32) {
      const Item it = item_at(item0 + i);
      float bias = 0.0f;
      if (it.routed) {
        float sum = 0.0f;
        for (int h = 0; h < g; ++h) sum += scratch[i * g + h];
        float w = group_mean(sum, g);
        // The mask bit is ground truth: a weight that recomputes to zero still gets a finite bias.
        if (!(w > 0.0f)) w = kMinRoutedWeight;
        const float mu = static_cast<const float*>(a.mu.data)[row_output_offset(a.mu, sp, kv_head, it.token)];
        bias = prior_bias(a.prior, logf(w), mu, a.inv_sigma) * 1.4426950408889634f;
      }
      table[it.t * 4 + it.qd] = bias;
    }
    __syncwarp();
  }
}

}  // namespace dashattn::cuda
