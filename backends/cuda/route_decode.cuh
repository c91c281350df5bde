// Decode routing pieces shared by the cluster kernel (route_cluster.cuh) and the wide kernel (route_wide.cuh): the
// pair a CTA routes, the warp solve of τ (bit for bit dashattn::entmax_threshold), candidate compaction, score
// stores and the mask / μ emit. Included only through those two headers.
#pragma once

#include <cmath>
#include <cstdint>

#include "dashattn/entmax.h"
#include "dashattn/prior.h"
#include "mma_sm80.cuh"
#include "phase_clocks.cuh"
#include "route_fast.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

// The serial solver (other α, the reference solver), kept out of line: its pow calls would otherwise make the
// whole kernel save registers around them.
static __device__ __noinline__ double serial_entmax_threshold(const float* x, int n, double alpha, EntmaxSolver solver) {
  return entmax_threshold(ArrayValues{x}, n, alpha, solver).tau;
}

// dashattn::entmax_threshold over x[0, n) evaluated by one warp, bit for bit. The row maximum (the first of
// equal maxima, as the serial scan keeps; `known_max` when the caller has it, which must then be the list's
// largest value), the support count and the bracket ends a = max{v ≤ t}, b = min{v > t} are exact whatever the
// order, so the lanes split them; the bracket ends are tracked on the float scores (v = x − m is exact in double
// and increasing in x, so the same elements win) and turned into v at the end of the pass. The sums
// S1 = Σ(x−t), S2 = Σ(x−t)² are rounded in order: each block of 32 candidates has its support terms formed one per
// lane and packed in index order into `terms` (the serial pass adds nothing for the others), then every lane adds
// them in that order, as the serial pass does, a pair of terms at a time up to the block's count (the +0 of an
// odd count's last slot leaves the sums as they are); only the two dependent additions stay serial, and only over
// the support. Sixteen warps solving at once on one multiprocessor share its double-precision units, so the pass
// keeps its double-precision work to the terms, the sums and the closed form. The closed-form step below is
// entmax.h's, written the same way. α other than 1.5 and 2, and the reference solver, run the serial solver on
// lane 0.
__device__ __forceinline__ double warp_entmax_threshold(const float* x, int n, double alpha, EntmaxSolver solver,
                                                        int lane, double* terms, float known_max = NAN) {
  const unsigned full = 0xffffffffu;
  if (n <= 0) return 0.0;
  const bool is15 = alpha == 1.5, is2 = alpha == 2.0;
  if (solver != EntmaxSolver::kExact || !(is15 || is2)) {
    double tau = 0.0;
    if (lane == 0) tau = serial_entmax_threshold(x, n, alpha, solver);
    return __shfl_sync(full, tau, 0);
  }
  float best = known_max;
  if (!(known_max == known_max)) {
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
    best = __shfl_sync(full, best, 0);
  }
  const double m = static_cast<double>(best);
  // The first block's values relative to the maximum, once for every pass.
  const float x0 = lane < n ? x[lane] : 0.0f;
  const double v0 = static_cast<double>(x0) - m;

  double lo = -1.0, hi = 0.0;
  double t = lo;
  double2* const terms2 = reinterpret_cast<double2*>(terms);
  for (int it = 0; it < kMaxCertifiedPasses; ++it) {
    int k = 0;
    float below_x = -INFINITY, above_x = INFINITY;
    double s1 = 0, s2 = 0;
    for (int base = 0; base < n; base += 32) {
      const int i = base + lane;
      double term = 0.0;
      bool in_support = false;
      if (i < n) {
        const float xv = base == 0 ? x0 : x[i];
        const double v = base == 0 ? v0 : static_cast<double>(xv) - m;
        const double y = v - t;
        if (y > 0) {
          in_support = true;
          above_x = fminf(above_x, xv);
          term = y;
        } else {
          below_x = fmaxf(below_x, xv);
        }
      }
      // Only the block's support terms, packed in index order, enter the sums: the serial pass adds nothing for
      // the others, and +0 terms past them leave a sum of positive terms unchanged.
      const unsigned sup = __ballot_sync(full, in_support);
      const int cnt = __popc(sup);
      k += cnt;
      __syncwarp();
      if (in_support) terms[__popc(sup & ((1u << lane) - 1u))] = term;
      if (lane >= cnt) terms[lane] = 0.0;
      __syncwarp();
      // Whole groups of eight with their loads together, then the last group's pairs up to the count.
      int j = 0;
      for (; j + 8 <= cnt; j += 8) {
        double yv[8];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const double2 pair = terms2[j / 2 + q];
          yv[2 * q] = pair.x;
          yv[2 * q + 1] = pair.y;
        }
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          s1 += yv[q];
          s2 += yv[q] * yv[q];
        }
      }
      if (j < cnt) {
        double2 pr[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) pr[q] = terms2[j / 2 + q];
        const int left = cnt - j;
        auto add_pair = [&](const double2& p) {
          s1 += p.x;
          s2 += p.x * p.x;
          s1 += p.y;
          s2 += p.y * p.y;
        };
        add_pair(pr[0]);
        if (left > 2) {
          add_pair(pr[1]);
          if (left > 4) {
            add_pair(pr[2]);
            if (left > 6) add_pair(pr[3]);
          }
        }
      }
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) {
      below_x = fmaxf(below_x, __shfl_xor_sync(full, below_x, off));
      above_x = fminf(above_x, __shfl_xor_sync(full, above_x, off));
    }
    const double below = static_cast<double>(below_x) - m, above = static_cast<double>(above_x) - m;
    // From here on entmax_threshold's own step (every lane holds the same values).
    const detail::PassSums ps{k, s1, s2, 0.0, 0.0, below, above};  // Σy^p terms: general α only
    double root;
    bool stop = false;
    if (detail::piece_root_step(ps, is2, t, lo, hi, &root, &stop)) return m + root;
    if (stop) break;
  }
  return m + t;
}

// The rows one decode routing CTA (or cluster) owns: the (sequence, KV head) pair of the block (blockIdx.z,
// blockIdx.y), its tokens and query rows, and its last routable chunk. `fits` is false when the launch was sized for
// fewer tokens, rows or chunks than the sequence has, which only lengths breaking the batch contract can cause
// (launch_wide_route): the kernel then marks the pair (hand_over_pair) and touches nothing else. Thread 0 also
// stamps the kernel's entry (profiling build).
struct DecodePair {
  SequenceSpan sp;
  int r = 0;
  int64_t seq = 0;
  int tokens = 0, rows_used = 0;
  int64_t cmax = 0, words_needed = 0;
  bool any = false, fits = false;
};

__device__ __forceinline__ DecodePair decode_pair(const RouteArgs& a, int tokens_alloc, int rows_alloc,
                                                  int64_t chunks_cap, int tid) {
  if (tid == 0) {
    phase_mark(PhaseKernel::kRouteCluster, 0);
    phase_set_active(PhaseKernel::kRouteCluster, true);
  }
  DecodePair p;
  p.r = static_cast<int>(blockIdx.y);
  p.seq = blockIdx.z;
  p.sp = device_sequence_span(a.batch, p.seq);
  const int64_t owned_rows = a.batch.cu_seqlens_q != nullptr ? p.sp.n_q : a.batch.padded_n_q;
  p.any = owned_rows > 0;
  if (!p.any) return p;
  p.tokens = static_cast<int>(owned_rows < tokens_alloc + 1 ? owned_rows : tokens_alloc + 1);
  p.rows_used = p.tokens * a.group;
  const int64_t last_real = (owned_rows < p.sp.n_q ? owned_rows : p.sp.n_q) - 1;
  p.cmax = last_real >= 0 ? query_diagonal_chunk(a, p.sp, last_real) : 0;
  p.words_needed = (p.cmax + 31) / 32;
  p.fits = p.tokens <= tokens_alloc && p.rows_used <= rows_alloc && p.words_needed * 32 <= chunks_cap;
  return p;
}

// Marks the pair (KV head r) as not routed here: the τ of its first row carries kHandOverTauBits, which the multi-pass
// kernel's flagged-only launch looks for (launched after the cluster kernel where its candidates can overflow).
__device__ __forceinline__ void hand_over_pair(const RouteArgs& a, const SequenceSpan& sp, int r) {
  *row_tau_ptr(a, sp, r, a.group, 0, 0) = __uint_as_float(kHandOverTauBits);
}

// entmax_weight for α other than 1.5 and 2, out of line: its powf would otherwise sit in the emit loop's code.
static __device__ __noinline__ float general_entmax_weight(float x, float tau, float alpha) {
  return entmax_weight(x, tau, alpha);
}

// The weight of one head's chunk score x (threshold th, τ): entmax_weight's arithmetic, 0 when x is no candidate
// (x ≤ th) or below τ. For α = 1.5 and 2 without branches, the product rounded before any addition.
__device__ __forceinline__ float head_chunk_weight(float x, float th, float tau, float alpha) {
  if (alpha == 1.5f || alpha == 2.0f) {
    const float y = x - tau;
    const float v = alpha == 1.5f ? __fmul_rn(y, y) : y;
    return (x > th && y > 0.0f) ? v : 0.0f;
  }
  return x > th ? general_entmax_weight(x, tau, alpha) : 0.0f;
}

// Whether a group weight w (the heads' weights summed in head order, so w ≥ +0) routes its chunk, and its log (NaN
// if not). group_mean divides only where w ≠ 0 (otherwise every mask word took the division's slow path).
__device__ __forceinline__ bool group_log_weight(float w, int g, float* lg) {
  const float wc = group_mean(w, g);
  const bool on = wc > 0.0f;
  *lg = on ? logf(wc) : NAN;
  return on;
}

// The group weight of chunk e for token t (head weights summed in head order from 0, as dashattn::group_weight
// does, over the heads that hold e as a candidate), from scores laid out [row][sstride]: whether it is routed
// (w > 0), and its log w (NaN when not). A head whose weight is 0 adds +0, which leaves the (non-negative) sum as
// it is, so the loads of all heads can be in flight together.
__device__ __forceinline__ bool chunk_group_weight(const float* scores, int sstride, int t, int g, int e,
                                                   const float* row_th, const float* tau, float alpha, float* lg) {
  float w = 0.0f;
  if (alpha == 1.5f || alpha == 2.0f) {
#pragma unroll 4
    for (int h = 0; h < g; ++h) {
      const int rho = t * g + h;
      w += head_chunk_weight(scores[rho * sstride + e], row_th[rho], tau[rho], alpha);
    }
  } else {
    for (int h = 0; h < g; ++h) {
      const int rho = t * g + h;
      w += head_chunk_weight(scores[rho * sstride + e], row_th[rho], tau[rho], alpha);
    }
  }
  return group_log_weight(w, g, lg);
}

// Row ρ's head weights of chunks [0, n) written over its scores, by the warp that solved the row (lane-strided),
// so that the emit after the CTA barrier only adds them (group_weight_of_rows): this pass runs while other warps
// still solve. Bitwise the weights chunk_group_weight adds.
__device__ __forceinline__ void row_weights_in_place(float* row, int n, float th, float tau, float alpha, int lane) {
  if (alpha == 1.5f || alpha == 2.0f) {
#pragma unroll 4
    for (int e = lane; e < n; e += 32) row[e] = head_chunk_weight(row[e], th, tau, alpha);
  } else {
    for (int e = lane; e < n; e += 32) row[e] = head_chunk_weight(row[e], th, tau, alpha);
  }
}

// chunk_group_weight from the head weights of row_weights_in_place: the same sum in head order, the same bits.
__device__ __forceinline__ bool group_weight_of_rows(const float* weights, int sstride, int t, int g, int e,
                                                     float* lg) {
  float w = 0.0f;
#pragma unroll 8
  for (int h = 0; h < g; ++h) w += weights[(t * g + h) * sstride + e];
  return group_log_weight(w, g, lg);
}

// The diagonal chunk of each of the pair's tokens (−1 for a padding token), for the mask stores: found once per
// token instead of once per stored word.
__device__ __forceinline__ void token_diagonals(const RouteArgs& a, const SequenceSpan& sp, int tokens,
                                                int64_t* tok_diag, int tid, int nthreads) {
  for (int t = tid; t < tokens; t += nthreads)
    tok_diag[t] = t < sp.n_q ? query_diagonal_chunk(a, sp, t) : -1;
}

// Stores mask word `word` of a token whose mask row starts at `row` (lane 0 of the warp that computed `bits`): zero
// for a padding token (diag < 0), else the routed bits plus the token's diagonal bit when it falls in this word.
__device__ __forceinline__ void store_mask_word_at(uint32_t* row, int64_t mask_words, int64_t word, uint32_t bits,
                                                   int64_t diag) {
  if (diag < 0) {
    bits = 0u;
  } else if ((diag >> 5) == word) {
    bits |= 1u << (diag & 31);
  }
  if (word < mask_words) row[word] = bits;
}

// store_mask_word_at for token t of the pair (sequence sp, KV head r).
__device__ __forceinline__ void store_decode_mask_word(const RouteArgs& a, const SequenceSpan& sp, int r, int t,
                                                      int64_t word, uint32_t bits, int64_t diag) {
  store_mask_word_at(token_mask_row(a, sp, r, t), a.mask_words, word, bits, diag);
}

// Σ log w over a token's routed chunks and their count, over logs[0, n) (NaN: not routed), lane-strided then by a
// butterfly: every lane holds the result.
__device__ __forceinline__ void token_log_sum(const float* logs, int n, int lane, float* log_sum, int* routed) {
  float ls = 0.0f;
  int k = 0;
  for (int e0 = 0; e0 < n; e0 += 32) add_log_weight(logs[e0 + lane], &ls, &k);
  warp_log_sum(&ls, &k);
  *log_sum = ls;
  *routed = k;
}

// Q rows [0, rows) of the pair into `qstage` (row stride Config::kTileStride) with 16-byte copies, zeros for rows
// without a query; the caller commits.
template <int kHeadDim, typename T>
__device__ __forceinline__ void stage_decode_q(const RouteArgs& a, const SequenceSpan& sp, int r, int rows_used,
                                               int rows, uint16_t* qstage, int tid, int nthreads) {
  constexpr int kVecPerRow = kHeadDim / 8;
  const int g = a.group;
  const T* q_any = a.q.ptr<T>(sp.batch_index, sp.q_begin, int64_t(r) * g, 0);
  for (int v = tid; v < rows * kVecPerRow; v += nthreads) {
    const int rho = v / kVecPerRow, col = (v % kVecPerRow) * 8;
    const bool valid = rho < rows_used && rho / g < sp.n_q;
    const T* src = valid ? a.q.ptr<T>(sp.batch_index, sp.q_begin + rho / g, int64_t(r) * g + rho % g, col) : q_any;
    cp_async_16(qstage + rho * Config<kHeadDim>::kTileStride + col, src, valid ? 16 : 0);
  }
}

// Summary rows [cb, cb + nrows) of KV head r into `dst` with 16-byte copies (zeros past nrows, up to a multiple of
// 16, so that every scored sub-tile is defined); the caller commits.
template <int kHeadDim, typename T>
__device__ __forceinline__ void stage_summary_rows(const RouteArgs& a, int64_t seq, int r, int cb, int nrows,
                                                   uint16_t* dst, int tid, int nthreads) {
  constexpr int kVecPerRow = kHeadDim / 8;
  const T* base = a.summaries.ptr<T>(seq, 0, r, 0);
  for (int v = tid; v < ((nrows + 15) / 16 * 16) * kVecPerRow; v += nthreads) {
    const int row = v / kVecPerRow, col = (v % kVecPerRow) * 8;
    const bool in = row < nrows;
    cp_async_16(dst + row * Config<kHeadDim>::kTileStride + col, in ? a.summaries.ptr<T>(seq, cb + row, r, col) : base,
                in ? 16 : 0);
  }
}

// x = score · x_scale of a scored sub-tile (chunks c0 .. c0 + 15) into scores[ρ][c − c_begin], −inf past a row's
// routable chunks (lim) or the range's end; element (mt, n, i) is row mt·16 + lane/4 + 8·(i/2), chunk
// c0 + n·8 + 2·(lane%4) + (i & 1). lane_max[mt][h] gets the maximum of the values this lane stored for its row
// half h (a caller that takes no maxima lets the compiler drop them).
template <int kMT>
__device__ __forceinline__ void store_subtile_scores(const float (&acc)[kMT][2][4], const bool (&mt_active)[kMT], int c0,
                                                     int c_begin, int c_end, const int (&lim)[kMT][2], int rows_used,
                                                     float x_scale, float* scores, int sstride, int lane,
                                                     float (&lane_max)[kMT][2]) {
  const int grp = lane >> 2, quad = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    lane_max[mt][0] = lane_max[mt][1] = -INFINITY;
    if (!mt_active[mt]) continue;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int h = i >> 1;
        const int rho = mt * 16 + grp + 8 * h;
        const int c = c0 + n * 8 + quad * 2 + (i & 1);
        const float x = (c < lim[mt][h] && c < c_end) ? acc[mt][n][i] * x_scale : -INFINITY;
        lane_max[mt][h] = fmaxf(lane_max[mt][h], x);
        if (rho < rows_used) scores[rho * sstride + (c - c_begin)] = x;
      }
  }
}

// The candidates x > th of src[0, n) into dst in index order (dst may be src: four blocks of 32 are read before
// any slot of them is written); returns their count. One warp; dst is complete for every lane on return.
__device__ __forceinline__ int compact_candidates(const float* src, float* dst, int n, float th, int lane) {
  int k = 0;
  for (int c0 = 0; c0 < n; c0 += 128) {
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = c0 + 32 * j + lane;
      v[j] = c < n ? src[c] : -INFINITY;
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool take = v[j] > th;
      const unsigned bal = __ballot_sync(0xffffffffu, take);
      if (take) dst[k + __popc(bal & ((1u << lane) - 1u))] = v[j];
      k += __popc(bal);
    }
  }
  __syncwarp();
  return k;
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
