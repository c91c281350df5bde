// Stage-1 decode kernel (sm_90 thread-block clusters): the chunk axis of one (sequence, KV head) is split across
// the S CTAs of a cluster, so that a decode step (one or a few queries per sequence) runs b·h_kv·S CTAs instead of
// b·h_kv latency-bound blocks. Every CTA scores its own 32-aligned chunk range with the tensor cores and keeps
// the scores in shared memory; the CTAs then agree through distributed shared memory (DSMEM). Every exchange
// pushes: a CTA stores into the other CTAs' shared memory before a cluster barrier and reads only its own after
// it, so no phase waits on a remote load's round trip:
//   1. row maxima: each CTA stores its local maxima into every CTA; each takes the maximum over ranks 0..S−1;
//   2. candidates x > m − 1 − margin (the only ones that can carry weight, τ ≥ m − 1) counted in every CTA, the
//      counts stored into every CTA; each CTA then stores its candidates, in chunk order, into the gather buffer
//      of the CTA that solves the row (rank ρ mod S) at the offset the lower ranks' counts give (rank order);
//   3. row ρ's exact τ, one warp per row (warp_entmax_threshold below: the iteration of dashattn::entmax_threshold
//      with the same sums in the same order, so the same τ bits), stored into every CTA;
//   4. each CTA emits the mask words of its own range with one lane per chunk (group weight summed in head order
//      from 0, as dashattn::group_weight does; bit = w > 0), and stores its partial Σ log w and counts into rank 0,
//      which adds them in rank order for μ and the active count.
// A row whose candidates do not fit the gather buffer, or a sequence longer than the launch sized for, hands the
// (sequence, KV head) to the multi-pass kernel with the τ mark of route_kernels.cuh. Every reduction has a fixed
// order: results are bitwise reproducible. Included only through route_launch.cuh.
#pragma once

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "dashattn/entmax.h"
#include "dashattn/prior.h"
#include "mma_sm80.cuh"
#include "route_fast.cuh"

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

template <int kHeadDim>
struct ClusterSmem {
  using C = Config<kHeadDim>;
  static constexpr size_t kStageBytes = size_t(kClusterStageChunks) * C::kTileStride * 2;
  // Q rows get their own staging area so that their load and the first summary round's share one wait.
  static constexpr size_t kQBytes = size_t(kClusterMaxRows) * C::kTileStride * 2;
  static __host__ __device__ size_t align16(size_t v) { return (v + 15) / 16 * 16; }
  static __host__ __device__ int score_stride(int per_cap) { return per_cap + 1; }
  static __host__ __device__ size_t q_off() { return align16(kStageBytes); }
  static __host__ __device__ size_t score_off() { return q_off() + align16(kQBytes); }
  static __host__ __device__ size_t log_off(const ClusterArgs& c) {
    return score_off() + align16(size_t(c.rows_alloc) * score_stride(c.per_cap) * 4);
  }
  static __host__ __device__ size_t bytes(const ClusterArgs& c) {
    return log_off(c) + align16(size_t(c.tokens_alloc) * c.per_cap * 4);
  }
};

// Candidates of one row laid out contiguously (the gather buffer).
struct PlainList {
  const float* vals;
  __device__ float operator()(int i) const { return vals[i]; }
};

// Split cluster barrier (sm_90). arrive is a release and wait an acquire at cluster scope; the relaxed arrive
// only marks that this CTA has started, which every CTA must know before storing into another's shared memory.
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_barrier() {
  cluster_arrive();
  cluster_wait();
}

// The serial solver (other α, the reference solver), kept out of line: its pow calls would otherwise make the
// whole kernel save registers around them.
static __device__ __noinline__ double serial_entmax_threshold(const float* x, int n, double alpha, EntmaxSolver solver) {
  return entmax_threshold(PlainList{x}, n, alpha, solver).tau;
}

// dashattn::entmax_threshold over x[0, n) evaluated by one warp, bit for bit: the row maximum (the first of equal
// maxima, as the serial scan keeps), the support count and the bracket ends a = max{v ≤ t}, b = min{v > t} are
// exact whatever the order, so the lanes split them; the sums S1 = Σ(x−t), S2 = Σ(x−t)² are rounded in order, so
// every lane adds them over all candidates in index order, as the serial pass does (elements outside the support
// add +0, which leaves a sum of positive terms unchanged), unrolled so that the loads run ahead of the two
// dependent chains. The closed-form step below is the one of entmax.h, written the same way. α other than 1.5
// and 2, and the reference solver, run the serial solver on lane 0.
__device__ __forceinline__ double warp_entmax_threshold(const float* x, int n, double alpha, EntmaxSolver solver,
                                                     int lane) {
  const unsigned full = 0xffffffffu;
  if (n <= 0) return 0.0;
  const bool is15 = alpha == 1.5, is2 = alpha == 2.0;
  if (solver != EntmaxSolver::kExact || !(is15 || is2)) {
    double tau = 0.0;
    if (lane == 0) tau = serial_entmax_threshold(x, n, alpha, solver);
    return __shfl_sync(full, tau, 0);
  }
  float best = 0.0f;
  int best_i = -1;
  for (int i = lane; i < n; i += 32) {
    const float v = x[i];
    if (best_i < 0 || v > best) {
      best = v;
      best_i = i;
    }
  }
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    const float ov = __shfl_xor_sync(full, best, off);
    const int oi = __shfl_xor_sync(full, best_i, off);
    if (oi >= 0 && (best_i < 0 || ov > best || (ov == best && oi < best_i))) {
      best = ov;
      best_i = oi;
    }
  }
  const double m = static_cast<double>(__shfl_sync(full, best, 0));

  double lo = -1.0, hi = 0.0;
  double t = lo;
  for (int it = 0; it < 200; ++it) {
    int k = 0;
    double below = -INFINITY, above = INFINITY;
    for (int i = lane; i < n; i += 32) {
      const double v = static_cast<double>(x[i]) - m;
      const double y = v - t;
      if (y > 0) {
        ++k;
        if (v < above) above = v;
      } else if (v > below) {
        below = v;
      }
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) {
      k += __shfl_xor_sync(full, k, off);
      below = fmax(below, __shfl_xor_sync(full, below, off));
      above = fmin(above, __shfl_xor_sync(full, above, off));
    }
    double s1 = 0, s2 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
      float xv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = x[i + j];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const double v = static_cast<double>(xv[j]) - m;
        const double y = v - t;
        const double yp = y > 0 ? y : 0.0;
        s1 += yp;
        s2 += yp * yp;
      }
    }
    for (; i < n; ++i) {
      const double v = static_cast<double>(x[i]) - m;
      const double y = v - t;
      const double yp = y > 0 ? y : 0.0;
      s1 += yp;
      s2 += yp * yp;
    }
    // From here on as entmax_threshold's loop (every lane holds the same values).
    double delta;
    bool ok = true;
    if (is2) {
      delta = (s1 - 1.0) / k;
    } else {
      const double disc = s1 * s1 - k * (s2 - 1.0);
      if (disc < 0) {
        ok = false;
        delta = 0;
      } else {
        const double root = sqrt(disc);
        delta = (s1 > 0) ? (s2 - 1.0) / (s1 + root) : (s1 - root) / k;
      }
    }
    const double tq = t + delta;
    if (ok && tq >= below && tq < above) return m + tq;
    const double f = is2 ? s1 - 1.0 : s2 - 1.0;
    if (f > 0) lo = t; else hi = t;
    double next = ok ? tq : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    if (next == t || hi - lo <= 1e-15 * (1.0 + fabs(hi))) {
      t = next;
      break;
    }
    t = next;
  }
  return m + t;
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kThreads) route_cluster_kernel(RouteArgs a, ClusterArgs ca) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using C = Config<kHeadDim>;
  using S = ClusterSmem<kHeadDim>;
  constexpr int kMT = kClusterMaxRows / 16 < C::kMTiles ? kClusterMaxRows / 16 : C::kMTiles;
  constexpr int kKS = C::kKSteps;
  constexpr int kVecPerRow = kHeadDim / 8;
  constexpr int kR = kClusterMaxRows;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int row_limit[kR];
  __shared__ float row_th[kR];
  __shared__ int row_total[kR];
  __shared__ int row_prefix[kR];
  __shared__ float tau_all[kR];
  // Filled by the other CTAs: [source rank][row or token].
  __shared__ float max_all[kClusterMaxCtas * kR];
  __shared__ int count_all[kClusterMaxCtas * kR];
  __shared__ float part_log[kClusterMaxCtas * kR];
  __shared__ int part_routed[kClusterMaxCtas * kR];

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int nctas = ca.ctas;
  const int sstride = S::score_stride(ca.per_cap);
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem);
  uint16_t* qstage = reinterpret_cast<uint16_t*>(smem + S::q_off());
  float* scores = reinterpret_cast<float*>(smem + S::score_off());
  float* logs = reinterpret_cast<float*>(smem + S::log_off(ca));

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 2, quad = lane & 3;
  const int g = a.group;
  const int r = blockIdx.y;
  const int64_t seq = blockIdx.z;
  const SequenceSpan sp = device_sequence_span(a.batch, seq);
  const int64_t owned_rows = a.batch.cu_seqlens_q != nullptr ? sp.n_q : a.batch.padded_n_q;
  if (owned_rows <= 0) return;  // cluster-uniform: depends on the sequence only
  const int tokens = static_cast<int>(owned_rows < ca.tokens_alloc + 1 ? owned_rows : ca.tokens_alloc + 1);
  const int rows_used = tokens * g;
  const int64_t last_real = (owned_rows < sp.n_q ? owned_rows : sp.n_q) - 1;
  const int64_t cmax64 = last_real >= 0 ? diagonal_chunk(query_position(last_real, sp.n_q, sp.n_k), a.chunk) : 0;
  const int64_t words_needed = (cmax64 + 31) / 32;
  const int64_t per64 = (words_needed + nctas - 1) / nctas * 32;
  auto hand_over = [&]() {
    if (rank == 0 && tid == 0) {
      *a.tau.ptr<float>(sp.batch_index, int64_t(r) * g, sp.q_begin) = __uint_as_float(kHandOverTauBits);
    }
  };
  // Launch sized for shorter sequences or fewer rows than this one has (cluster-uniform): the multi-pass kernel.
  if (tokens > ca.tokens_alloc || rows_used > ca.rows_alloc || per64 > ca.per_cap) {
    hand_over();
    return;
  }
  cluster_arrive_relaxed();  // waited on just before the first store into another CTA
  const int per = static_cast<int>(per64);
  const int cmax = static_cast<int>(cmax64);
  const int c_begin = rank * per;
  const int c_end = c_begin + per < cmax ? c_begin + per : cmax;
  const int n_loc = c_end > c_begin ? c_end - c_begin : 0;

  for (int rho = tid; rho < kR; rho += kThreads) {
    int lim = 0;
    if (rho < rows_used) {
      const int64_t i = rho / g;
      if (i < sp.n_q) lim = static_cast<int>(diagonal_chunk(query_position(i, sp.n_q, sp.n_k), a.chunk));
    }
    row_limit[rho] = lim;
  }

  // Summary rows [cb, cb + nrows) into the staging buffer with 16-byte copies (zeros past nrows, up to a multiple
  // of 16).
  auto stage_summaries = [&](int cb, int nrows) {
    const T* base = a.summaries.ptr<T>(seq, 0, r, 0);
    for (int v = tid; v < ((nrows + 15) / 16 * 16) * kVecPerRow; v += kThreads) {
      const int row = v / kVecPerRow, col = (v % kVecPerRow) * 8;
      const bool in = row < nrows;
      cp_async_16(stage + row * C::kTileStride + col, in ? a.summaries.ptr<T>(seq, cb + row, r, col) : base,
                  in ? 16 : 0);
    }
    cp_async_commit();
  };
  // Q rows (zeros for rows without a query) and the first summary round in flight together.
  {
    const T* q_any = a.q.ptr<T>(sp.batch_index, sp.q_begin, int64_t(r) * g, 0);
    for (int v = tid; v < kMT * 16 * kVecPerRow; v += kThreads) {
      const int rho = v / kVecPerRow, col = (v % kVecPerRow) * 8;
      const bool valid = rho < rows_used && rho / g < sp.n_q;
      const T* src = valid ? a.q.ptr<T>(sp.batch_index, sp.q_begin + rho / g, int64_t(r) * g + rho % g, col) : q_any;
      cp_async_16(qstage + rho * C::kTileStride + col, src, valid ? 16 : 0);
    }
    cp_async_commit();
  }
  if (c_begin < c_end) {
    stage_summaries(c_begin, c_end - c_begin < kClusterStageChunks ? c_end - c_begin : kClusterStageChunks);
  }
  cp_async_wait(0);
  __syncthreads();
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
      float acc[kMT][2][4];
      score_subtile<T>(acc, qf, mt_active, brow);
      const int c0 = cb + sub * kSubChunks;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if (!mt_active[mt]) continue;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int h = i >> 1;
            const int rho = mt * 16 + grp + 8 * h;
            const int c = c0 + n * 8 + quad * 2 + (i & 1);
            if (rho < rows_used) {
              const float x = acc[mt][n][i] * a.x_scale;
              scores[rho * sstride + (c - c_begin)] = (c < lim[mt][h] && c < c_end) ? x : -INFINITY;
            }
          }
      }
    }
    __syncthreads();  // scores complete; the staging buffer is free for the next round
  }

  // ---- 1. Row maxima, stored into every CTA ----
  cluster_wait();  // every CTA of the cluster has started
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

  // ---- 3. Exact τ: row ρ solved by rank ρ mod S over its candidates gathered in rank order ----
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
  float* gather = reinterpret_cast<float*>(stage);
  for (int rho = warp; rho < rows_used; rho += kWarps) {
    float* dst = cluster.map_shared_rank(gather, rho % nctas) + (rho / nctas) * ca.gather_cap + row_prefix[rho];
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
  for (int o = warp, rho = rank + warp * nctas; rho < rows_used; o += kWarps, rho += kWarps * nctas) {
    float tau = NAN;
    if (row_limit[rho] > 0) {
      tau = static_cast<float>(
          warp_entmax_threshold(gather + o * ca.gather_cap, row_total[rho], a.alpha, a.solver, lane));
    }
    if (lane < nctas) cluster.map_shared_rank(tau_all, lane)[rho] = tau;
    if (lane == 0) {
      const int64_t i = rho / g;
      *a.tau.ptr<float>(sp.batch_index, int64_t(r) * g + rho % g, sp.q_begin + i) = i < sp.n_q ? tau : NAN;
    }
  }
  cluster_barrier();

  // ---- 4. Emit this CTA's mask words, one lane per chunk; log w per chunk kept for the ordered sums ----
  // Each lane adds, in head order from 0, the weights of the heads that hold its chunk as a candidate: the same
  // terms in the same order as a per-head walk over the candidate lists.
  const float alpha_f = a.alpha;
  const int words_total = per * nctas / 32;
  const int words_here = per / 32;
  for (int v = warp; v < tokens * words_here; v += kWarps) {
    const int t = v / words_here, word_local = v % words_here;
    const int e = word_local * 32 + lane;
    bool on = false;
    float lg = NAN;
    if (e < n_loc) {
      float w = 0.0f;
      for (int h = 0; h < g; ++h) {
        const int rho = t * g + h;
        const float x = scores[rho * sstride + e];
        if (x > row_th[rho]) w += entmax_weight(x, tau_all[rho], alpha_f);
      }
      const float wc = w / static_cast<float>(g);
      on = wc > 0.0f;
      if (on) lg = logf(wc);
    }
    logs[t * ca.per_cap + e] = lg;
    uint32_t bits = __ballot_sync(0xffffffffu, on);
    if (lane == 0) {
      const int64_t word = (c_begin + word_local * 32) / 32;
      if (t >= sp.n_q) {
        bits = 0u;
      } else {
        const int64_t diag = diagonal_chunk(query_position(t, sp.n_q, sp.n_k), a.chunk);
        if ((diag >> 5) == word) bits |= 1u << (diag & 31);
      }
      if (word < a.mask_words) *a.mask.ptr<uint32_t>(sp.batch_index, r, sp.q_begin + t, word) = bits;
    }
  }
  if (rank == nctas - 1) {
    for (int t = warp; t < tokens; t += kWarps) {
      const bool real = t < sp.n_q;
      const int64_t diag = real ? diagonal_chunk(query_position(t, sp.n_q, sp.n_k), a.chunk) : -1;
      for (int64_t word = words_total + lane; word < a.mask_words; word += 32) {
        uint32_t bits = 0u;
        if (real && (diag >> 5) == word) bits = 1u << (diag & 31);
        *a.mask.ptr<uint32_t>(sp.batch_index, r, sp.q_begin + t, word) = bits;
      }
    }
  }
  __syncthreads();
  // Σ log w and the count per token: lane-strided over the chunks, then a butterfly, as the sums were taken before
  // the emit ran one lane per chunk (the order fixes the bits of μ).
  for (int t = warp; t < tokens; t += kWarps) {
    float log_sum = 0.0f;
    int routed = 0;
    for (int e0 = 0; e0 < per; e0 += 32) {
      const float lg = logs[t * ca.per_cap + e0 + lane];
      if (lg == lg) {
        log_sum += lg;
        ++routed;
      }
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) {
      log_sum += __shfl_xor_sync(0xffffffffu, log_sum, off);
      routed += __shfl_xor_sync(0xffffffffu, routed, off);
    }
    if (lane == 0) {
      cluster.map_shared_rank(part_log, 0)[rank * kR + t] = log_sum;
      cluster.map_shared_rank(part_routed, 0)[rank * kR + t] = routed;
    }
  }
  cluster_arrive();
  if (rank != 0) return;  // rank 0 stays until every partial has landed in its shared memory
  cluster_wait();
  for (int t = tid; t < tokens; t += kThreads) {
    float ls = 0.0f;
    int n = 0;
    for (int k = 0; k < nctas; ++k) {
      ls += part_log[k * kR + t];
      n += part_routed[k * kR + t];
    }
    const bool real = t < sp.n_q;
    *a.mu.ptr<float>(sp.batch_index, r, sp.q_begin + t) = (real && n > 0) ? ls / static_cast<float>(n) : 0.0f;
    if (a.active.defined()) *a.active.ptr<int32_t>(sp.batch_index, r, sp.q_begin + t) = real ? n + 1 : 0;
  }
#else
  __trap();  // launched only on devices whose image holds the sm_90 code (see route_launch.cuh)
#endif
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
