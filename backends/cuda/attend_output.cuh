// The Stage-2 kernel's output rows (see attend_kernel.cuh): a thread's normalized share of one O row, in the
// output dtype, with the row's lse; or, for a split-KV launch, the fp32 partial that combine_splits_kernel merges.
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_config.cuh"
#include "attend_item.cuh"
#include "mma_tiles.cuh"

namespace dashattn::cuda {

// The row's lse (write_output_row's rules for rows past the sequence); the staged path writes it alone.
__device__ __forceinline__ void write_lse_row(const AttendArgs& a, const SequenceSpan& sp, int kv_head, int64_t token,
                                              int head_in_group, bool valid, float lse) {
  if (token >= a.batch.padded_n_q || !a.lse.defined()) return;
  if (!valid && a.batch.cu_seqlens_q != nullptr) return;
  static_cast<float*>(a.lse.data)[row_output_offset(a.lse, sp, kv_head * a.group + head_in_group, token)] =
      valid ? lse : -INFINITY;
}

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
  if (t4 == 0) write_lse_row(a, sp, kv_head, token, head_in_group, valid, lse);
  if (!valid && a.batch.cu_seqlens_q != nullptr) return;
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

// A warp's 16 output rows through shared memory, where o has the input dtype and no split runs: the thread's
// fragments go to the warp's own rows of the Q buffer in Q's swizzled layout (q_swz: conflict-free both ways), then
// each lane stores whole 16-byte pieces of rows. Stored from the fragments, each store instruction covered 8 rows
// with 16 bytes each (8 lines per instruction, 32 instructions per thread at d = 128); from shared memory it covers
// whole rows (32 / (d / 8) of them) and a thread issues 16 d / 256 of them.
// The Q rows are free here: a warp reads only its own rows of Q (mma.sync, the bias table), and a warpgroup's S
// reads its warps' rows, all complete once the warp has passed its last wait; the persistent kernel's helpers
// refill Q for the next item, so it keeps write_output_row.
// f_a / f_b: the rows' normalization (1 / l; 0 for padding rows).
template <class Cfg>
__device__ __forceinline__ void stage_output_rows(typename Cfg::Element* sQ, int slab_row, int lane, float f_a,
                                                  float f_b, const float (&acc_o)[Cfg::kONTiles][4]) {
  using Element = typename Cfg::Element;
  const int t4 = lane % 4, r = slab_row + lane / 4;
  // The warp's lanes may leave the main loop apart (rows past the sequence take other branches); the ldmatrix
  // reads of these rows are then ordered before the writes only by this (racecheck warned without it).
  __syncwarp();
#pragma unroll
  for (int nt = 0; nt < Cfg::kONTiles; ++nt) {
    *reinterpret_cast<uint32_t*>(sQ + q_swz<Cfg::kRows>(r, nt * 8) + 2 * t4) =
        mma::pack2<Element>(acc_o[nt][0] * f_a, acc_o[nt][1] * f_a);
    *reinterpret_cast<uint32_t*>(sQ + q_swz<Cfg::kRows>(r + 8, nt * 8) + 2 * t4) =
        mma::pack2<Element>(acc_o[nt][2] * f_b, acc_o[nt][3] * f_b);
  }
  __syncwarp();
}

// The staged rows slab_row .. slab_row + 15 to o, a lane per 16-byte piece, with write_output_row's rules for rows
// past the sequence (padding rows get the zeros staged for them; rows past the padded length, and a packed batch's
// rows of the next sequence, are left alone).
template <class Cfg>
__device__ __forceinline__ void store_staged_rows(const AttendArgs& a, const AttendItem<Cfg>& item,
                                                  const typename Cfg::Element* sQ, int slab_row, int lane) {
  using Element = typename Cfg::Element;
  constexpr int kPieces = Cfg::kHeadDim / 8;  // 16-byte pieces of a row
  static_assert(32 % kPieces == 0, "a warp's lanes cover whole rows");
  constexpr int kRowsPerStore = 32 / kPieces;
  const int g = item.g;
  const int piece = lane % kPieces;
  int r = slab_row + lane / kPieces;
  RowCursor rc(item.r_off, r, kRowsPerStore, g);
  Element* o = static_cast<Element*>(a.o.data) +
               a.o.offset(item.sp.batch_index, item.sp.q_begin + item.first_token, int64_t(item.kv_head) * g) +
               piece * 8;
  const bool packed = a.batch.cu_seqlens_q != nullptr;
#pragma unroll
  for (int i = 0; i < 16 / kRowsPerStore; ++i, r += kRowsPerStore, rc.advance()) {
    const bool valid = item.row0 + r < item.rows_in_seq;
    if (item.first_token + rc.token_in_cta < a.batch.padded_n_q && (valid || !packed)) {
      const uint4 v = *reinterpret_cast<const uint4*>(sQ + q_swz<Cfg::kRows>(r, piece * 8));
      *reinterpret_cast<uint4*>(o + rc.token_in_cta * a.o.stride[1] + rc.head * a.o.stride[2]) = v;
    }
  }
}

// The staged rows slab_row .. slab_row + 15 to o by one tensor store per 64 columns (lane 0 issues them), where
// the launcher made o's tensor map (a.o_tma: boxes of one warp's 16 rows, min(g, 16) heads x max(1, 16 / g)
// tokens) and all 16 rows are in the sequence; false (nothing stored) otherwise. Returns once the stores have
// read the staged rows, so that the CTA may end.
template <class Cfg>
__device__ __forceinline__ bool store_staged_rows_tma(const AttendArgs& a, const AttendItem<Cfg>& item,
                                                      const typename Cfg::Element* sQ, int slab_row, int lane,
                                                      const CUtensorMap& tmap_o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (!a.o_tma || item.row0 + slab_row + 16 > item.rows_in_seq) return false;
  wgmma::fence_proxy_async();  // the lanes' staged writes, visible to the tensor store
  __syncwarp();
  if (lane == 0) {
    int token_in_cta, head;
    item.split_row(slab_row, token_in_cta, head);
    constexpr uint32_t kQBlockBytes = uint32_t(Cfg::kRows) * 128u;
    const uint32_t src = mma::smem_addr(sQ) + uint32_t(slab_row) * 128u;
#pragma unroll
    for (int cb = 0; cb < Cfg::kHeadDim / 64; ++cb)  // evict-first (attend_config.cuh)
      mma::tma_store_4d<bool(DASHATTN_ATTEND_L2_HINTS)>(&tmap_o, src + uint32_t(cb) * kQBlockBytes, cb * 64,
                                                        item.kv_head * item.g + head,
                                                        int(item.sp.q_begin + item.first_token + token_in_cta),
                                                        int(item.sp.batch_index));
    mma::tma_store_commit_and_wait_read();
  }
  return true;
#else
  (void)a, (void)item, (void)sQ, (void)slab_row, (void)lane, (void)tmap_o;
  return false;
#endif
}

// A consumer warp's two rows of the item after its main loop (row sums already reduced over the quad): o in the
// input dtype through the warp's rows of the Q buffer (one-item tilings, no key split), else straight from the
// fragments or as split partials, with the rows' lse.
template <class Cfg>
__device__ __forceinline__ void write_item_rows(const AttendArgs& a, const AttendItem<Cfg>& item, int split,
                                                typename Cfg::Element* sQ, int slab_row, int lane, bool valid_a,
                                                bool valid_b, float m_a, float m_b, float l_a, float l_b,
                                                const float (&acc_o)[Cfg::kONTiles][4], const CUtensorMap& tmap_o) {
  const int t4 = lane % 4;
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f;
  const float inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  constexpr float kLn2 = 0.6931471805599453f;
  const float lse_a = l_a > 0.0f ? (m_a + log2f(l_a)) * kLn2 : -INFINITY;
  const float lse_b = l_b > 0.0f ? (m_b + log2f(l_b)) * kLn2 : -INFINITY;
  int token_a, head_a, token_b, head_b;
  item.split_row(slab_row + lane / 4, token_a, head_a);
  item.split_row(slab_row + lane / 4 + 8, token_b, head_b);
  const bool staged_o = !Cfg::kPersistent && !Cfg::kTileSplit && a.num_splits == 1 &&
                        a.o_dtype == ElementTraits<typename Cfg::Element>::kDType;
  if (staged_o) {
    if (t4 == 0) {
      write_lse_row(a, item.sp, item.kv_head, item.first_token + token_a, head_a, valid_a, lse_a);
      write_lse_row(a, item.sp, item.kv_head, item.first_token + token_b, head_b, valid_b, lse_b);
    }
    stage_output_rows<Cfg>(sQ, slab_row, lane, valid_a ? inv_a : 0.0f, valid_b ? inv_b : 0.0f, acc_o);
    if (!store_staged_rows_tma<Cfg>(a, item, sQ, slab_row, lane, tmap_o))
      store_staged_rows<Cfg>(a, item, sQ, slab_row, lane);
  } else {
    write_output_row<Cfg>(a, item.sp, item.seq, split, item.kv_head, item.first_token + token_a, head_a, valid_a, t4,
                          0, inv_a, lse_a, acc_o);
    write_output_row<Cfg>(a, item.sp, item.seq, split, item.kv_head, item.first_token + token_b, head_b, valid_b, t4,
                          1, inv_b, lse_b, acc_o);
  }
}

}  // namespace dashattn::cuda
