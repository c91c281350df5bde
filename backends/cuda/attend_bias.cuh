// The prior bias of routed chunks inside the Stage-2 kernel: one warp per chunk (chunk_bias_log2), the producer
// warp's per-stage table (fill_stage_bias), or the consumer warps' own rows (ConsumerRowBias, for the per-CTA table
// and the per-tile bias). See attend_kernel.cuh for when each is used.
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_config.cuh"
#include "mma_tiles.cuh"

namespace dashattn::cuda {

// The prior bias of a routed chunk of log group weight log_w in log2 units (the logits' units), for a token of mean
// log weight mu: every path of Stage 2's bias ends here, whether it recomputed w or took Stage 1's (bias_lists.cuh).
__device__ __forceinline__ float prior_bias_log2(const AttendArgs& a, float log_w, float mu) {
  return prior_bias(a.prior, log_w, mu, a.inv_sigma) * 1.4426950408889634f;
}

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
  return prior_bias_log2(a, logf(w), mu);
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
        bias = prior_bias_log2(a, logf(w), mu);
      }
      table[it.t * 4 + it.qd] = bias;
    }
    __syncwarp();
  }
}

// The prior bias that the consumer warps rebuild for their own rows (the instances with kConsumerBias: g divides 16,
// so a warp's 16 rows are whole tokens): for this thread's two fragment rows (lane / 4 and lane / 4 + 8 of the warp's
// slab) from x = the warp's Q rows times k̄ rows of one m16n8k16 n-tile. Used by the per-CTA table (attend_table.cuh)
// and by the per-tile bias of the main loop.
template <int kHeadDim>
struct ConsumerRowBias {
  const AttendArgs& a;
  int g, lane;
  // g divides 16, so it is a power of two and sum * (1 / g) rounds exactly as sum / g (without the division's
  // slow-path check).
  float inv_g;
  const float2* row_tau_mu;  // [16] of the warp's rows: τ of the row's head, μ of its token
  float* row_bias;           // [16][4]: the bias of the current tile's chunks 0..3 per row (the per-tile bias)

  // The bias (log2 units) of a token from the group sum of its heads' entmax weights and its mu.
  __device__ __forceinline__ float bias_of(float sum, float mu) const {
    float w = sum * inv_g;
    // The mask bit is ground truth: a weight that recomputes to zero still gets a finite bias.
    if (!(w > 0.0f)) w = kMinRoutedWeight;
    return prior_bias_log2(a, logf(w), mu);
  }
  // The bias of row a's token (lane / 4) from a group sum.
  __device__ __forceinline__ float row_a_bias(float sum) const { return bias_of(sum, row_tau_mu[lane / 4].y); }
  // The heads' entmax weights of x (columns 2 t4 and 2 t4 + 1 of an n-tile) for this thread's two rows.
  __device__ __forceinline__ void head_weights(const float (&x)[4], float& wa0, float& wa1, float& wb0,
                                               float& wb1) const {
    const float x_scale = (a.alpha - 1.0f) * a.gamma * rsqrtf(float(kHeadDim));
    const float tau_a = row_tau_mu[lane / 4].x, tau_b = row_tau_mu[lane / 4 + 8].x;
    if (a.alpha == 1.5f) {
      // entmax_weight's values for alpha = 1.5, [y]_+^2, by selects: one (uniform) branch per call here instead
      // of a branch region per weight, which the compiler made of the call's clamp and alpha tests (the bias
      // table calls this 4 times per 32 chunks and thread; perf-log.md, thirty-second pass).
      auto sq = [](float y) {
        const float r = y > 0.0f ? y : 0.0f;
        return r * r;
      };
      wa0 = sq(x_scale * x[0] - tau_a);
      wa1 = sq(x_scale * x[1] - tau_a);
      wb0 = sq(x_scale * x[2] - tau_b);
      wb1 = sq(x_scale * x[3] - tau_b);
    } else {
      wa0 = entmax_weight(x_scale * x[0], tau_a, a.alpha);
      wa1 = entmax_weight(x_scale * x[1], tau_a, a.alpha);
      wb0 = entmax_weight(x_scale * x[2], tau_b, a.alpha);
      wb1 = entmax_weight(x_scale * x[3], tau_b, a.alpha);
    }
  }
  // Group sums of the n-tile's columns 2 t4 and 2 t4 + 1 (chunks) for this thread's two rows, from x (columns 4..7
  // repeat rows 0..3 of the buffer): each head's entmax weight summed over its token's rows (the butterfly below).
  __device__ __forceinline__ void group_sums(const float (&x)[4], float& sa0, float& sa1, float& sb0,
                                             float& sb1) const {
    float wa0, wa1, wb0, wb1;
    head_weights(x, wa0, wa1, wb0, wb1);
    // The group sum: a token's g rows are g consecutive fragment rows (lane groups lane / 4, and for g = 16 both
    // halves), so a butterfly over those lanes adds them in a fixed order that every Stage-2 path shares (a decode
    // step and its prefill row rebuild bitwise-equal biases; group_sums16_scattered adds in the same order). It is
    // not group_weight's head order, which changes the bias by a rounding at most; the mask bit, not the weight,
    // decides what is routed.
    sa0 = wa0, sa1 = wa1, sb0 = wb0, sb1 = wb1;
    if (g == 16) {
      sa0 += wb0;
      sa1 += wb1;
#pragma unroll
      for (int off = 16; off >= 4; off >>= 1) {
        sa0 += __shfl_xor_sync(0xffffffffu, sa0, off);
        sa1 += __shfl_xor_sync(0xffffffffu, sa1, off);
      }
      sb0 = sa0;
      sb1 = sa1;
    } else {
      // g divides 8: a token's rows lie within one half, at lane groups that differ in the low log2(g) bits.
      for (int off = 4; off < 4 * g; off <<= 1) {
        sa0 += __shfl_xor_sync(0xffffffffu, sa0, off);
        sa1 += __shfl_xor_sync(0xffffffffu, sa1, off);
        sb0 += __shfl_xor_sync(0xffffffffu, sb0, off);
        sb1 += __shfl_xor_sync(0xffffffffu, sb1, off);
      }
    }
  }
  // g = 16, four n-tiles xs[u] at once: the group sum of one column per lane, column 2 t4 + k % 2 of n-tile k / 2
  // with k = lane / 4 % 8. The butterfly's additions, in its order, as a reduce-scatter: at each lane bit (16, 8,
  // then 4) a lane keeps half of its sums and adds its partner's share of that half, so the 32 sums take 7 shuffles
  // instead of 24 plus 8 to gather them (bitwise the butterfly's sums: the same operands added in the same order).
  __device__ __forceinline__ float group_sums16_scattered(const float (&xs)[4][4]) const {
    float v[8];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float wa0, wa1, wb0, wb1;
      head_weights(xs[u], wa0, wa1, wb0, wb1);
      v[2 * u] = wa0 + wb0;
      v[2 * u + 1] = wa1 + wb1;
    }
#pragma unroll
    for (int half = 4, bit = 16; half >= 1; half >>= 1, bit >>= 1) {
      const bool upper = (lane & bit) != 0;
#pragma unroll
      for (int j = 0; j < half; ++j) {
        const float send = upper ? v[j] : v[j + half];
        const float keep = upper ? v[j + half] : v[j];
        v[j] = keep + __shfl_xor_sync(0xffffffffu, send, bit);
      }
    }
    return v[0];
  }
  // The biases of this thread's two rows for columns 2 t4 and 2 t4 + 1 of x.
  __device__ __forceinline__ void group_bias(const float (&x)[4], float& ba0, float& ba1, float& bb0,
                                             float& bb1) const {
    float sa0, sa1, sb0, sb1;
    group_sums(x, sa0, sa1, sb0, sb1);
    const float mu_a = row_tau_mu[lane / 4].y, mu_b = row_tau_mu[lane / 4 + 8].y;
    ba0 = bias_of(sa0, mu_a);
    ba1 = bias_of(sa1, mu_a);
    if (g == 16) {
      // Both rows are the same token (sb = sa, mu_b = mu_a): the same two biases, without two more logarithms.
      // The logarithms were most of the bias table's instructions (perf-log.md, seventh pass).
      bb0 = ba0;
      bb1 = ba1;
    } else {
      bb0 = bias_of(sb0, mu_b);
      bb1 = bias_of(sb1, mu_b);
    }
  }
  // The per-tile bias: the tile's chunks 0..3 (x of its k̄ rows) into row_bias.
  __device__ __forceinline__ void store_tile(const float (&x)[4]) const {
    float ba0, ba1, bb0, bb1;
    group_bias(x, ba0, ba1, bb0, bb1);
    // Every lane is done reading the previous tile's biases (the shuffles between do not order memory).
    __syncwarp();
    if (lane % 4 < 2) {  // columns 2 * t4 and 2 * t4 + 1 are chunks 0..3 of the tile
      *reinterpret_cast<float2*>(row_bias + (lane / 4) * 4 + 2 * (lane % 4)) = make_float2(ba0, ba1);
      *reinterpret_cast<float2*>(row_bias + (lane / 4 + 8) * 4 + 2 * (lane % 4)) = make_float2(bb0, bb1);
    }
    __syncwarp();
  }
};

}  // namespace dashattn::cuda
