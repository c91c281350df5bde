// Stage-1 multi-pass kernel (see route.cuh): the fallback for blocks whose candidate lists overflow in the
// single-sweep kernel of route_fast.cuh, and the whole Stage 1 for summaries that are not 16-byte aligned. Three or
// more synchronous sweeps over 16-chunk summary tiles, with certified passes for overflowing rows. Included only
// through route_launch.cuh.
#pragma once

#include <cmath>
#include <cstdint>

#include "dashattn/entmax.h"
#include "bias_lists.cuh"
#include "dashattn/prior.h"
#include "mma_sm80.cuh"
#include "route.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileChunks = 16;                 // chunks per summary tile (two n8 MMA tiles)
constexpr int kListBytes = 64 * 1024;           // candidate lists of the whole block
using dashattn::detail::kMaxCertifiedPasses;    // entmax.h's pass limit, for the kernels' own solve loops

struct RouteArgs {
  DeviceTensor q;          // [b, rows, h_q, d]
  DeviceTensor summaries;  // [b, max_chunks, h_kv, d]
  DeviceTensor mask;       // u32 [b, h_kv, rows, words]
  DeviceTensor tau;        // f32 [b, h_q, rows]
  DeviceTensor mu;         // f32 [b, h_kv, rows]
  DeviceTensor active;     // i32 [b, h_kv, rows] or undefined
  DeviceBatch batch;
  int64_t mask_words;
  int chunk;
  int group;
  int tokens_per_block;
  float x_scale;
  float alpha;
  EntmaxSolver solver;
  bool summaries_vec16;    // 16-byte aligned summary rows: vector loads
  bool only_flagged;       // multi-pass kernel: run only the blocks the other kernels handed over
  int stages;              // single-sweep kernel: summary tiles in flight (2..4)
  int list_cap;            // single-sweep kernel: candidates per list column
  BiasLists lists;         // forward() only: each token's routed chunks and log w for Stage 2 (bias_lists.cuh)
};

// τ bit pattern (a NaN no arithmetic produces) with which the cluster and single-sweep kernels mark, in the first
// row of a block, that they left the whole block to the multi-pass kernel. Every other row's τ is written normally
// or as the canonical NaN of a row with nothing to route.
constexpr uint32_t kHandOverTauBits = 0x7fc0d1a5u;

template <int kHeadDim>
struct Config {
  static constexpr int kRows = route_rows_per_block(kHeadDim);
  static constexpr int kMTiles = kRows / (16 * kWarps);  // m16 tiles per warp
  static constexpr int kKSteps = kHeadDim / 16;
  static constexpr int kListCap = kListBytes / (kRows * 4);  // candidates per row
  static constexpr int kTileStride = kHeadDim + 8;           // bf16 elements per smem summary row (bank spread)
};

// Shared-memory layout (dynamic). The candidate lists are dead once τ is known; the emit pass reuses them.
template <int kHeadDim>
struct Smem {
  using C = Config<kHeadDim>;
  static constexpr size_t kTileOff = 0;
  static constexpr size_t kTileBytes = size_t(kTileChunks) * C::kTileStride * 2;
  static constexpr size_t kRowOff = (kTileOff + kTileBytes + 15) / 16 * 16;
  // per row: limit (i32), max (f32), tau (f32), count (i32), t/lo/hi (f64), pending (i32)
  static constexpr size_t kRowBytes = size_t(C::kRows) * (4 * 4 + 3 * 8 + 4);
  static constexpr size_t kListOff = (kRowOff + kRowBytes + 15) / 16 * 16;
  static constexpr size_t kBytes = kListOff + kListBytes;
};

template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  uint16_t a, b;
  memcpy(&a, &lo, 2);
  memcpy(&b, &hi, 2);
  return static_cast<uint32_t>(a) | (static_cast<uint32_t>(b) << 16);
}

// The diagonal chunk of query i < sp.n_q of sequence sp. The chunk size is a power of two (16 to 128) and the
// position is not negative (n_q <= n_k), so a shift gives diagonal_chunk's quotient without a 64-bit division.
__device__ __forceinline__ int64_t query_diagonal_chunk(const RouteArgs& a, const SequenceSpan& sp, int64_t i) {
  return query_position(i, sp.n_q, sp.n_k) >> (__ffs(a.chunk) - 1);
}

// Routable chunks of block row rho (the token's diagonal chunk c_i; 0 for padding rows and rows past the block's
// tokens), shared by the routing kernels.
__device__ __forceinline__ int routable_chunks(const RouteArgs& a, const SequenceSpan& sp, int64_t tok0, int rho,
                                               int rows_used, int g) {
  if (rho >= rows_used) return 0;
  const int64_t i = tok0 + rho / g;
  return i < sp.n_q ? static_cast<int>(query_diagonal_chunk(a, sp, i)) : 0;
}

// Where the routing outputs of (sequence sp, KV head r) live, for every routing kernel: row ρ's τ of the block of
// tokens from tok0 (query head r·g + ρ mod g, token tok0 + ρ / g; g = a.group), and token i's mask row (word 0;
// words contiguous: launch_route takes no other mask), μ and active count (null when not asked for).
__device__ __forceinline__ float* row_tau_ptr(const RouteArgs& a, const SequenceSpan& sp, int r, int g,
                                              int64_t tok0, int rho) {
  const int64_t i = tok0 + rho / g;
  return a.tau.ptr<float>(sp.batch_index, int64_t(r) * g + rho % g, sp.q_begin + i);
}
__device__ __forceinline__ uint32_t* token_mask_row(const RouteArgs& a, const SequenceSpan& sp, int r, int64_t i) {
  return a.mask.ptr<uint32_t>(sp.batch_index, r, sp.q_begin + i);
}
__device__ __forceinline__ float* token_mu_ptr(const RouteArgs& a, const SequenceSpan& sp, int r, int64_t i) {
  return a.mu.ptr<float>(sp.batch_index, r, sp.q_begin + i);
}
__device__ __forceinline__ int32_t* token_active_ptr(const RouteArgs& a, const SequenceSpan& sp, int r, int64_t i) {
  return a.active.defined() ? a.active.ptr<int32_t>(sp.batch_index, r, sp.q_begin + i) : nullptr;
}
// The token's bias-list row (bias_lists.cuh; indexed like μ): its count, or null without lists.
__device__ __forceinline__ int32_t* token_list_count_ptr(const RouteArgs& a, const SequenceSpan& sp, int r,
                                                         int64_t i) {
  return a.lists.on() ? a.lists.counts + a.mu.offset(sp.batch_index, r, sp.q_begin + i) : nullptr;
}
// The entries of the row whose count is at `count` (token_list_count_ptr).
__device__ __forceinline__ int2* token_list_entries(const RouteArgs& a, const int32_t* count) {
  return a.lists.row(count - a.lists.counts);
}

// One lane's share of Σ log w and the routed count: a routed chunk's log (not NaN) is added, in the caller's order.
__device__ __forceinline__ void add_log_weight(float lg, float* log_sum, int* routed) {
  if (lg == lg) {
    *log_sum += lg;
    ++*routed;
  }
}

// The lanes' shares of Σ log w and of the count added by a butterfly: every lane holds the result.
__device__ __forceinline__ void warp_log_sum(float* log_sum, int* routed) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    *log_sum += __shfl_xor_sync(0xffffffffu, *log_sum, off);
    *routed += __shfl_xor_sync(0xffffffffu, *routed, off);
  }
}

// μ (the mean log w over the token's routed chunks, 0 when none or for a padding token) and the active count
// (routed chunks plus the diagonal one, 0 for a padding token) of a token (`real`: not padding) into *mu and, if
// not null, *active, from the token's Σ log w and routed count.
__device__ __forceinline__ void store_token_mu_value(float* mu, int32_t* active, bool real, float log_sum,
                                                     int routed) {
  *mu = (real && routed > 0) ? log_sum / static_cast<float>(routed) : 0.0f;
  if (active != nullptr) *active = real ? routed + 1 : 0;
}

// store_token_mu_value from the partial sums of `parts` chunk ranges at part_log[k·stride], added in range order (the
// order fixes the bits of μ).
__device__ __forceinline__ void store_token_mu_at(float* mu, int32_t* active, bool real, const float* part_log,
                                                  const int* part_routed, int parts, int stride) {
  float log_sum = 0.0f;
  int routed = 0;
  for (int k = 0; k < parts; ++k) {
    log_sum += part_log[k * stride];
    routed += part_routed[k * stride];
  }
  store_token_mu_value(mu, active, real, log_sum, routed);
}

// store_token_mu_at for query i of the sequence (KV head r).
__device__ __forceinline__ void store_token_mu(const RouteArgs& a, const SequenceSpan& sp, int r, int64_t i,
                                               const float* part_log, const int* part_routed, int parts, int stride) {
  store_token_mu_at(token_mu_ptr(a, sp, r, i), token_active_ptr(a, sp, r, i), i < sp.n_q, part_log, part_routed,
                    parts, stride);
  // These kernels list no chunks for Stage 2's bias.
  if (int32_t* count = token_list_count_ptr(a, sp, r, i)) *count = kNoList;
}

// Accumulated per-row statistics of one certified pass at trial t (entmax.h's PassSums).
struct RowSums {
  int k;
  double s1, s2, sp, spm1;
  float below, above;
};

__device__ __forceinline__ void row_sums_reset(RowSums& r) {
  r.k = 0;
  r.s1 = r.s2 = r.sp = r.spm1 = 0.0;
  r.below = -INFINITY;
  r.above = INFINITY;
}

__device__ __forceinline__ void row_sums_add(RowSums& r, float x, double t, double p, bool general) {
  const double y = static_cast<double>(x) - t;
  if (y > 0) {
    ++r.k;
    r.s1 += y;
    r.s2 += y * y;
    if (general) {
      const double ypm1 = pow(y, p - 1.0);
      r.spm1 += ypm1;
      r.sp += ypm1 * y;
    }
    r.above = fminf(r.above, x);
  } else {
    r.below = fmaxf(r.below, x);
  }
}

// Sums over the four lanes that hold one row's columns (fixed butterfly order).
__device__ __forceinline__ void row_sums_quad_reduce(RowSums& r) {
  for (int off = 1; off <= 2; off <<= 1) {
    r.k += __shfl_xor_sync(0xffffffffu, r.k, off);
    r.s1 += __shfl_xor_sync(0xffffffffu, r.s1, off);
    r.s2 += __shfl_xor_sync(0xffffffffu, r.s2, off);
    r.sp += __shfl_xor_sync(0xffffffffu, r.sp, off);
    r.spm1 += __shfl_xor_sync(0xffffffffu, r.spm1, off);
    r.below = fmaxf(r.below, __shfl_xor_sync(0xffffffffu, r.below, off));
    r.above = fminf(r.above, __shfl_xor_sync(0xffffffffu, r.above, off));
  }
}

// One step of entmax.h's certified iteration (exact mode) or of its 3-step Halley approximation (reference mode)
// for a row whose sums at trial t are s. Returns true when τ is final (written to *tau).
__device__ inline bool certified_step(const RowSums& s, double alpha, EntmaxSolver solver, int iteration, double* t,
                               double* lo, double* hi, double* tau) {
  const bool is15 = alpha == 1.5, is2 = alpha == 2.0;
  const double p = 1.0 / (alpha - 1.0);
  if (solver == EntmaxSolver::kReference) {
    const double f = is15 ? s.s2 - 1.0 : s.sp - 1.0;
    const double fp = is15 ? -2.0 * s.s1 : -p * s.spm1;
    const double fpp = is15 ? 2.0 * s.k : 0.0;
    if (f > 0) *lo = *t; else *hi = *t;
    const double denom = 2.0 * fp * fp - f * fpp;
    double next = denom != 0.0 ? *t - 2.0 * f * fp / denom : 0.5 * (*lo + *hi);
    if (!(next >= *lo - 1e-5 && next <= *hi + 1e-5)) next = 0.5 * (*lo + *hi);
    *t = next;
    if (iteration + 1 >= 3) {
      *tau = next;
      return true;
    }
    return false;
  }
  if (is15 || is2) {
    // entmax.h's own step, so that τ has the solver's bits; this kernel stops after kMaxCertifiedPasses passes.
    const detail::PassSums ps{s.k, s.s1, s.s2, 0.0, 0.0, s.below, s.above};  // Σy^p terms: general α only
    double root;
    bool stop = false;
    if (detail::piece_root_step(ps, is2, *t, *lo, *hi, &root, &stop)) {
      *tau = root;
      return true;
    }
    if (stop || iteration + 1 >= kMaxCertifiedPasses) {
      *tau = *t;  // the step moved t to its next trial
      return true;
    }
    return false;
  }
  const double f = s.sp - 1.0;
  if (f > 0) *lo = *t; else *hi = *t;
  const double fp = -p * s.spm1;
  double next = fp != 0.0 ? *t - f / fp : 0.5 * (*lo + *hi);
  if (!(next > *lo && next < *hi)) next = 0.5 * (*lo + *hi);
  if (*hi - *lo <= 1e-7 * fmax(1.0, fabs(*t)) * 1e-2 || fabs(f) <= 1e-12 ||
      iteration + 1 >= kMaxCertifiedPasses) {
    *tau = next;
    return true;
  }
  *t = next;
  return false;
}

// Candidate list of one row, column-major in shared memory (entry i of row ρ at i·kRows + ρ).
template <int kRows>
struct ListValues {
  const float* vals;
  int row;
  __device__ float operator()(int i) const { return vals[i * kRows + row]; }
};

// The multi-pass routing of one block (tokens from tok0 of sequence seq, KV head r) by the whole thread block, in
// smem (at least Smem<kHeadDim>::kBytes, 16-byte aligned). Run by route_kernel, and by the single-sweep kernel
// (route_fast.cuh) in place for a block whose candidates overflow its lists.
template <int kHeadDim, typename T>
__device__ __forceinline__ void route_block(const RouteArgs& a, int64_t tok0, int r, int64_t seq,
                                            unsigned char* smem) {
  using C = Config<kHeadDim>;
  using S = Smem<kHeadDim>;
  constexpr int kRows = C::kRows, kMT = C::kMTiles, kKS = C::kKSteps, kCap = C::kListCap;
  uint16_t* tile = reinterpret_cast<uint16_t*>(smem + S::kTileOff);
  int* row_limit = reinterpret_cast<int*>(smem + S::kRowOff);
  float* row_max = reinterpret_cast<float*>(row_limit + kRows);
  float* row_tau = row_max + kRows;
  int* row_count = reinterpret_cast<int*>(row_tau + kRows);
  double* row_t = reinterpret_cast<double*>(smem + S::kRowOff + size_t(kRows) * 16);
  double* row_lo = row_t + kRows;
  double* row_hi = row_lo + kRows;
  int* row_pending = reinterpret_cast<int*>(row_hi + kRows);
  float* list_val = reinterpret_cast<float*>(smem + S::kListOff);
  __shared__ int block_flag;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = a.group;
  const SequenceSpan sp = device_sequence_span(a.batch, seq);
  // Rows this sequence owns on the q axis: its real queries, plus padding rows of a padded batch.
  const int64_t owned_rows = a.batch.cu_seqlens_q != nullptr ? sp.n_q : a.batch.padded_n_q;
  if (tok0 >= owned_rows) return;
  const int tokens = static_cast<int>((owned_rows - tok0 < a.tokens_per_block ? owned_rows - tok0 : int64_t(a.tokens_per_block)));
  const int rows_used = tokens * g;
  if (a.only_flagged &&
      __float_as_uint(*row_tau_ptr(a, sp, r, g, tok0, 0)) != kHandOverTauBits) {
    return;
  }

  // Routable chunks per row: c_i of the token, 0 for padding.
  for (int rho = tid; rho < kRows; rho += kThreads) {
    row_limit[rho] = routable_chunks(a, sp, tok0, rho, rows_used, g);
    row_count[rho] = 0;
    row_pending[rho] = 0;
  }
  // The last real token routes furthest (c_i grows with i).
  const int64_t last_real = (tok0 + tokens < sp.n_q ? tok0 + tokens : sp.n_q) - 1;
  const int cmax = last_real >= tok0 ? static_cast<int>(query_diagonal_chunk(a, sp, last_real)) : 0;
  const int ntiles = static_cast<int>((cmax + kTileChunks - 1) / kTileChunks);

  // Q fragments (A operand, row-major m16 x k16) for this warp's rows, loaded once.
  uint32_t qf[kMT][kKS][4];
  int lim[kMT][2];
  const int grp = lane >> 2, quad = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rho = (warp * kMT + mt) * 16 + grp + 8 * h;
      const bool valid = rho < rows_used && tok0 + rho / g < sp.n_q;
      const T* qrow = valid ? a.q.ptr<T>(sp.batch_index, sp.q_begin + tok0 + rho / g, int64_t(r) * g + rho % g, 0)
                            : nullptr;
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int e = ks * 16 + half * 8 + quad * 2;
          qf[mt][ks][h + 2 * half] = valid ? pack2(qrow[e], qrow[e + 1]) : 0u;
        }
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) lim[mt][h] = row_limit[(warp * kMT + mt) * 16 + grp + 8 * h];
  }

  // One sweep over the summary tiles; on_tile(tile, acc) sees x already scaled. Block-uniform.
  auto sweep = [&](auto&& on_tile) {
    for (int tl = 0; tl < ntiles; ++tl) {
      const int c0 = tl * kTileChunks;
      // Stage the tile: 16 summary rows (zeros past cmax).
      if (a.summaries_vec16) {
        constexpr int kVecPerRow = kHeadDim / 8;
        for (int v = tid; v < kTileChunks * kVecPerRow; v += kThreads) {
          const int row = v / kVecPerRow, col = (v % kVecPerRow) * 8;
          uint4 val = make_uint4(0, 0, 0, 0);
          if (c0 + row < cmax) val = load_vec16(a.summaries.ptr<T>(seq, c0 + row, r, col));
          *reinterpret_cast<uint4*>(tile + row * C::kTileStride + col) = val;
        }
      } else {
        for (int v = tid; v < kTileChunks * kHeadDim; v += kThreads) {
          const int row = v / kHeadDim, col = v % kHeadDim;
          uint16_t val = 0;
          if (c0 + row < cmax) memcpy(&val, a.summaries.ptr<T>(seq, c0 + row, r, col), 2);
          tile[row * C::kTileStride + col] = val;
        }
      }
      __syncthreads();
      float acc[kMT][2][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        uint32_t bf[2][2];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint16_t* brow = tile + (n * 8 + grp) * C::kTileStride + ks * 16 + quad * 2;
          bf[n][0] = *reinterpret_cast<const uint32_t*>(brow);
          bf[n][1] = *reinterpret_cast<const uint32_t*>(brow + 8);
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int n = 0; n < 2; ++n) mma_m16n8k16<T>(acc[mt][n], qf[mt][ks], bf[n]);
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][n][i] *= a.x_scale;
      on_tile(tl, acc);
      __syncthreads();
    }
  };
  // Element (mt, n, i) of the accumulators: row half h = i / 2, chunk c0 + n·8 + 2·quad + (i & 1).

  // ---- Pass 1: row maxima ----
  float mx[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) mx[mt][0] = mx[mt][1] = -INFINITY;
  sweep([&](int tl, float (&acc)[kMT][2][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = tl * kTileChunks + n * 8 + quad * 2 + (i & 1);
          if (c < lim[mt][i >> 1]) mx[mt][i >> 1] = fmaxf(mx[mt][i >> 1], acc[mt][n][i]);
        }
  });
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[mt][h] = fmaxf(mx[mt][h], __shfl_xor_sync(0xffffffffu, mx[mt][h], 1));
      mx[mt][h] = fmaxf(mx[mt][h], __shfl_xor_sync(0xffffffffu, mx[mt][h], 2));
      if (quad == 0) row_max[(warp * kMT + mt) * 16 + grp + 8 * h] = mx[mt][h];
    }

  // ---- Pass 2: candidate lists, in chunk order ----
  // Slightly below m − 1 so that rounding never drops a support element (extra candidates are harmless).
  float th[kMT][2];
  int cnt[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      th[mt][h] = mx[mt][h] - 1.0f - 1e-4f * fmaxf(1.0f, fabsf(mx[mt][h]));
      cnt[mt][h] = 0;
    }
  sweep([&](int tl, float (&acc)[kMT][2][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t bits = 0;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int col = n * 8 + quad * 2 + j;
            if (tl * kTileChunks + col < lim[mt][h] && acc[mt][n][2 * h + j] > th[mt][h]) bits |= 1u << col;
          }
        bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
        bits |= __shfl_xor_sync(0xffffffffu, bits, 2);
        if (bits == 0) continue;
        const int rho = (warp * kMT + mt) * 16 + grp + 8 * h;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int col = n * 8 + quad * 2 + j;
            if (bits & (1u << col)) {
              const int slot = cnt[mt][h] + __popc(bits & ((1u << col) - 1u));
              if (slot < kCap) list_val[slot * kRows + rho] = acc[mt][n][2 * h + j];
            }
          }
        cnt[mt][h] += __popc(bits);
      }
  });
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (quad == 0) row_count[(warp * kMT + mt) * 16 + grp + 8 * h] = cnt[mt][h];
  if (tid == 0) block_flag = 0;
  __syncthreads();

  // ---- Solve τ on chip for rows whose candidates fit ----
  for (int rho = tid; rho < kRows; rho += kThreads) {
    const int n = row_count[rho];
    float tau = NAN;
    if (row_limit[rho] > 0) {
      if (n <= kCap) {
        tau = static_cast<float>(entmax_threshold(ListValues<kRows>{list_val, rho}, n, a.alpha, a.solver).tau);
      } else {
        row_pending[rho] = 1;
        row_t[rho] = (a.solver == EntmaxSolver::kReference) ? static_cast<double>(row_max[rho]) - 0.5
                                                            : static_cast<double>(row_max[rho]) - 1.0;
        row_lo[rho] = static_cast<double>(row_max[rho]) - 1.0;
        row_hi[rho] = row_max[rho];
        atomicOr(&block_flag, 1);
      }
    }
    row_tau[rho] = tau;
  }
  __syncthreads();

  // ---- Overflowing rows: certified passes over recomputed scores ----
  if (block_flag) {
    const double alpha = a.alpha;
    const bool general = !(alpha == 1.5 || alpha == 2.0) || a.solver == EntmaxSolver::kReference;
    const double pw = 1.0 / (alpha - 1.0);
    for (int it = 0; it < kMaxCertifiedPasses; ++it) {
      double t_reg[kMT][2];
      bool pend[kMT][2];
      RowSums sums[kMT][2];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int rho = (warp * kMT + mt) * 16 + grp + 8 * h;
          pend[mt][h] = row_pending[rho] != 0;
          t_reg[mt][h] = row_t[rho];
          row_sums_reset(sums[mt][h]);
        }
      sweep([&](int tl, float (&acc)[kMT][2][4]) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int h = i >> 1;
              const int c = tl * kTileChunks + n * 8 + quad * 2 + (i & 1);
              if (pend[mt][h] && c < lim[mt][h]) row_sums_add(sums[mt][h], acc[mt][n][i], t_reg[mt][h], pw, general);
            }
      });
      if (tid == 0) block_flag = 0;
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          row_sums_quad_reduce(sums[mt][h]);
          const int rho = (warp * kMT + mt) * 16 + grp + 8 * h;
          if (quad == 0 && pend[mt][h]) {
            double t = t_reg[mt][h], lo = row_lo[rho], hi = row_hi[rho], tau = 0;
            if (certified_step(sums[mt][h], alpha, a.solver, it, &t, &lo, &hi, &tau)) {
              row_tau[rho] = static_cast<float>(tau);
              row_pending[rho] = 0;
            } else {
              row_t[rho] = t;
              row_lo[rho] = lo;
              row_hi[rho] = hi;
              atomicOr(&block_flag, 1);
            }
          }
        }
      __syncthreads();
      if (!block_flag) break;
    }
  }

  // ---- Emit: group weights, mask words, μ, active counts ----
  // The lists are dead: reuse their memory for one tile of weights and per-(token, column) accumulators.
  float* wtile = list_val;                                   // [kRows][kTileChunks] entmax weights of the tile
  float* logsum = wtile + kRows * kTileChunks;               // [tokens][kTileChunks]
  int* routed = reinterpret_cast<int*>(logsum + kRows * kTileChunks);
  uint32_t* word_acc = reinterpret_cast<uint32_t*>(routed + kRows * kTileChunks);  // [tokens]
  const int pairs = tokens * kTileChunks;
  for (int i = tid; i < pairs; i += kThreads) {
    logsum[i] = 0.0f;
    routed[i] = 0;
  }
  for (int i = tid; i < tokens; i += kThreads) word_acc[i] = 0u;
  float tau_reg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) tau_reg[mt][h] = row_tau[(warp * kMT + mt) * 16 + grp + 8 * h];
  const float alpha_f = a.alpha;
  auto write_word = [&](int token, int64_t word, uint32_t bits) {
    const int64_t i = tok0 + token;
    if (i < sp.n_q) {
      const int64_t diag = query_diagonal_chunk(a, sp, i);
      if ((diag >> 5) == word) bits |= 1u << (diag & 31);
    } else {
      bits = 0u;
    }
    *a.mask.ptr<uint32_t>(sp.batch_index, r, sp.q_begin + i, word) = bits;
  };
  __syncthreads();
  sweep([&](int tl, float (&acc)[kMT][2][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int h = i >> 1;
          const int col = n * 8 + quad * 2 + (i & 1);
          const int rho = (warp * kMT + mt) * 16 + grp + 8 * h;
          const bool in_range = tl * kTileChunks + col < lim[mt][h];
          wtile[rho * kTileChunks + col] = in_range ? entmax_weight(acc[mt][n][i], tau_reg[mt][h], alpha_f) : 0.0f;
        }
    __syncthreads();
    for (int pr = tid; pr < pairs; pr += kThreads) {
      const int token = pr / kTileChunks, col = pr % kTileChunks;
      const float* wcol = wtile + token * g * kTileChunks + col;
      float sum = 0.0f;
      for (int hh = 0; hh < g; ++hh) sum += wcol[hh * kTileChunks];  // head order, as group_weight
      const float w = group_mean(sum, g);
      if (w > 0.0f) {
        logsum[pr] += logf(w);
        routed[pr] += 1;
        atomicOr(&word_acc[token], 1u << (((tl & 1) << 4) + col));
      }
    }
    __syncthreads();
    if ((tl & 1) == 1 || tl == ntiles - 1) {
      for (int token = tid; token < tokens; token += kThreads) {
        write_word(token, tl >> 1, word_acc[token]);
        word_acc[token] = 0u;
      }
    }
  });
  // Words past the scored range: zeros plus the diagonal bit.
  const int64_t first_unwritten = (ntiles + 1) / 2;
  for (int64_t v = tid; v < int64_t(tokens) * (a.mask_words - first_unwritten); v += kThreads) {
    const int token = static_cast<int>(v / (a.mask_words - first_unwritten));
    write_word(token, first_unwritten + v % (a.mask_words - first_unwritten), 0u);
  }
  // τ per query head, μ and active count per token.
  for (int rho = tid; rho < rows_used; rho += kThreads)
    *row_tau_ptr(a, sp, r, g, tok0, rho) = tok0 + rho / g < sp.n_q ? row_tau[rho] : NAN;
  for (int token = tid; token < tokens; token += kThreads) {
    store_token_mu(a, sp, r, tok0 + token, logsum + token * kTileChunks, routed + token * kTileChunks, kTileChunks, 1);
  }
}

// route_block as a call of its own, for the single-sweep kernel's rare overflow: inlined there, its registers
// spilled into the sweep (ptxas: 40 -> 352 bytes of spill stores at d = 128). The arguments go by value, so that no
// address of the kernel's parameters is taken.
template <int kHeadDim, typename T>
__device__ __noinline__ void route_block_call(RouteArgs a, int64_t tok0, int r, int64_t seq, unsigned char* smem) {
  route_block<kHeadDim, T>(a, tok0, r, seq, smem);
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kThreads) route_kernel(RouteArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  route_block<kHeadDim, T>(a, static_cast<int64_t>(blockIdx.x) * a.tokens_per_block, static_cast<int>(blockIdx.y),
                           static_cast<int64_t>(blockIdx.z), smem);
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
