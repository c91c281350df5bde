// The Stage-2 kernel's output rows (see attend_kernel.cuh): a thread's normalized share of one O row, in the
// output dtype, with the row's lse; or, for a split-KV launch, the fp32 partial that combine_splits_kernel merges.
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_config.cuh"
#include "mma_tiles.cuh"

namespace dashattn::cuda {

// The row of (token, head of the group head_in_group), held by this thread as fragment row half (0: lane / 4, 1:
// lane / 4 + 8) of acc_o, columns nt * 8 + 2 t4 and + 1. inv = 1 / l (0 for an empty row), lse in natural log units.
template <class Cfg>
__device__ __forceinline__ void write_output_row(const AttendArgs& a, const SequenceSpan& sp, int seq, int split,
                                                 int kv_head, int64_t token, int head_in_group, bool valid, int t4,
                                                 int half, float inv, float lse,
                                                 const float (&acc_o)[Cfg::kONTiles][4]) {
  constexpr int D = Cfg::kHeadDim;
  // Rows past the sequence: padding rows of a padded batch get o = 0 and lse = -inf; rows past the padded
  // length, or (varlen) rows that belong to the next sequence, are left alone.
  const int head = kv_head * a.group + head_in_group;
  if (token >= a.batch.padded_n_q) return;
  if (a.num_splits > 1) {
    if (!valid) return;  // the combine decides padding from the lengths
    const int64_t row_id = (int64_t(seq) * a.h_q + head) * a.batch.padded_n_q + token;
    const int64_t split_rows = int64_t(a.num_seqs) * a.h_q * a.batch.padded_n_q;
    float* po = a.part_o + (int64_t(split) * split_rows + row_id) * D;
#pragma unroll
    for (int nt = 0; nt < Cfg::kONTiles; ++nt)
      *reinterpret_cast<float2*>(po + nt * 8 + 2 * t4) =
          make_float2(acc_o[nt][2 * half] * inv, acc_o[nt][2 * half + 1] * inv);
    if (t4 == 0) a.part_lse[int64_t(split) * split_rows + row_id] = lse;
    return;
  }
  if (!valid && a.batch.cu_seqlens_q != nullptr) return;
  if (a.lse.defined() && t4 == 0)
    static_cast<float*>(a.lse.data)[row_output_offset(a.lse, sp, head, token)] = valid ? lse : -INFINITY;
  const float f = valid ? inv : 0.0f;
  const int64_t base = a.o.offset(sp.batch_index, sp.q_begin + token, head);
  if (a.o_dtype == DType::kF32) {
    float* ob = static_cast<float*>(a.o.data) + base;
#pragma unroll
    for (int nt = 0; nt < Cfg::kONTiles; ++nt)
      *reinterpret_cast<float2*>(ob + nt * 8 + 2 * t4) =
          make_float2(acc_o[nt][2 * half] * f, acc_o[nt][2 * half + 1] * f);
  } else if (a.o_dtype == DType::kBF16) {
    uint32_t* ob = reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(a.o.data) + base);
#pragma unroll
    for (int nt = 0; nt < Cfg::kONTiles; ++nt)
      ob[(nt * 8 + 2 * t4) / 2] = mma::pack2<__nv_bfloat16>(acc_o[nt][2 * half] * f, acc_o[nt][2 * half + 1] * f);
  } else {
    uint32_t* ob = reinterpret_cast<uint32_t*>(static_cast<__half*>(a.o.data) + base);
#pragma unroll
    for (int nt = 0; nt < Cfg::kONTiles; ++nt)
      ob[(nt * 8 + 2 * t4) / 2] = mma::pack2<__half>(acc_o[nt][2 * half] * f, acc_o[nt][2 * half + 1] * f);
  }
}

}  // namespace dashattn::cuda
