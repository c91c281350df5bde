// Per-target bodies of the SIMD kernels declared in simd_kernels.h. Included once per instruction set by
// simd_kernels.cc through hwy/foreach_target.h, hence the toggling include guard instead of #pragma once.
#if defined(DASHATTN_CPU_SIMD_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DASHATTN_CPU_SIMD_KERNELS_INL_H_
#undef DASHATTN_CPU_SIMD_KERNELS_INL_H_
#else
#define DASHATTN_CPU_SIMD_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/simd_kernels.h"
#include "dashattn/dtype.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dashattn {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using FloatTag = hn::ScalableTag<float>;
using FloatVec = hn::Vec<FloatTag>;

// Register blocking of the two matrix kernels: rows × vectors accumulators. AVX-512 has 32 vector registers,
// the older x86 targets 16; blocks that exceed the register file spill inside the innermost loop.
#if HWY_TARGET <= HWY_AVX3
constexpr int kBlockRows = 4;
constexpr int kBlockVecs = 4;
#else
constexpr int kBlockRows = 4;
constexpr int kBlockVecs = 2;
#endif

inline void LoadRow(const void* src, DType type, int64_t n, float* dst) {
  const FloatTag df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  switch (type) {
    case DType::kBF16: {
      // bf16 is the upper half of an f32: widen and shift, exact.
      const hn::Rebind<uint16_t, FloatTag> du16;
      const hn::Rebind<int32_t, FloatTag> di32;
      const uint16_t* p = static_cast<const uint16_t*>(src);
      for (; i + lanes <= n; i += lanes) {
        const auto wide = hn::PromoteTo(di32, hn::LoadU(du16, p + i));
        hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(wide)), df, dst + i);
      }
      for (; i < n; ++i) dst[i] = bf16_to_float(p[i]);
      return;
    }
    case DType::kF16: {
      // Integer recipe of dashattn::f16_to_float (Highway's emulated PromoteTo flushes subnormals on targets
      // without F16C, and the result must not depend on the target).
      const hn::Rebind<uint16_t, FloatTag> du16;
      const hn::Rebind<int32_t, FloatTag> di32;
      const uint16_t* p = static_cast<const uint16_t*>(src);
      const auto exp_mask = hn::Set(di32, 0x1f);
      const auto mant_mask = hn::Set(di32, 0x3ff);
      const auto sign_mask = hn::Set(di32, 0x8000);
      const auto exp_bias = hn::Set(di32, 112);
      const auto inf_bits = hn::Set(di32, 0x7f800000);
      const auto max_exp = hn::Set(di32, 31);
      const FloatVec subnormal_unit = hn::Set(df, 5.9604644775390625e-8f);  // 2^-24
      for (; i + lanes <= n; i += lanes) {
        const auto bits = hn::PromoteTo(di32, hn::LoadU(du16, p + i));
        const auto sign = hn::ShiftLeft<16>(hn::And(bits, sign_mask));
        const auto exp = hn::And(hn::ShiftRight<10>(bits), exp_mask);
        const auto mant = hn::And(bits, mant_mask);
        const auto mant_shifted = hn::ShiftLeft<13>(mant);
        const auto normal = hn::Or(hn::ShiftLeft<23>(hn::Add(exp, exp_bias)), mant_shifted);
        const auto inf_nan = hn::Or(inf_bits, mant_shifted);
        const auto subnormal = hn::BitCast(di32, hn::Mul(hn::ConvertTo(df, mant), subnormal_unit));
        const auto magnitude = hn::IfThenElse(hn::Eq(exp, hn::Zero(di32)), subnormal,
                                              hn::IfThenElse(hn::Eq(exp, max_exp), inf_nan, normal));
        hn::StoreU(hn::BitCast(df, hn::Or(sign, magnitude)), df, dst + i);
      }
      for (; i < n; ++i) dst[i] = f16_to_float(p[i]);
      return;
    }
    default:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
  }
}

inline void StoreRow(const float* src, int64_t n, float factor, DType type, void* dst) {
  const FloatTag df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const FloatVec vf = hn::Set(df, factor);
  int64_t i = 0;
  switch (type) {
    case DType::kBF16: {
      // Round to nearest even with quiet NaNs, the same integer recipe as dashattn::float_to_bf16.
      const hn::RebindToSigned<FloatTag> di;
      const hn::Rebind<uint16_t, FloatTag> du16;
      uint16_t* p = static_cast<uint16_t*>(dst);
      const auto abs_mask = hn::Set(di, 0x7fffffff);
      const auto inf_bits = hn::Set(di, 0x7f800000);
      const auto round_bias = hn::Set(di, 0x7fff);
      const auto one = hn::Set(di, 1);
      const auto quiet = hn::Set(di, 0x40);
      const auto low16 = hn::Set(di, 0xffff);
      for (; i + lanes <= n; i += lanes) {
        const auto u = hn::BitCast(di, hn::Mul(hn::LoadU(df, src + i), vf));
        const auto is_nan = hn::Gt(hn::And(u, abs_mask), inf_bits);
        const auto lsb = hn::And(hn::ShiftRight<16>(u), one);
        const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(round_bias, lsb)));
        const auto nan_bits = hn::Or(hn::ShiftRight<16>(u), quiet);
        const auto bits = hn::And(hn::IfThenElse(is_nan, nan_bits, rounded), low16);
        hn::StoreU(hn::DemoteTo(du16, bits), du16, p + i);
      }
      for (; i < n; ++i) p[i] = float_to_bf16(src[i] * factor);
      return;
    }
    case DType::kF16: {
      // Rare path; the scalar conversion is the contract's definition of f16 rounding (subnormals included).
      uint16_t* p = static_cast<uint16_t*>(dst);
      for (; i < n; ++i) p[i] = float_to_f16(src[i] * factor);
      return;
    }
    default: {
      float* p = static_cast<float*>(dst);
      for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(df, src + i), vf), df, p + i);
      for (; i < n; ++i) p[i] = src[i] * factor;
      return;
    }
  }
}

inline void ScaleRow(const float* src, int64_t n, float factor, float* dst) {
  const FloatTag df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const FloatVec vf = hn::Set(df, factor);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(df, src + i), vf), df, dst + i);
  for (; i < n; ++i) dst[i] = src[i] * factor;
}

inline float DotRow(const float* a, const float* b, int64_t n) {
  const FloatTag df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  FloatVec acc0 = hn::Zero(df), acc1 = hn::Zero(df), acc2 = hn::Zero(df), acc3 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + lanes), hn::LoadU(df, b + i + lanes), acc1);
    acc2 = hn::MulAdd(hn::LoadU(df, a + i + 2 * lanes), hn::LoadU(df, b + i + 2 * lanes), acc2);
    acc3 = hn::MulAdd(hn::LoadU(df, a + i + 3 * lanes), hn::LoadU(df, b + i + 3 * lanes), acc3);
  }
  for (; i + lanes <= n; i += lanes) acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
  const FloatVec acc = hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3));
  float sum = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

template <int R, int V>
HWY_INLINE void MatmulTileRegisters(const float* const* a, int depth, const float* bt, int64_t bt_stride,
                                    FloatVec (&acc)[R][V]) {
  const FloatTag df;
  const size_t lanes = hn::Lanes(df);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(df);
  for (int t = 0; t < depth; ++t) {
    const float* brow = bt + static_cast<int64_t>(t) * bt_stride;
    FloatVec b[V];
    for (int v = 0; v < V; ++v) b[v] = hn::Load(df, brow + v * lanes);
    for (int r = 0; r < R; ++r) {
      const FloatVec av = hn::Set(df, a[r][t]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(av, b[v], acc[r][v]);
    }
  }
}

template <int R, int V>
HWY_INLINE void MatmulTile(const float* const* a, int depth, const float* bt, int64_t bt_stride, float* s,
                           int64_t s_stride) {
  const FloatTag df;
  const size_t lanes = hn::Lanes(df);
  FloatVec acc[R][V];
  MatmulTileRegisters<R, V>(a, depth, bt, bt_stride, acc);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) hn::Store(acc[r][v], df, s + r * s_stride + v * lanes);
}

template <int R, int V>
HWY_INLINE void PvTile(float* const* o, const float* rescale, const float* const* p, const float* v,
                       int64_t v_stride, int keys, size_t col) {
  const FloatTag df;
  const size_t lanes = hn::Lanes(df);
  FloatVec acc[R][V];
  for (int r = 0; r < R; ++r) {
    if (rescale[r] == 0.0f) {
      // A fresh row (or one whose old terms underflowed): its accumulator memory may be uninitialized.
      for (int c = 0; c < V; ++c) acc[r][c] = hn::Zero(df);
    } else {
      const FloatVec sc = hn::Set(df, rescale[r]);
      for (int c = 0; c < V; ++c) acc[r][c] = hn::Mul(hn::Load(df, o[r] + col + c * lanes), sc);
    }
  }
  for (int j = 0; j < keys; ++j) {
    const float* vrow = v + static_cast<int64_t>(j) * v_stride + col;
    FloatVec vv[V];
    for (int c = 0; c < V; ++c) vv[c] = hn::Load(df, vrow + c * lanes);
    for (int r = 0; r < R; ++r) {
      const FloatVec pv = hn::Set(df, p[r][j]);
      for (int c = 0; c < V; ++c) acc[r][c] = hn::MulAdd(pv, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < V; ++c) hn::Store(acc[r][c], df, o[r] + col + c * lanes);
}

// Expands to one case per (rows, vectors) block shape up to 4 × 4; the compiler keeps each block's
// accumulators in registers because R and V are compile-time constants.
#define DASHATTN_BLOCK_CASES(CALL)                                                                   \
  switch (rb * 8 + vb) {                                                                             \
    case 1 * 8 + 1: CALL(1, 1); break;                                                               \
    case 1 * 8 + 2: CALL(1, 2); break;                                                               \
    case 1 * 8 + 3: CALL(1, 3); break;                                                               \
    case 1 * 8 + 4: CALL(1, 4); break;                                                               \
    case 2 * 8 + 1: CALL(2, 1); break;                                                               \
    case 2 * 8 + 2: CALL(2, 2); break;                                                               \
    case 2 * 8 + 3: CALL(2, 3); break;                                                               \
    case 2 * 8 + 4: CALL(2, 4); break;                                                               \
    case 3 * 8 + 1: CALL(3, 1); break;                                                               \
    case 3 * 8 + 2: CALL(3, 2); break;                                                               \
    case 3 * 8 + 3: CALL(3, 3); break;                                                               \
    case 3 * 8 + 4: CALL(3, 4); break;                                                               \
    case 4 * 8 + 1: CALL(4, 1); break;                                                               \
    case 4 * 8 + 2: CALL(4, 2); break;                                                               \
    case 4 * 8 + 3: CALL(4, 3); break;                                                               \
    case 4 * 8 + 4: CALL(4, 4); break;                                                               \
    default: break;                                                                                  \
  }

inline void MatmulBt(const float* const* a_rows, int rows, int depth, const float* bt, int64_t bt_stride, int cols,
                     float* s, int64_t s_stride) {
  const FloatTag df;
  const int lanes = static_cast<int>(hn::Lanes(df));
  const int nvec = cols / lanes;
  // Column blocks outside, rows inside: one block of bt (depth × kBlockVecs vectors) stays in L1 for all rows.
  for (int v0 = 0; v0 < nvec; v0 += kBlockVecs) {
    const int vb = std::min(kBlockVecs, nvec - v0);
    for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
      const int rb = std::min(kBlockRows, rows - r0);
      const float* const* a = a_rows + r0;
      const float* b = bt + static_cast<int64_t>(v0) * lanes;
      float* out = s + static_cast<int64_t>(r0) * s_stride + static_cast<int64_t>(v0) * lanes;
#define DASHATTN_MATMUL_CALL(R, V) MatmulTile<R, V>(a, depth, b, bt_stride, out, s_stride)
      DASHATTN_BLOCK_CASES(DASHATTN_MATMUL_CALL)
#undef DASHATTN_MATMUL_CALL
    }
  }
}

inline void AccumulatePv(float* const* o_rows, const float* rescale, const float* const* p_rows, int rows,
                         const float* v, int64_t v_stride, int keys, int width) {
  const FloatTag df;
  const int lanes = static_cast<int>(hn::Lanes(df));
  const int nvec = width / lanes;
  for (int v0 = 0; v0 < nvec; v0 += kBlockVecs) {
    const int vb = std::min(kBlockVecs, nvec - v0);
    const size_t col = static_cast<size_t>(v0) * lanes;
    for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
      const int rb = std::min(kBlockRows, rows - r0);
#define DASHATTN_PV_CALL(R, V) PvTile<R, V>(o_rows + r0, rescale + r0, p_rows + r0, v, v_stride, keys, col)
      DASHATTN_BLOCK_CASES(DASHATTN_PV_CALL)
#undef DASHATTN_PV_CALL
    }
  }
}

// exp(old − new) of the running maximum; the common cases (unchanged maximum, empty running state) skip the
// libm call and give the bits std::exp would.
inline float RescaleFactor(float old_max, float new_max) {
  if (old_max == new_max) return 1.0f;
  if (old_max == -std::numeric_limits<float>::infinity()) return 0.0f;
  return std::exp(old_max - new_max);
}

// One row held in NV registers: one load and one store per vector instead of four passes through memory, and
// the mask applied by a lane compare instead of scalar fills. Same operations in the same order as the memory
// form below, so the results are the same bits.
// The part after scaling: xv holds the scaled (and biased) scores of one row; the probabilities go to x.
template <int NV>
HWY_INLINE void SoftmaxScaledRow(FloatVec (&xv)[NV], float* x, int lim, float& row_max, float& row_sum,
                                 float& rescale) {
  const FloatTag df;
  const int lanes = static_cast<int>(hn::Lanes(df));
  const FloatVec neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const FloatVec vlim = hn::Set(df, static_cast<float>(lim));
  const FloatVec iota = hn::Iota(df, 0.0f);
  FloatVec mx = neg_inf;
  const bool partial = lim < NV * lanes;
  if (partial) {
    for (int v = 0; v < NV; ++v) {
      const auto keep = hn::Lt(hn::Add(iota, hn::Set(df, static_cast<float>(v * lanes))), vlim);
      xv[v] = hn::IfThenElse(keep, xv[v], neg_inf);
    }
  }
  for (int v = 0; v < NV; ++v) mx = hn::Max(mx, xv[v]);
  const float new_max = std::max(row_max, hn::GetLane(hn::MaxOfLanes(df, mx)));
  const float sc = RescaleFactor(row_max, new_max);
  const FloatVec m = hn::Set(df, new_max);
  FloatVec sum = hn::Zero(df);
  for (int v = 0; v < NV; ++v) {
    FloatVec e = hn::Exp(df, hn::Sub(xv[v], m));
    if (partial) e = hn::IfThenElseZero(hn::Lt(hn::Add(iota, hn::Set(df, static_cast<float>(v * lanes))), vlim), e);
    hn::Store(e, df, x + v * lanes);
    sum = hn::Add(sum, e);
  }
  rescale = sc;
  row_sum = row_sum * sc + hn::GetLane(hn::SumOfLanes(df, sum));
  row_max = new_max;
}

template <int NV>
HWY_INLINE void SoftmaxRowInRegisters(float* x, const FloatVec vscale, bool biased, float bias, int lim,
                                      float& row_max, float& row_sum, float& rescale) {
  const FloatTag df;
  const int lanes = static_cast<int>(hn::Lanes(df));
  FloatVec xv[NV];
  if (biased) {
    const FloatVec b = hn::Set(df, bias);
    for (int v = 0; v < NV; ++v) xv[v] = hn::MulAdd(hn::Load(df, x + v * lanes), vscale, b);
  } else {
    for (int v = 0; v < NV; ++v) xv[v] = hn::Mul(hn::Load(df, x + v * lanes), vscale);
  }
  SoftmaxScaledRow<NV>(xv, x, lim, row_max, row_sum, rescale);
}

inline void SoftmaxStep(float* s, int64_t s_stride, int rows, int cols, float scale, const float* bias,
                        const int* valid, float* row_max, float* row_sum, float* rescale) {
  const FloatTag df;
  const int lanes = static_cast<int>(hn::Lanes(df));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const FloatVec vscale = hn::Set(df, scale);
  const int nvec = cols / lanes;
  if (nvec <= 8) {
    for (int r = 0; r < rows; ++r) {
      float* x = s + static_cast<int64_t>(r) * s_stride;
      const bool biased = bias != nullptr && bias[r] != 0.0f;
      const float b = biased ? bias[r] : 0.0f;
      switch (nvec) {
#define DASHATTN_SOFTMAX_CASE(NV) \
  case NV: SoftmaxRowInRegisters<NV>(x, vscale, biased, b, valid[r], row_max[r], row_sum[r], rescale[r]); break;
        DASHATTN_SOFTMAX_CASE(1)
        DASHATTN_SOFTMAX_CASE(2)
        DASHATTN_SOFTMAX_CASE(3)
        DASHATTN_SOFTMAX_CASE(4)
        DASHATTN_SOFTMAX_CASE(5)
        DASHATTN_SOFTMAX_CASE(6)
        DASHATTN_SOFTMAX_CASE(7)
        DASHATTN_SOFTMAX_CASE(8)
#undef DASHATTN_SOFTMAX_CASE
        default: break;
      }
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    float* x = s + static_cast<int64_t>(r) * s_stride;
    const int lim = valid[r];
    FloatVec mx = hn::Set(df, neg_inf);
    if (bias != nullptr && bias[r] != 0.0f) {
      const FloatVec b = hn::Set(df, bias[r]);
      for (int j = 0; j < cols; j += lanes) {
        const FloatVec v = hn::MulAdd(hn::Load(df, x + j), vscale, b);
        hn::Store(v, df, x + j);
      }
    } else {
      for (int j = 0; j < cols; j += lanes) hn::Store(hn::Mul(hn::Load(df, x + j), vscale), df, x + j);
    }
    for (int j = lim; j < cols; ++j) x[j] = neg_inf;
    for (int j = 0; j < cols; j += lanes) mx = hn::Max(mx, hn::Load(df, x + j));
    const float block_max = hn::GetLane(hn::MaxOfLanes(df, mx));
    const float old_max = row_max[r];
    const float new_max = std::max(old_max, block_max);
    const float sc = RescaleFactor(old_max, new_max);
    const FloatVec m = hn::Set(df, new_max);
    FloatVec sum = hn::Zero(df);
    for (int j = 0; j < cols; j += lanes) {
      // Highway's Exp returns 0 below −104, so masked (−inf) columns vanish here.
      const FloatVec e = hn::Exp(df, hn::Sub(hn::Load(df, x + j), m));
      hn::Store(e, df, x + j);
      sum = hn::Add(sum, e);
    }
    for (int j = lim; j < cols; ++j) x[j] = 0.0f;
    rescale[r] = sc;
    row_sum[r] = row_sum[r] * sc + hn::GetLane(hn::SumOfLanes(df, sum));
    row_max[r] = new_max;
  }
}

// Scores of an R-row block against the first V vectors of keys, left in registers and turned into
// probabilities there: the same MulAdd chains as MatmulTile and the same steps as SoftmaxRowInRegisters, without
// the round trip of the scores through memory.
template <int R, int V>
HWY_INLINE void PrefixScoresTile(const float* const* a, int depth, const float* kt, int64_t kt_stride, int valid,
                                 float scale, float* row_max, float* row_sum, float* rescale, float* p,
                                 int64_t p_stride) {
  const FloatTag df;
  const FloatVec vscale = hn::Set(df, scale);
  FloatVec acc[R][V];
  MatmulTileRegisters<R, V>(a, depth, kt, kt_stride, acc);
  for (int r = 0; r < R; ++r) {
    FloatVec xv[V];
    for (int v = 0; v < V; ++v) xv[v] = hn::Mul(acc[r][v], vscale);
    SoftmaxScaledRow<V>(xv, p + r * p_stride, valid, row_max[r], row_sum[r], rescale[r]);
  }
}

inline void PrefixSoftmax(const float* const* a_rows, int rows, int depth, int valid, const float* kt,
                          int64_t kt_stride, float scale, float* row_max, float* row_sum, float* rescale, float* p,
                          int64_t p_stride) {
  const FloatTag df;
  const int lanes = static_cast<int>(hn::Lanes(df));
  // The column count the banded form used (valid rounded up to kFloatPad), so the softmax adds the same vectors.
  const int cols = static_cast<int>((valid + kFloatPad - 1) / kFloatPad * kFloatPad);
  const int vb = cols / lanes;
  for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int rb = std::min(kBlockRows, rows - r0);
    float* p_block = p + static_cast<int64_t>(r0) * p_stride;
    if (vb <= kBlockVecs) {
#define DASHATTN_PREFIX_CALL(R, V)                                                                           \
  PrefixScoresTile<R, V>(a_rows + r0, depth, kt, kt_stride, valid, scale, row_max + r0, row_sum + r0,        \
                         rescale + r0, p_block, p_stride)
      DASHATTN_BLOCK_CASES(DASHATTN_PREFIX_CALL)
#undef DASHATTN_PREFIX_CALL
    } else {
      // Wider than one register block (long chunks, narrow vectors): the same kernels through memory.
      const int row_valid[kBlockRows] = {valid, valid, valid, valid};
      MatmulBt(a_rows + r0, rb, depth, kt, kt_stride, cols, p_block, p_stride);
      SoftmaxStep(p_block, p_stride, rb, cols, scale, nullptr, row_valid, row_max + r0, row_sum + r0, rescale + r0);
    }
  }
}

#undef DASHATTN_BLOCK_CASES

inline const char* SimdTargetName() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace dashattn
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
