// Merging softmax states of the decode path: the split-KV combine (fp32 partials, normalized o and lse per split)
// and, inside a CTA, the tile split's per-warp states.
#pragma once

#include <cmath>

#include "attend_args.cuh"
#include "mma_tiles.cuh"

namespace dashattn::cuda {

// Merges the split partials of one row per warp: o = sum_s exp(lse_s - L) o_s, L = log sum_s exp(lse_s).
// Empty splits (lse = -inf) weigh nothing; a row with no keys at all (padding) gets o = 0, lse = -inf.
template <int kHeadDim>
__global__ void combine_splits_kernel(const AttendArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t row_id = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t split_rows = int64_t(a.num_seqs) * a.h_q * a.batch.padded_n_q;
  if (row_id >= split_rows) return;
  const int64_t token = row_id % a.batch.padded_n_q;
  const int head = int((row_id / a.batch.padded_n_q) % a.h_q);
  const int seq = int(row_id / (a.batch.padded_n_q * a.h_q));
  const SequenceSpan sp = device_sequence_span(a.batch, seq);
  const bool valid = token < sp.n_q;
  const bool varlen = a.batch.cu_seqlens_q != nullptr;

  // The loads are issued ahead of their use (the maxima by lane, the partials eight splits at a time): a loop
  // that tests each split's lse before loading its o row waits two L2 round trips per split, most of this
  // kernel's time in a decode step. The arithmetic and its order are the same for any batching: lmax is an exact
  // maximum, and the weights and o rows are accumulated in split order.
  float lmax = -INFINITY;
  if (valid)
    for (int s = lane; s < a.num_splits; s += 32) lmax = fmaxf(lmax, a.part_lse[s * split_rows + row_id]);
  for (int off = 16; off > 0; off >>= 1) lmax = fmaxf(lmax, __shfl_xor_sync(0xffffffffu, lmax, off));
  constexpr int kPer = kHeadDim / 32;
  constexpr int kBatch = 8;
  float acc[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
  float total = 0.0f;
  if (lmax != -INFINITY) {
    for (int s0 = 0; s0 < a.num_splits; s0 += kBatch) {
      float ls[kBatch], po[kBatch][kPer];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int s = s0 + j;
        ls[j] = s < a.num_splits ? a.part_lse[s * split_rows + row_id] : -INFINITY;
        const float* row = a.part_o + (int64_t(s < a.num_splits ? s : 0) * split_rows + row_id) * kHeadDim;
#pragma unroll
        for (int e = 0; e < kPer; ++e) po[j][e] = row[lane + 32 * e];
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (ls[j] == -INFINITY) continue;
        const float wgt = __expf(ls[j] - lmax);
        total += wgt;
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[e] = fmaf(wgt, po[j][e], acc[e]);
      }
    }
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const float lse = total > 0.0f ? lmax + logf(total) : -INFINITY;
  if (!valid && varlen) return;
  if (a.lse.defined() && lane == 0) static_cast<float*>(a.lse.data)[row_output_offset(a.lse, sp, head, token)] = lse;
  const int64_t base = a.o.offset(sp.batch_index, sp.q_begin + token, head);
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const float val = acc[e] * inv;
    const int64_t idx = base + lane + 32 * e;
    if (a.o_dtype == DType::kF32) static_cast<float*>(a.o.data)[idx] = val;
    else if (a.o_dtype == DType::kBF16) static_cast<__nv_bfloat16*>(a.o.data)[idx] = __float2bfloat16_rn(val);
    else static_cast<__half*>(a.o.data)[idx] = __float2half_rn(val);
  }
}

// The tile split (decode): the consumer warps of a CTA hold online-softmax states (O fragments, m, l after the
// quad reduction) of the same 16 rows over different tiles. Merged in warp order (fixed, so results are
// reproducible) through `park`, the K/V ring, which every tile has left once all consumers pass the barrier.
// Returns true in warp 0, which then holds the merged state.
template <class Cfg>
__device__ __forceinline__ bool merge_warp_states(float (&acc_o)[Cfg::kONTiles][4], float& m_a, float& m_b,
                                                  float& l_a, float& l_b, float* ring, int warp, int lane) {
  // Barrier of the consumer warps alone (named barrier 3; 1 and 2 are the warpgroups').
  auto consumers_sync = [] { asm volatile("bar.sync 3, %0;\n" ::"n"(Cfg::kWarps * 32) : "memory"); };
  constexpr int kPerLane = Cfg::kONTiles * 4 + 4;  // per lane: its O fragments, then m and l
  static_assert(size_t(Cfg::kWarps) * 32 * kPerLane * sizeof(float) <= Cfg::kRingBytes, "merge fits the ring");
  float* park = ring + size_t(warp) * 32 * kPerLane;
  consumers_sync();
  if (warp > 0) {
#pragma unroll
    for (int i = 0; i < Cfg::kONTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) park[(i * 4 + e) * 32 + lane] = acc_o[i][e];
    park[(Cfg::kONTiles * 4 + 0) * 32 + lane] = m_a;
    park[(Cfg::kONTiles * 4 + 1) * 32 + lane] = m_b;
    park[(Cfg::kONTiles * 4 + 2) * 32 + lane] = l_a;
    park[(Cfg::kONTiles * 4 + 3) * 32 + lane] = l_b;
  }
  consumers_sync();
  if (warp > 0) return false;
  for (int w = 1; w < Cfg::kWarps; ++w) {
    const float* src = ring + size_t(w) * 32 * kPerLane;
    const float mw_a = src[(Cfg::kONTiles * 4 + 0) * 32 + lane], mw_b = src[(Cfg::kONTiles * 4 + 1) * 32 + lane];
    const float lw_a = src[(Cfg::kONTiles * 4 + 2) * 32 + lane], lw_b = src[(Cfg::kONTiles * 4 + 3) * 32 + lane];
    const float mn_a = fmaxf(m_a, mw_a), mn_b = fmaxf(m_b, mw_b);
    // A state that has seen no key has m = -inf and contributes exp2(-inf) = 0 (both: 0 and 0).
    const float use_a = mn_a == -INFINITY ? 0.0f : mn_a, use_b = mn_b == -INFINITY ? 0.0f : mn_b;
    const float f_a = mma::exp2_approx(m_a - use_a), fw_a = mma::exp2_approx(mw_a - use_a);
    const float f_b = mma::exp2_approx(m_b - use_b), fw_b = mma::exp2_approx(mw_b - use_b);
#pragma unroll
    for (int i = 0; i < Cfg::kONTiles; ++i) {
      acc_o[i][0] = acc_o[i][0] * f_a + src[(i * 4 + 0) * 32 + lane] * fw_a;
      acc_o[i][1] = acc_o[i][1] * f_a + src[(i * 4 + 1) * 32 + lane] * fw_a;
      acc_o[i][2] = acc_o[i][2] * f_b + src[(i * 4 + 2) * 32 + lane] * fw_b;
      acc_o[i][3] = acc_o[i][3] * f_b + src[(i * 4 + 3) * 32 + lane] * fw_b;
    }
    l_a = l_a * f_a + lw_a * fw_a;
    l_b = l_b * f_b + lw_b * fw_b;
    m_a = mn_a;
    m_b = mn_b;
  }
  return true;
}

}  // namespace dashattn::cuda
