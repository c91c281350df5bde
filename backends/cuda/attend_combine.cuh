// Split-KV combine: merges the fp32 partials (normalized o and lse per split) of the decode path.
#pragma once

#include "attend_args.cuh"

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

  float lmax = -INFINITY;
  if (valid)
    for (int s = 0; s < a.num_splits; ++s) lmax = fmaxf(lmax, a.part_lse[s * split_rows + row_id]);
  constexpr int kPer = kHeadDim / 32;
  float acc[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
  float total = 0.0f;
  if (lmax != -INFINITY) {
    for (int s = 0; s < a.num_splits; ++s) {
      const float ls = a.part_lse[s * split_rows + row_id];
      if (ls == -INFINITY) continue;
      const float wgt = __expf(ls - lmax);
      total += wgt;
      const float* po = a.part_o + (s * split_rows + row_id) * kHeadDim;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] = fmaf(wgt, po[lane + 32 * e], acc[e]);
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

}  // namespace dashattn::cuda
