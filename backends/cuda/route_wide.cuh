// Stage-1 decode kernel (sm_90), one wide CTA per (sequence, KV head): sixteen warps hold every query row of the
// pair (one m16 tile) and every chunk's score in shared memory, so the routing needs no exchange between CTAs. The
// summaries stream in rounds of 256 chunks (one 16-chunk sub-tile per warp), two rounds in flight, as tensor copies
// of 64-chunk boxes in the 128-byte swizzle of the attention kernels' K tiles, completing on the round's mbarrier
// (per-thread 16-byte copies, and a bulk copy per summary row, each left one SM at ~26 GB/s: 256 KB per pair at
// 64K took ~10 us; tensor copies ~7.5 us). Scoring also keeps each sub-tile's row maxima; then warp ρ takes row
// ρ's maximum, compacts its candidates x > m − 1 − margin in chunk order and solves its exact τ
// (warp_entmax_threshold: the same list and sums as every other solver, so the same τ bits), then turns its row's
// scores into head weights in place (while other warps still solve); after one CTA barrier the warps emit the mask
// words (group weight summed in head order from 0, bit = w > 0), then μ (its sums in the cluster kernel's order)
// and the active count per token. Mask, τ, μ and active counts are bitwise the
// cluster kernel's.
//
// Why a kernel of its own: the cluster kernel (route_cluster.cuh) splits a pair's chunks over up to eight CTAs
// and spends much of a step in the waits of its cluster barriers (perf-log.md, nineteenth pass). When the pairs
// alone fill a good part of the GPU (a batched decode step), one CTA per pair needs no cluster barrier at all;
// with few pairs and many chunks, the cluster kernel's spread of the loads over more SMs wins (twentieth pass).
// Sequences of up to kWideMaxChunks chunks and head dims 64 and 128 (shared memory, whole 128-byte column blocks);
// the launcher (route_launch.cuh) chooses between the two kernels. Included only through route_launch.cuh.
#pragma once

#include <cmath>
#include <cstdint>

#include "mma_tiles.cuh"
#include "phase_clocks.cuh"
#include "route_cluster.cuh"
#include "route_decode.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

constexpr int kWideWarps = 16;
constexpr int kWideThreads = kWideWarps * 32;
constexpr int kWideRoundChunks = kWideWarps * kSubChunks;  // 256: one sub-tile per warp and round
constexpr int kWideMaxRows = 16;                           // one m16 tile
constexpr int kWideMaxChunks = 1024;                       // the score rows' shared memory

struct WideArgs {
  int per_cap;       // chunks per row the launch sized for (a multiple of 32, at most kWideMaxChunks)
  int rows_alloc;    // query rows per pair the launch sized for
  int tokens_alloc;  // query tokens per sequence the launch sized for
  int mu_parts;      // the cluster kernel's CTAs for this launch shape: μ's sums follow its order
};

// Shared memory (from the first 1024-byte boundary, as the swizzle needs): two rounds of summary rows, each as
// kHeadDim / 64 column blocks [256 rows][128 bytes]; Q; the sub-tiles' row maxima [rows][kWideMaxChunks / 16]; the
// scores [rows][per_cap + 1] (odd stride: the fragment stores of eight rows land in different banks), which become
// the rows' head weights once solved. The candidate lists [rows][per_cap] reuse the rounds' space, which is dead
// once every chunk is scored.
template <int kHeadDim>
struct WideSmem {
  using C = Config<kHeadDim>;
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr size_t kBlockBytes = size_t(kWideRoundChunks) * 128;
  static constexpr size_t kRoundBytes = kColBlocks * kBlockBytes;
  static constexpr size_t kStageBytes = 2 * kRoundBytes;
  static constexpr size_t kQBytes = size_t(kWideMaxRows) * C::kTileStride * 2;
  static constexpr size_t kSubMaxBytes = size_t(kWideMaxRows) * (kWideMaxChunks / kSubChunks) * 4;
  static_assert(kHeadDim % 64 == 0, "whole 128-byte column blocks");
  static_assert(size_t(kWideMaxRows) * kWideMaxChunks * 4 <= kStageBytes, "the lists fit the rounds' space");
  static __host__ __device__ int score_stride(int per_cap) { return per_cap + 1; }
  static __host__ __device__ size_t q_off() { return kStageBytes; }
  static __host__ __device__ size_t submax_off() { return kStageBytes + kQBytes; }
  static __host__ __device__ size_t score_off() { return submax_off() + kSubMaxBytes; }
  // Dynamic shared memory to ask for: the layout plus the alignment slack.
  static __host__ __device__ size_t bytes(const WideArgs& w) {
    return 1024 + score_off() + size_t(w.rows_alloc) * score_stride(w.per_cap) * 4;
  }
};

// score_subtile's MMAs (the same fragments, so the same scores) with the summary rows read from the swizzled
// column blocks at `buf` (shared address): `row` is this lane's row of the ldmatrix_x4 (as in score_subtile).
template <typename T, int kKS>
__device__ __forceinline__ void score_subtile_swizzled(float (&acc)[1][2][4], const uint32_t (&qf)[1][kKS][4],
                                                       uint32_t buf, int row, int lane) {
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[0][n][i] = 0.0f;
  const uint32_t row_addr = buf + uint32_t(row) * 128;
  const int half = (lane >> 3) & 1;
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
    const int piece = ks * 2 + half;  // 16-byte piece of the row
    uint32_t b4[4];
    mma::ldmatrix_x4(b4, row_addr + uint32_t(piece >> 3) * uint32_t(kWideRoundChunks * 128) +
                             uint32_t(((piece & 7) ^ (row & 7)) << 4));
    const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
    mma_m16n8k16<T>(acc[0][0], qf[0][ks], b0);
    mma_m16n8k16<T>(acc[0][1], qf[0][ks], b1);
  }
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kWideThreads, 1)
    route_wide_kernel(RouteArgs a, WideArgs wa, const __grid_constant__ CUtensorMap tmap) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using C = Config<kHeadDim>;
  using S = WideSmem<kHeadDim>;
  constexpr int kKS = C::kKSteps;
  constexpr int kR = kWideMaxRows;
  constexpr int kSubs = kWideMaxChunks / kSubChunks;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int row_limit[kR];
  __shared__ int64_t tok_diag[kR];
  __shared__ float* row_tau[kR];
  __shared__ uint32_t* tok_mask[kR];
  __shared__ float* tok_mu[kR];
  __shared__ int32_t* tok_active[kR];
  __shared__ float part_log[kClusterMaxCtas * kR];  // [range][token], as the cluster kernel's
  __shared__ int part_routed[kClusterMaxCtas * kR];
  __shared__ __align__(8) uint64_t full[2];
  __shared__ __align__(16) double solve_terms[kWideWarps][32];

  unsigned char* smem = smem_raw + ((1024u - (mma::smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* stage = smem;
  uint16_t* qstage = reinterpret_cast<uint16_t*>(smem + S::q_off());
  float* sub_max = reinterpret_cast<float*>(smem + S::submax_off());
  float* scores = reinterpret_cast<float*>(smem + S::score_off());
  float* lists = reinterpret_cast<float*>(smem);  // once scored
  const int sstride = S::score_stride(wa.per_cap);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 2;
  if (tid == 0) mma::prefetch_tensormap(&tmap);  // thread 0 issues the copies, after the pair's setup below
  const DecodePair pair = decode_pair(a, wa.tokens_alloc, wa.rows_alloc, wa.per_cap, tid);
  if (!pair.any) return;
  const SequenceSpan sp = pair.sp;
  const int g = a.group, r = pair.r;
  const int64_t seq = pair.seq;
  if (!pair.fits) {  // lengths past the launch's sizing (decode_pair): marked, left unrouted
    if (tid == 0) hand_over_pair(a, sp, r);
    return;
  }
  const int tokens = pair.tokens, rows_used = pair.rows_used;
  const int cmax = static_cast<int>(pair.cmax);
  const int per = static_cast<int>(pair.words_needed) * 32;
  // Round k of summary rows into buffer k % 2: tensor copies of 64-row boxes per column block, completing on
  // full[k % 2]. Rows past the tensor's chunks arrive as zeros; rows past cmax are scored and masked.
  auto stage_round = [&](int k) {
    const int cb = k * kWideRoundChunks;
    if (cb >= cmax || tid != 0) return;
    const int boxes = (cmax - cb < kWideRoundChunks ? cmax - cb + 63 : kWideRoundChunks) / 64;
    const uint32_t bar = mma::smem_addr(&full[k & 1]);
    const uint32_t buf = mma::smem_addr(stage + (k & 1) * S::kRoundBytes);
    mma::mbar_expect_tx(bar, uint32_t(boxes * S::kColBlocks * 64 * 128));
    mma::mbar_arrive(bar);
    for (int j = 0; j < boxes; ++j)
      for (int cblk = 0; cblk < S::kColBlocks; ++cblk)
        mma::tma_load_4d(buf + uint32_t(cblk * S::kBlockBytes + j * 64 * 128), &tmap, bar, cblk * 64, cb + j * 64, r,
                         static_cast<int>(seq));
  };
  // Thread 0 starts the first two rounds as soon as their barriers exist; the rows' limits, the tokens' diagonals
  // (64-bit divisions) and the output addresses follow while the copies are in flight.
  if (tid == 0) {
    mma::mbar_init(mma::smem_addr(&full[0]), 1);
    mma::mbar_init(mma::smem_addr(&full[1]), 1);
    mma::fence_barrier_init();
  }
  __syncthreads();
  stage_round(0);
  stage_round(1);
  stage_decode_q<kHeadDim, T>(a, sp, r, rows_used, kR, qstage, tid, kWideThreads);
  cp_async_commit();
  for (int rho = tid; rho < kR; rho += kWideThreads) row_limit[rho] = routable_chunks(a, sp, 0, rho, rows_used, g);
  token_diagonals(a, sp, tokens, tok_diag, tid, kWideThreads);
  // The rows' τ, the tokens' mask rows, μ and active counts: addressed now, so that the stores at the end of each
  // phase need no parameter loads (each a round trip when the phase's code first runs).
  if (tid < rows_used) row_tau[tid] = row_tau_ptr(a, sp, r, g, 0, tid);
  if (tid < tokens) {
    tok_mask[tid] = token_mask_row(a, sp, r, tid);
    tok_mu[tid] = token_mu_ptr(a, sp, r, tid);
    tok_active[tid] = token_active_ptr(a, sp, r, tid);
    // This kernel lists no chunks for Stage 2's bias.
    if (int32_t* count = token_list_count_ptr(a, sp, r, tid)) *count = kNoList;
  }
  cp_async_wait(0);
  __syncthreads();  // Q, the rows' limits, the tokens' diagonals and the addresses visible to every warp
  uint32_t qf[1][kKS][4];
  const bool mt_active[1] = {true};
  {
    const uint16_t* arow = qstage + (lane & 15) * C::kTileStride + (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) ldmatrix_x4(qf[0][ks], arow + ks * 16);
  }
  const int lim[1][2] = {{row_limit[grp], row_limit[grp + 8]}};

  // ---- Scores of every chunk, a round at a time, with each sub-tile's row maxima ----
  const int rounds = (cmax + kWideRoundChunks - 1) / kWideRoundChunks;
  for (int k = 0; k < rounds; ++k) {
    mma::mbar_wait(mma::smem_addr(&full[k & 1]), (k >> 1) & 1);
    if (k == 0 && tid == 0) phase_mark(PhaseKernel::kRouteCluster, 1);
    const int sub = k * kWideWarps + warp;
    const int c0 = sub * kSubChunks;
    if (c0 < cmax) {
      float acc[1][2][4], lane_max[1][2];
      score_subtile_swizzled<T>(acc, qf, mma::smem_addr(stage + (k & 1) * S::kRoundBytes),
                                warp * kSubChunks + ((lane >> 4) << 3) + (lane & 7), lane);
      store_subtile_scores(acc, mt_active, c0, 0, cmax, lim, rows_used, a.x_scale, scores, sstride, lane, lane_max);
      // The stored values' maxima per row (rows grp and grp + 8), over the quad's lanes.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float m = lane_max[0][h];
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        if ((lane & 3) == 0) sub_max[(grp + 8 * h) * kSubs + sub] = m;
      }
    }
    __syncthreads();  // this round's buffer is free
    stage_round(k + 2);
  }
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 2);

  // ---- Row ρ by warp ρ: maximum, candidates in chunk order, exact τ ----
  if (warp < rows_used) {
    const int rho = warp;
    float* row = scores + rho * sstride;
    float m = -INFINITY;
    for (int i = lane; i * kSubChunks < cmax; i += 32) m = fmaxf(m, sub_max[rho * kSubs + i]);
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    const float th = candidate_threshold(m);
    float* list = lists + rho * wa.per_cap;
    const int n = compact_candidates(row, list, cmax, th, lane);
    if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 3);
    float tau = NAN;
    if (row_limit[rho] > 0) {
      tau = static_cast<float>(warp_entmax_threshold(list, n, a.alpha, a.solver, lane, solve_terms[warp], m));
    }
    if (lane == 0) *row_tau[rho] = rho / g < sp.n_q ? tau : NAN;
    // The row is this warp's alone (lane-strided, as compact_candidates read it): its scores become head weights.
    row_weights_in_place(row, cmax, th, tau, a.alpha, lane);
    if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 7);
  }
  __syncthreads();
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 4);

  // ---- Mask words and μ's partial sums: a warp per (token, μ range), a lane per chunk ----
  // Σ log w in the cluster kernel's order for the same launch shape (a partial per CTA range, each lane adding its
  // chunks in order, then a butterfly; the partials added in range order), so that the two kernels agree bit for
  // bit whichever one a batch size selects. The warp of a range emits the range's mask words in order and adds
  // their logs as it goes.
  const int parts = wa.mu_parts;
  const int words_here = per / 32;
  const int part_words = (words_here + parts - 1) / parts;
  for (int v = warp; v < tokens * parts; v += kWideWarps) {
    const int t = v / parts, k = v % parts;
    const int word_end = (k + 1) * part_words < words_here ? (k + 1) * part_words : words_here;
    float log_sum = 0.0f;
    int routed = 0;
    for (int word = k * part_words; word < word_end; ++word) {
      const int e = word * 32 + lane;
      float lg = NAN;
      const bool on = e < cmax && group_weight_of_rows(scores, sstride, t, g, e, &lg);
      add_log_weight(lg, &log_sum, &routed);
      const uint32_t bits = __ballot_sync(0xffffffffu, on);
      if (lane == 0) store_mask_word_at(tok_mask[t], a.mask_words, word, bits, tok_diag[t]);
    }
    warp_log_sum(&log_sum, &routed);
    if (lane == 0) {
      part_log[k * kR + t] = log_sum;
      part_routed[k * kR + t] = routed;
    }
  }
  for (int t = warp; t < tokens; t += kWideWarps)
    for (int64_t word = words_here + lane; word < a.mask_words; word += 32)
      store_mask_word_at(tok_mask[t], a.mask_words, word, 0u, tok_diag[t]);
  __syncthreads();
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 5);
  if (tid < tokens)
    store_token_mu_at(tok_mu[tid], tok_active[tid], tid < sp.n_q, part_log + tid, part_routed + tid, parts, kR);
  if (tid == 0) {
    phase_finish(PhaseKernel::kRouteCluster,
                 "route wide: entry / first round in / scored / listed (warp 0) / solved / emitted with mu parts / - / "
                 "warp 0 weighted (before the barrier) / exit");
  }
#else
  __trap();  // launched only on devices whose image holds the sm_90 code (see route_launch.cuh)
#endif
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
