// Dynamic dispatch of the SIMD kernels: foreach_target.h re-includes this file once per instruction set, each
// pass compiling simd_kernels-inl.h for one target; the HWY_ONCE part exports the per-target tables and the
// plain functions declared in simd_kernels.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/simd_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "backends/cpu/simd_kernels-inl.h"
#include "hwy/highway.h"

#if HWY_ONCE
#include "backends/cpu/simd_kernels.h"

namespace dashattn {
namespace cpu {

HWY_EXPORT(LoadRow);
HWY_EXPORT(StoreRow);
HWY_EXPORT(ScaleRow);
HWY_EXPORT(DotRow);
HWY_EXPORT(MatmulBt);
HWY_EXPORT(SoftmaxStep);
HWY_EXPORT(AccumulatePv);
HWY_EXPORT(PrefixSoftmax);
HWY_EXPORT(SimdTargetName);

void load_row(const void* src, DType type, int64_t n, float* dst) {
  HWY_DYNAMIC_DISPATCH(LoadRow)(src, type, n, dst);
}

void store_row(const float* src, int64_t n, float factor, DType type, void* dst) {
  HWY_DYNAMIC_DISPATCH(StoreRow)(src, n, factor, type, dst);
}

void scale_row(const float* src, int64_t n, float factor, float* dst) {
  HWY_DYNAMIC_DISPATCH(ScaleRow)(src, n, factor, dst);
}

float dot_row(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotRow)(a, b, n); }

void matmul_bt(const float* const* a_rows, int rows, int depth, const float* bt, int64_t bt_stride, int cols,
               float* s, int64_t s_stride) {
  HWY_DYNAMIC_DISPATCH(MatmulBt)(a_rows, rows, depth, bt, bt_stride, cols, s, s_stride);
}

void softmax_step(float* s, int64_t s_stride, int rows, int cols, float scale, const float* bias, const int* valid,
                  float* row_max, float* row_sum, float* rescale) {
  HWY_DYNAMIC_DISPATCH(SoftmaxStep)(s, s_stride, rows, cols, scale, bias, valid, row_max, row_sum, rescale);
}

void accumulate_pv(float* const* o_rows, const float* rescale, const float* const* p_rows, int rows,
                   const float* v, int64_t v_stride, int keys, int width) {
  HWY_DYNAMIC_DISPATCH(AccumulatePv)(o_rows, rescale, p_rows, rows, v, v_stride, keys, width);
}

void prefix_softmax(const float* const* a_rows, int rows, int depth, int valid, const float* kt, int64_t kt_stride,
                    float scale, float* row_max, float* row_sum, float* rescale, float* p, int64_t p_stride) {
  HWY_DYNAMIC_DISPATCH(PrefixSoftmax)(a_rows, rows, depth, valid, kt, kt_stride, scale, row_max, row_sum, rescale, p,
                                      p_stride);
}

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(SimdTargetName)(); }

}  // namespace cpu
}  // namespace dashattn
#endif  // HWY_ONCE
