// SIMD kernels of the CPU backend, dispatched at run time to the best instruction set Highway compiled for
// (simd_kernels.cc, simd_kernels-inl.h).
//
// Determinism contract: every output element of matmul_bt is one MulAdd chain over the depth index in order, so
// its value does not depend on which lane, row block or column block computed it. Stage 1 and Stage 2 both score
// queries against chunk summaries with matmul_bt, which is what makes the routing weight Stage 2 rebuilds
// bitwise equal to the one Stage 1 thresholded, whatever subset of chunks each stage scores.
#pragma once

#include <cstdint>

#include "dashattn/dtype.h"

namespace dashattn {
namespace cpu {

// Packed float rows and columns are padded to a multiple of this many floats: a multiple of the lane count of
// every x86 target (16 f32 lanes on AVX-512), so kernels never need a remainder loop over padded data.
constexpr int64_t kFloatPad = 16;
inline int64_t pad_floats(int64_t n) { return (n + kFloatPad - 1) / kFloatPad * kFloatPad; }

// dst[i] = float(src[i]) for i < n; exact for f32, f16 and bf16.
void load_row(const void* src, DType type, int64_t n, float* dst);

// dst[i] = round_to(type, src[i] * factor) for i < n, rounding exactly as dashattn::store_from_float.
void store_row(const float* src, int64_t n, float factor, DType type, void* dst);

// dst[i] = src[i] * factor.
void scale_row(const float* src, int64_t n, float factor, float* dst);

// Σ a[i]·b[i] with a fixed summation order (per target).
float dot_row(const float* a, const float* b, int64_t n);

// s[r·s_stride + c] = Σ_{t < depth} a_rows[r][t] · bt[t·bt_stride + c] for r < rows, c < cols.
// cols must be a multiple of kFloatPad; bt and s 64-byte aligned with strides that are multiples of kFloatPad.
void matmul_bt(const float* const* a_rows, int rows, int depth, const float* bt, int64_t bt_stride, int cols,
               float* s, int64_t s_stride);

// One online-softmax step over a block of key scores per row. For every row r < rows, with x = s row r:
//   x[j] = x[j]·scale (+ bias[r], fused, when bias is non-null and bias[r] != 0), x[j] = −inf for j >= valid[r],
//   m' = max(row_max[r], max x),
//   rescale[r] = exp(row_max[r] − m'), x[j] = exp(x[j] − m') (0 for j >= valid[r]),
//   row_sum[r] = row_sum[r]·rescale[r] + Σ x, row_max[r] = m'.
// cols is a multiple of kFloatPad and every valid[r] >= 1.
void softmax_step(float* s, int64_t s_stride, int rows, int cols, float scale, const float* bias, const int* valid,
                  float* row_max, float* row_sum, float* rescale);

// o_rows[r][c] = o_rows[r][c]·rescale[r] + Σ_{j < keys} p_rows[r][j] · v[j·v_stride + c] for c < width.
// A row with rescale 0 starts from 0 without reading o_rows[r] (a fresh accumulator needs no clearing).
// width is a multiple of kFloatPad; o rows and v 64-byte aligned.
void accumulate_pv(float* const* o_rows, const float* rescale, const float* const* p_rows, int rows,
                   const float* v, int64_t v_stride, int keys, int width);

// Scores and one online-softmax step of rows that see only the first `valid` keys of a chunk (one query's rows
// on its diagonal chunk): bitwise matmul_bt over pad_floats(valid) columns into p followed by softmax_step with
// valid[r] = valid and no bias, but each register block's scores become probabilities in registers.
void prefix_softmax(const float* const* a_rows, int rows, int depth, int valid, const float* kt, int64_t kt_stride,
                    float scale, float* row_max, float* row_sum, float* rescale, float* p, int64_t p_stride);

// Name of the instruction set the kernels run on ("AVX3", "AVX2", ...).
const char* simd_target_name();

}  // namespace cpu
}  // namespace dashattn
