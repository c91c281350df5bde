// Stage-1 decode kernel (sm_90 thread-block clusters): the chunk axis of one (sequence, KV head) is split across
// the S CTAs of a cluster, so that a decode step (one or a few queries per sequence) runs b·h_kv·S CTAs instead of
// b·h_kv latency-bound blocks. Every CTA scores its own 32-aligned chunk range with the tensor cores and keeps
// the scores in shared memory; the CTAs then agree through distributed shared memory (DSMEM):
//   1. row maxima: each CTA publishes its local maxima, every CTA takes the maximum over the cluster;
//   2. candidates x > m − 1 − margin (the only ones that can carry weight, τ ≥ m − 1) compacted in chunk order in
//      place, their counts published;
//   3. row ρ's τ is solved by CTA ρ mod S with dashattn::entmax_threshold over the row's candidates gathered in
//      rank order (= chunk order) into its idle staging buffer; every CTA then reads all τ;
//   4. each CTA emits the mask words of its own range (group weight per chunk summed in head order from 0, as
//      dashattn::group_weight does; bit = w > 0), with partial Σ log w and counts that rank 0 adds in rank order
//      for μ and the active count.
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
  static __host__ __device__ size_t align16(size_t v) { return (v + 15) / 16 * 16; }
  static __host__ __device__ int score_stride(int per_cap) { return per_cap + 1; }
  static __host__ __device__ size_t score_off() { return kStageBytes; }
  static __host__ __device__ size_t id_off(const ClusterArgs& c) {
    return score_off() + align16(size_t(c.rows_alloc) * score_stride(c.per_cap) * 4);
  }
  static __host__ __device__ size_t wacc_off(const ClusterArgs& c) {
    return id_off(c) + align16(size_t(c.rows_alloc) * score_stride(c.per_cap) * 2);
  }
  static __host__ __device__ size_t bytes(const ClusterArgs& c) {
    return wacc_off(c) + align16(size_t(c.tokens_alloc) * c.per_cap * 4);
  }
};

// Candidates of one row laid out contiguously (the gather buffer).
struct PlainList {
  const float* vals;
  __device__ float operator()(int i) const { return vals[i]; }
};

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kThreads) route_cluster_kernel(RouteArgs a, ClusterArgs ca) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using C = Config<kHeadDim>;
  using S = ClusterSmem<kHeadDim>;
  constexpr int kMT = kClusterMaxRows / 16 < C::kMTiles ? kClusterMaxRows / 16 : C::kMTiles;
  constexpr int kKS = C::kKSteps;
  constexpr int kVecPerRow = kHeadDim / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int row_limit[kClusterMaxRows];
  __shared__ float local_max[kClusterMaxRows];
  __shared__ int local_count[kClusterMaxRows];
  __shared__ float tau_own[kClusterMaxRows];
  __shared__ float tau_all[kClusterMaxRows];
  __shared__ int count_all[kClusterMaxRows * kClusterMaxCtas];
  __shared__ float part_log[kClusterMaxRows];
  __shared__ int part_routed[kClusterMaxRows];

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int nctas = ca.ctas;
  const int sstride = S::score_stride(ca.per_cap);
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem);
  float* scores = reinterpret_cast<float*>(smem + S::score_off());
  uint16_t* ids = reinterpret_cast<uint16_t*>(smem + S::id_off(ca));
  float* wacc = reinterpret_cast<float*>(smem + S::wacc_off(ca));

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
  const int per = static_cast<int>(per64);
  const int cmax = static_cast<int>(cmax64);
  const int c_begin = rank * per;
  const int c_end = c_begin + per < cmax ? c_begin + per : cmax;
  const int n_loc = c_end > c_begin ? c_end - c_begin : 0;

  for (int rho = tid; rho < kClusterMaxRows; rho += kThreads) {
    int lim = 0;
    if (rho < rows_used) {
      const int64_t i = rho / g;
      if (i < sp.n_q) lim = static_cast<int>(diagonal_chunk(query_position(i, sp.n_q, sp.n_k), a.chunk));
    }
    row_limit[rho] = lim;
  }

  // Q rows staged with 16-byte copies (zeros for rows without a query), then held as A fragments.
  {
    const T* q_any = a.q.ptr<T>(sp.batch_index, sp.q_begin, int64_t(r) * g, 0);
    for (int v = tid; v < kMT * 16 * kVecPerRow; v += kThreads) {
      const int rho = v / kVecPerRow, col = (v % kVecPerRow) * 8;
      const bool valid = rho < rows_used && rho / g < sp.n_q;
      const T* src = valid ? a.q.ptr<T>(sp.batch_index, sp.q_begin + rho / g, int64_t(r) * g + rho % g, col) : q_any;
      cp_async_16(stage + rho * C::kTileStride + col, src, valid ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait(0);
  }
  __syncthreads();
  uint32_t qf[kMT][kKS][4];
  bool mt_active[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    mt_active[mt] = mt * 16 < rows_used;
    const uint16_t* arow = stage + (mt * 16 + (lane & 15)) * C::kTileStride + (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) ldmatrix_x4(qf[mt][ks], arow + ks * 16);
  }
  int lim[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) lim[mt][h] = row_limit[mt * 16 + grp + 8 * h];
  __syncthreads();  // the staging buffer is free again

  // ---- Scores of this CTA's range, kept in shared memory (−inf past a row's routable chunks) ----
  for (int cb = c_begin; cb < c_end; cb += kClusterStageChunks) {
    const int nrows = c_end - cb < kClusterStageChunks ? c_end - cb : kClusterStageChunks;
    const T* base = a.summaries.ptr<T>(seq, 0, r, 0);
    for (int v = tid; v < ((nrows + 15) / 16 * 16) * kVecPerRow; v += kThreads) {
      const int row = v / kVecPerRow, col = (v % kVecPerRow) * 8;
      const bool in = row < nrows;
      cp_async_16(stage + row * C::kTileStride + col, in ? a.summaries.ptr<T>(seq, cb + row, r, col) : base,
                  in ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait(0);
    __syncthreads();
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
    __syncthreads();
  }

  // ---- 1. Row maxima over the cluster ----
  for (int rho = warp; rho < rows_used; rho += kWarps) {
    float m = -INFINITY;
    for (int e = lane; e < n_loc; e += 32) m = fmaxf(m, scores[rho * sstride + e]);
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) local_max[rho] = m;
  }
  cluster.sync();

  // ---- 2. Candidates in chunk order, compacted in place ----
  for (int rho = warp; rho < rows_used; rho += kWarps) {
    float m = -INFINITY;
    for (int k = 0; k < nctas; ++k) m = fmaxf(m, cluster.map_shared_rank(local_max, k)[rho]);
    const float th = candidate_threshold(m);
    int n = 0;
    for (int e0 = 0; e0 < n_loc; e0 += 32) {
      const int e = e0 + lane;
      const float v = e < n_loc ? scores[rho * sstride + e] : -INFINITY;
      const bool take = v > th;
      const unsigned bal = __ballot_sync(0xffffffffu, take);
      if (take) {
        const int slot = n + __popc(bal & ((1u << lane) - 1u));
        scores[rho * sstride + slot] = v;
        ids[rho * sstride + slot] = static_cast<uint16_t>(e);
      }
      n += __popc(bal);
    }
    if (lane == 0) local_count[rho] = n;
  }
  cluster.sync();

  // ---- 3. Exact τ: row ρ solved by rank ρ mod S over its candidates gathered in rank order ----
  for (int v = tid; v < rows_used * nctas; v += kThreads) {
    count_all[v] = cluster.map_shared_rank(local_count, v % nctas)[v / nctas];
  }
  __syncthreads();
  bool overflow = false;
  for (int rho = 0; rho < rows_used; ++rho) {
    int total = 0;
    for (int k = 0; k < nctas; ++k) total += count_all[rho * nctas + k];
    overflow = overflow || total > ca.gather_cap;
  }
  if (overflow) {  // cluster-uniform: every CTA saw the same counts
    hand_over();
    cluster.sync();  // no CTA leaves while another still reads its shared memory
    return;
  }
  float* gather = reinterpret_cast<float*>(stage);
  for (int rho = rank, o = 0; rho < rows_used; rho += nctas, ++o) {
    int off = 0;
    for (int k = 0; k < nctas; ++k) {
      const int n = count_all[rho * nctas + k];
      const float* src = cluster.map_shared_rank(scores, k) + rho * sstride;
      for (int e = tid; e < n; e += kThreads) gather[o * ca.gather_cap + off + e] = src[e];
      off += n;
    }
  }
  __syncthreads();
  for (int rho = rank + tid * nctas, o = tid; rho < rows_used; rho += kThreads * nctas, o += kThreads) {
    int total = 0;
    for (int k = 0; k < nctas; ++k) total += count_all[rho * nctas + k];
    float tau = NAN;
    if (row_limit[rho] > 0) {
      tau = static_cast<float>(entmax_threshold(PlainList{gather + o * ca.gather_cap}, total, a.alpha, a.solver).tau);
    }
    tau_own[rho] = tau;
    const int64_t i = rho / g;
    *a.tau.ptr<float>(sp.batch_index, int64_t(r) * g + rho % g, sp.q_begin + i) = i < sp.n_q ? tau : NAN;
  }
  cluster.sync();
  for (int rho = tid; rho < rows_used; rho += kThreads) {
    tau_all[rho] = cluster.map_shared_rank(tau_own, rho % nctas)[rho];
  }
  __syncthreads();

  // ---- 4. Emit this CTA's mask words; partial Σ log w and counts per token ----
  const float alpha_f = a.alpha;
  const int words_total = per * nctas / 32;
  for (int t = warp; t < tokens; t += kWarps) {
    const bool real = t < sp.n_q;
    const int64_t diag = real ? diagonal_chunk(query_position(t, sp.n_q, sp.n_k), a.chunk) : -1;
    uint32_t* mask_row = a.mask.ptr<uint32_t>(sp.batch_index, r, sp.q_begin + t, 0);
    auto write_word = [&](int64_t word, uint32_t bits) {
      if (!real) bits = 0u;
      else if ((diag >> 5) == word) bits |= 1u << (diag & 31);
      if (word < a.mask_words) mask_row[word] = bits;
    };
    float* w = wacc + size_t(t) * ca.per_cap;
    for (int e = lane; e < per; e += 32) w[e] = 0.0f;
    __syncwarp();
    for (int h = 0; h < g; ++h) {  // head order from 0, as group_weight; a head's chunks are distinct
      const int rho = t * g + h;
      const int n = local_count[rho];
      const float tau = tau_all[rho];
      for (int e = lane; e < n; e += 32) {
        w[ids[rho * sstride + e]] += entmax_weight(scores[rho * sstride + e], tau, alpha_f);
      }
      __syncwarp();
    }
    float log_sum = 0.0f;
    int routed = 0;
    for (int e0 = 0; e0 < per; e0 += 32) {
      const float wc = w[e0 + lane] / static_cast<float>(g);
      const bool on = e0 + lane < n_loc && wc > 0.0f;
      if (on) {
        log_sum += logf(wc);
        ++routed;
      }
      const unsigned bits = __ballot_sync(0xffffffffu, on);
      if (lane == 0) write_word((c_begin + e0) / 32, bits);
    }
    if (rank == nctas - 1) {
      for (int64_t word = words_total + lane; word < a.mask_words; word += 32) write_word(word, 0u);
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) {
      log_sum += __shfl_xor_sync(0xffffffffu, log_sum, off);
      routed += __shfl_xor_sync(0xffffffffu, routed, off);
    }
    if (lane == 0) {
      part_log[t] = log_sum;
      part_routed[t] = routed;
    }
  }
  cluster.sync();
  if (rank == 0) {
    for (int t = tid; t < tokens; t += kThreads) {
      float ls = 0.0f;
      int n = 0;
      for (int k = 0; k < nctas; ++k) {
        ls += cluster.map_shared_rank(part_log, k)[t];
        n += cluster.map_shared_rank(part_routed, k)[t];
      }
      const bool real = t < sp.n_q;
      *a.mu.ptr<float>(sp.batch_index, r, sp.q_begin + t) = (real && n > 0) ? ls / static_cast<float>(n) : 0.0f;
      if (a.active.defined()) *a.active.ptr<int32_t>(sp.batch_index, r, sp.q_begin + t) = real ? n + 1 : 0;
    }
  }
  cluster.sync();  // rank 0 has read every CTA's partials
#else
  __trap();  // launched only on devices whose image holds the sm_90 code (see route_launch.cuh)
#endif
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
