// Stage-1 decode kernel (sm_90 thread-block clusters): the chunk axis of one (sequence, KV head) is split across
// the S CTAs of a cluster, so that a decode step (one or a few queries per sequence) runs b·h_kv·S CTAs instead of
// b·h_kv latency-bound blocks. Every CTA scores its own 32-aligned chunk range with the tensor cores and keeps
// the scores in shared memory; the CTAs then agree through distributed shared memory (DSMEM). Every exchange
// pushes: a CTA stores into the other CTAs' shared memory before a cluster barrier and reads only its own after
// it, so no phase waits on a remote load's round trip. Row ρ is solved by rank ρ mod S; its candidates reach it
// in one of two ways:
//   whole rows (their scores fit the space of the Q staging area, or cost no resident CTA): each CTA stores its
//      scores of row ρ at their chunk positions into the solving CTA, which takes the row maximum and compacts the
//      candidates x > m − 1 − margin (the only ones that can carry weight, τ ≥ m − 1) in chunk order — one
//      exchange;
//   otherwise: each CTA stores its local maxima into every CTA, then its candidate counts, then its candidates in
//      chunk order into the solving CTA at the offset the lower ranks' counts give — three exchanges.
// Then row ρ's exact τ, one warp per row (warp_entmax_threshold below: the iteration of dashattn::entmax_threshold
// with the same sums in the same order, so the same τ bits), goes into every CTA; each CTA emits the mask words of
// its own range with one lane per chunk (group weight summed in head order from 0, as dashattn::group_weight
// does; bit = w > 0), and stores its partial Σ log w and counts into rank 0, which adds them in rank order for μ
// and the active count.
// A row whose candidates do not fit the gather buffer, or a sequence longer than the launch sized for, hands the
// (sequence, KV head) to the multi-pass kernel with the τ mark of route_kernels.cuh. Every reduction has a fixed
// order: results are bitwise reproducible. Included only through route_launch.cuh.
#pragma once

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "phase_clocks.cuh"
#include "route_decode.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

constexpr int kClusterMaxCtas = 8;        // portable cluster size
constexpr int kClusterStageChunks = 128;  // summary rows staged per round (also the τ gather buffer)
constexpr int kClusterTargetChunks = 32;  // chunks per CTA the launcher aims at (short ranges: latency)
constexpr int kClusterMaxRows = 16;       // query rows of one (sequence, KV head): one m16 MMA tile

struct ClusterArgs {
  int ctas;         // S, the cluster size (= gridDim.x)
  int per_cap;      // largest chunk range of one CTA the launch sized shared memory for (multiple of 32)
  int rows_alloc;   // query rows per (sequence, KV head) the launch sized for
  int tokens_alloc; // query tokens per sequence the launch sized for
  int gather_cap;   // τ candidates per solved row that fit the staging buffer
};

__host__ __device__ inline int cluster_solved_rows(const ClusterArgs& c) { return (c.rows_alloc + c.ctas - 1) / c.ctas; }
__host__ __device__ inline size_t cluster_align16(size_t v) { return (v + 15) / 16 * 16; }

// Shared-memory layout. With whole rows, every chunk's score of the rows a CTA solves goes into that CTA (one
// exchange instead of maxima, counts and candidates in turn); the region shares its space with the Q staging
// area, which is dead once the Q fragments are in registers.
template <int kHeadDim>
struct ClusterSmem {
  using C = Config<kHeadDim>;
  static constexpr size_t kStageBytes = size_t(kClusterStageChunks) * C::kTileStride * 2;
  // Q rows get their own staging area so that their load and the first summary round's share one wait.
  static constexpr size_t kQBytes = size_t(kClusterMaxRows) * C::kTileStride * 2;
  // sm_90 shared memory per multiprocessor, the runtime's reserve per CTA, and a bound on the kernel's static
  // shared memory: whole rows are taken only where they cost no resident CTA.
  static constexpr size_t kSmemPerSm = 228 * 1024, kReservedPerCta = 1024, kStaticBound = 4096;
  static __host__ __device__ size_t whole_row_bytes(const ClusterArgs& c) {
    return size_t(cluster_solved_rows(c)) * c.per_cap * c.ctas * 4;
  }
  static __host__ __device__ size_t layout_bytes(const ClusterArgs& c, size_t shared_region) {
    return cluster_align16(kStageBytes) + cluster_align16(shared_region) +
           cluster_align16(size_t(c.rows_alloc) * score_stride(c.per_cap) * 4) +
           cluster_align16(size_t(c.tokens_alloc) * c.per_cap * 4);
  }
  static __host__ __device__ size_t ctas_per_sm(size_t dynamic_bytes) {
    return kSmemPerSm / (dynamic_bytes + kStaticBound + kReservedPerCta);
  }
  static __host__ __device__ bool whole_rows(const ClusterArgs& c) {
    const size_t w = whole_row_bytes(c);
    return ctas_per_sm(layout_bytes(c, w > kQBytes ? w : kQBytes)) >= ctas_per_sm(layout_bytes(c, kQBytes));
  }
  static __host__ __device__ size_t shared_region(const ClusterArgs& c) {
    const size_t w = whole_row_bytes(c);
    return whole_rows(c) && w > kQBytes ? w : kQBytes;
  }
  static __host__ __device__ int score_stride(int per_cap) { return per_cap + 1; }
  static __host__ __device__ size_t q_off() { return cluster_align16(kStageBytes); }
  static __host__ __device__ size_t whole_off() { return q_off(); }
  static __host__ __device__ size_t score_off(const ClusterArgs& c) { return q_off() + cluster_align16(shared_region(c)); }
  static __host__ __device__ size_t log_off(const ClusterArgs& c) {
    return score_off(c) + cluster_align16(size_t(c.rows_alloc) * score_stride(c.per_cap) * 4);
  }
  static __host__ __device__ size_t bytes(const ClusterArgs& c) { return layout_bytes(c, shared_region(c)); }
};

// Split cluster barrier (sm_90): arrive is a release and wait an acquire at cluster scope. A CTA stores into
// another's shared memory only after a wait on a phase that CTA has arrived at (it has started and no longer
// reads what the store may overwrite).
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_barrier() {
  cluster_arrive();
  cluster_wait();
}

// Resident CTAs per multiprocessor: at head dims up to 128, four (at most 128 registers; 104-110 are used), which
// a decode launch's shared memory allows. A cluster of 8 CTAs must fit in one GPC: at three per multiprocessor the
// 48 clusters of the benchmark's step (b = 24, h_kv = 2) did not all fit at once on an H100 and the routing took
// two waves (20 → 32 us at 32K, seen when an experiment raised the kernel to 135 registers; perf-log.md,
// thirteenth pass). Above 128, three: the register cap it implies (170) keeps every instance free of spills.
template <int kHeadDim>
constexpr int route_cluster_min_blocks() { return kHeadDim <= 128 ? 4 : 3; }

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kThreads, route_cluster_min_blocks<kHeadDim>())
    route_cluster_kernel(RouteArgs a, ClusterArgs ca) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using C = Config<kHeadDim>;
  using S = ClusterSmem<kHeadDim>;
  constexpr int kMT = kClusterMaxRows / 16 < C::kMTiles ? kClusterMaxRows / 16 : C::kMTiles;
  constexpr int kKS = C::kKSteps;
  constexpr int kR = kClusterMaxRows;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int row_limit[kR];
  __shared__ float row_th[kR];
  __shared__ int row_total[kR];
  __shared__ int row_prefix[kR];
  __shared__ float tau_all[kR];
  __shared__ int64_t tok_diag[kR];
  // Filled by the other CTAs: [source rank][row or token].
  __shared__ float max_all[kClusterMaxCtas * kR];
  __shared__ int count_all[kClusterMaxCtas * kR];
  __shared__ float part_log[kClusterMaxCtas * kR];
  __shared__ int part_routed[kClusterMaxCtas * kR];
  __shared__ __align__(16) double solve_terms[kWarps][32];

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int nctas = ca.ctas;
  const int sstride = S::score_stride(ca.per_cap);
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem);
  uint16_t* qstage = reinterpret_cast<uint16_t*>(smem + S::q_off());
  float* scores = reinterpret_cast<float*>(smem + S::score_off(ca));
  float* logs = reinterpret_cast<float*>(smem + S::log_off(ca));

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 2;
  const DecodePair pair = decode_pair(a, ca.tokens_alloc, ca.rows_alloc, int64_t(ca.per_cap) * nctas, tid);
  if (!pair.any) return;  // cluster-uniform: depends on the sequence only
  const SequenceSpan sp = pair.sp;
  const int g = a.group, r = pair.r;
  const int64_t seq = pair.seq;
  const int tokens = pair.tokens, rows_used = pair.rows_used;
  const int64_t per64 = (pair.words_needed + nctas - 1) / nctas * 32;
  auto hand_over = [&]() {
    if (rank == 0 && tid == 0) hand_over_pair(a, sp, r);
  };
  // Launch sized for shorter sequences or fewer rows than this one has (cluster-uniform): the multi-pass kernel.
  // (pair.fits also bounds per64 by per_cap: words_needed · 32 <= per_cap · nctas.)
  if (!pair.fits) {
    hand_over();
    return;
  }
  const int per = static_cast<int>(per64);
  const int cmax = static_cast<int>(pair.cmax);
  const int c_begin = rank * per;
  const int c_end = c_begin + per < cmax ? c_begin + per : cmax;
  const int n_loc = c_end > c_begin ? c_end - c_begin : 0;

  for (int rho = tid; rho < kR; rho += kThreads) row_limit[rho] = routable_chunks(a, sp, 0, rho, rows_used, g);
  token_diagonals(a, sp, tokens, tok_diag, tid, kThreads);

  // Summary rows [cb, cb + nrows) into the staging buffer with 16-byte copies (zeros past nrows, up to a multiple
  // of 16).
  auto stage_summaries = [&](int cb, int nrows) {
    stage_summary_rows<kHeadDim, T>(a, seq, r, cb, nrows, stage, tid, kThreads);
    cp_async_commit();
  };
  // Q rows (zeros for rows without a query) and the first summary round in flight together.
  stage_decode_q<kHeadDim, T>(a, sp, r, rows_used, kMT * 16, qstage, tid, kThreads);
  cp_async_commit();
  if (c_begin < c_end) {
    stage_summaries(c_begin, c_end - c_begin < kClusterStageChunks ? c_end - c_begin : kClusterStageChunks);
  }
  cp_async_wait(0);
  __syncthreads();
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 1);
  uint32_t qf[kMT][kKS][4];
  bool mt_active[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    mt_active[mt] = mt * 16 < rows_used;
    const uint16_t* arow = qstage + (mt * 16 + (lane & 15)) * C::kTileStride + (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) ldmatrix_x4(qf[mt][ks], arow + ks * 16);
  }
  int lim[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) lim[mt][h] = row_limit[mt * 16 + grp + 8 * h];
  // Waited on just before the first store into another CTA, which may land in the Q staging area (whole rows):
  // a release, so that this thread's reads of it come first.
  cluster_arrive();

  // ---- Scores of this CTA's range, kept in shared memory (−inf past a row's routable chunks) ----
  for (int cb = c_begin; cb < c_end; cb += kClusterStageChunks) {
    const int nrows = c_end - cb < kClusterStageChunks ? c_end - cb : kClusterStageChunks;
    if (cb != c_begin) {
      stage_summaries(cb, nrows);
      cp_async_wait(0);
      __syncthreads();
    }
    for (int sub = warp; sub * kSubChunks < nrows; sub += kWarps) {
      const uint16_t* brow =
          stage + (sub * kSubChunks + ((lane >> 4) << 3) + (lane & 7)) * C::kTileStride + ((lane >> 3) & 1) * 8;
      float acc[kMT][2][4], unused_max[kMT][2];
      score_subtile<T>(acc, qf, mt_active, brow);
      store_subtile_scores(acc, mt_active, cb + sub * kSubChunks, c_begin, c_end, lim, rows_used, a.x_scale, scores,
                           sstride, lane, unused_max);
    }
    __syncthreads();  // scores complete; the staging buffer is free for the next round
  }

  // The solving CTA's candidates of row ρ (rank ρ mod S) lie at (ρ / S)·row_cap in `gather`: the staging buffer
  // (free once every CTA has passed the first barrier after scoring) or, for whole rows, a region of their own
  // that other CTAs may fill while this one still scores.
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 2);
  const bool whole_rows = S::whole_rows(ca);  // cluster-uniform (launch arguments)
  float* gather = whole_rows ? reinterpret_cast<float*>(smem + S::whole_off()) : reinterpret_cast<float*>(stage);
  const int row_cap = whole_rows ? ca.per_cap * nctas : ca.gather_cap;
  cluster_wait();  // every CTA of the cluster has started and holds its Q fragments
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 3);
  // Whole rows: each CTA stores its scores of row ρ at their chunk positions into the solving CTA, which takes the
  // maximum, compacts the candidates in chunk order and solves: one exchange instead of three (no row can
  // overflow). Otherwise maxima, counts and candidates go in turn.
  if (whole_rows) {
    for (int rho = warp; rho < rows_used; rho += kWarps) {
      float* dst = cluster.map_shared_rank(gather, rho % nctas) + (rho / nctas) * row_cap + c_begin;
      float m = -INFINITY;
      for (int e = lane; e < n_loc; e += 32) {
        const float v = scores[rho * sstride + e];
        dst[e] = v;
        m = fmaxf(m, v);
      }
#pragma unroll
      for (int off = 16; off >= 1; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
      if (lane == 0) cluster.map_shared_rank(max_all, rho % nctas)[rank * kR + rho] = m;
    }
    cluster_barrier();
    for (int o = warp, rho = rank + warp * nctas; rho < rows_used; o += kWarps, rho += kWarps * nctas) {
      float* row = gather + o * row_cap;
      float m = -INFINITY;
      for (int k = 0; k < nctas; ++k) m = fmaxf(m, max_all[k * kR + rho]);
      const float th = candidate_threshold(m);
      const int n = compact_candidates(row, row, cmax, th, lane);  // in place
      if (lane == 0) {
        row_th[rho] = th;
        row_total[rho] = n;
      }
    }
  } else {
    // ---- 1. Row maxima, stored into every CTA ----
    for (int rho = warp; rho < rows_used; rho += kWarps) {
      float m = -INFINITY;
      for (int e = lane; e < n_loc; e += 32) m = fmaxf(m, scores[rho * sstride + e]);
#pragma unroll
      for (int off = 16; off >= 1; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
      m = __shfl_sync(0xffffffffu, m, 0);
      if (lane < nctas) cluster.map_shared_rank(max_all, lane)[rank * kR + rho] = m;
    }
    cluster_barrier();

    // ---- 2. Candidate counts, stored into every CTA ----
    for (int rho = warp; rho < rows_used; rho += kWarps) {
      float m = -INFINITY;
      for (int k = 0; k < nctas; ++k) m = fmaxf(m, max_all[k * kR + rho]);
      const float th = candidate_threshold(m);
      int n = 0;
      for (int e0 = 0; e0 < n_loc; e0 += 32) {
        const int e = e0 + lane;
        const bool take = e < n_loc && scores[rho * sstride + e] > th;
        n += __popc(__ballot_sync(0xffffffffu, take));
      }
      if (lane == 0) row_th[rho] = th;
      if (lane < nctas) cluster.map_shared_rank(count_all, lane)[rank * kR + rho] = n;
    }
    cluster_barrier();

    // ---- 3. Candidates gathered in rank order into the solving CTA (rank ρ mod S) ----
    bool overflow_here = false;
    for (int rho = tid; rho < rows_used; rho += kThreads) {
      int total = 0, prefix = 0;
      for (int k = 0; k < nctas; ++k) {
        const int n = count_all[k * kR + rho];
        if (k < rank) prefix += n;
        total += n;
      }
      row_total[rho] = total;
      row_prefix[rho] = prefix;
      overflow_here = overflow_here || total > ca.gather_cap;
    }
    if (__syncthreads_or(overflow_here)) {  // cluster-uniform: every CTA holds the same counts
      hand_over();
      return;  // nothing reads or writes another CTA's shared memory past the last barrier
    }
    for (int rho = warp; rho < rows_used; rho += kWarps) {
      float* dst = cluster.map_shared_rank(gather, rho % nctas) + (rho / nctas) * row_cap + row_prefix[rho];
      const float th = row_th[rho];
      int n = 0;
      for (int e0 = 0; e0 < n_loc; e0 += 32) {
        const int e = e0 + lane;
        const float v = e < n_loc ? scores[rho * sstride + e] : -INFINITY;
        const bool take = v > th;
        const unsigned bal = __ballot_sync(0xffffffffu, take);
        if (take) dst[n + __popc(bal & ((1u << lane) - 1u))] = v;
        n += __popc(bal);
      }
    }
    cluster_barrier();
  }

  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 4);
  // ---- Exact τ of the rows this CTA solves, stored (with the candidate threshold) into every CTA ----
  for (int o = warp, rho = rank + warp * nctas; rho < rows_used; o += kWarps, rho += kWarps * nctas) {
    __syncwarp();  // lane 0's row_total and row_th of a whole row
    float tau = NAN;
    if (row_limit[rho] > 0) {
      tau = static_cast<float>(warp_entmax_threshold(gather + o * row_cap, row_total[rho], a.alpha, a.solver,
                                                     lane, solve_terms[warp]));
    }
    if (lane < nctas) {
      cluster.map_shared_rank(tau_all, lane)[rho] = tau;
      // This CTA's own entry is already in place: storing it again would race with the other lanes' reads.
      if (whole_rows && lane != rank) cluster.map_shared_rank(row_th, lane)[rho] = row_th[rho];
    }
    if (lane == 0) *row_tau_ptr(a, sp, r, g, 0, rho) = rho / g < sp.n_q ? tau : NAN;
  }
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 5);
  cluster_barrier();
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 6);

  // ---- 4. Emit this CTA's mask words, one lane per chunk; log w per chunk kept for the ordered sums ----
  // Each lane adds, in head order from 0, the weights of the heads that hold its chunk as a candidate: the same
  // terms in the same order as a per-head walk over the candidate lists.
  const float alpha_f = a.alpha;
  const int words_total = per * nctas / 32;
  const int words_here = per / 32;
  for (int v = warp; v < tokens * words_here; v += kWarps) {
    const int t = v / words_here, word_local = v % words_here;
    const int e = word_local * 32 + lane;
    float lg = NAN;
    const bool on = e < n_loc && chunk_group_weight(scores, sstride, t, g, e, row_th, tau_all, alpha_f, &lg);
    logs[t * ca.per_cap + e] = lg;
    const uint32_t bits = __ballot_sync(0xffffffffu, on);
    if (lane == 0) store_decode_mask_word(a, sp, r, t, (c_begin + word_local * 32) / 32, bits, tok_diag[t]);
  }
  if (rank == nctas - 1) {
    for (int t = warp; t < tokens; t += kWarps)
      for (int64_t word = words_total + lane; word < a.mask_words; word += 32)
        store_decode_mask_word(a, sp, r, t, word, 0u, tok_diag[t]);
  }
  __syncthreads();
  if (tid == 0) phase_mark(PhaseKernel::kRouteCluster, 7);
  // Σ log w and the count per token: lane-strided over the chunks, then a butterfly, as the sums were taken before
  // the emit ran one lane per chunk (the order fixes the bits of μ).
  for (int t = warp; t < tokens; t += kWarps) {
    float log_sum;
    int routed;
    token_log_sum(logs + t * ca.per_cap, per, lane, &log_sum, &routed);
    if (lane == 0) {
      cluster.map_shared_rank(part_log, 0)[rank * kR + t] = log_sum;
      cluster.map_shared_rank(part_routed, 0)[rank * kR + t] = routed;
    }
  }
  cluster_arrive();
  constexpr const char* kPhaseNames =
      "route cluster: entry / loaded / scored / all started / exchanged / solved / tau shared / emitted / exit";
  if (rank != 0) {  // rank 0 stays until every partial has landed in its shared memory
    if (tid == 0) phase_finish(PhaseKernel::kRouteCluster, kPhaseNames);
    return;
  }
  cluster_wait();
  for (int t = tid; t < tokens; t += kThreads) store_token_mu(a, sp, r, t, part_log + t, part_routed + t, nctas, kR);
  if (tid == 0) phase_finish(PhaseKernel::kRouteCluster, kPhaseNames);
#else
  __trap();  // launched only on devices whose image holds the sm_90 code (see route_launch.cuh)
#endif
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
