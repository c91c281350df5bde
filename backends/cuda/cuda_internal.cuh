// Internal interface of the CUDA backend: launch entry points of the stages, error checking, device-side views
// of strided tensors and of the batch layout, and the compile-time dispatch over the instantiated
// (head dim, dtype) pairs.
//
// Conventions every kernel of this backend follows (the backend front end relies on them):
//  - Launch on the given stream only: no host synchronization, no allocation, no device-to-host reads, so that a
//    decode step can be captured in a CUDA graph. Scratch comes from caller-owned buffers only.
//  - 64-bit index arithmetic for every product of sizes (n_q * h_kv * mask_words passes 2^31 on long contexts).
//  - The params arrive normalized (rank-4 views, see dashattn/validate.h) and already accepted by
//    CudaBackend::unsupported_reason: tensors on kCuda, q/k/v/summaries in bf16 or f16 (same dtype), o in the
//    dtype of q or f32, head dim in DASHATTN_HEAD_DIMS, chunk size 16/32/64/128, last stride 1 everywhere.
//  - Stage 1 is the ground truth of the mask: a chunk whose bit is set is routed even if a recomputed group
//    weight rounds to 0 (Stage 2 clamps the recomputed w to a tiny positive value, see kMinRoutedWeight).
//
// Generated instances. CMake configures every `<family>_instance.cu.in` of this directory once per pair of
// DASHATTN_HEAD_DIMS x DASHATTN_GPU_DTYPES into `<family>_hdim<H>_<dtype>.cu` in the build tree, with
//   @DASHATTN_HDIM@        the head dim, e.g. 128
//   @DASHATTN_CTYPE@       the CUDA element type, __nv_bfloat16 or __half
//   @DASHATTN_DTYPE_NAME@  bf16 or f16
// and writes `dashattn_cuda_instances.h` with DASHATTN_CUDA_INSTANCES(X), expanding X(HDIM, CTYPE) for each pair.
// A family's template typically holds an explicit instantiation such as
//   template void attend_instance<@DASHATTN_HDIM@, @DASHATTN_CTYPE@>(const AttendParams&, const ProblemShape&,
//                                                                     cudaStream_t);
// and the family's launcher picks the instance with dispatch_instance() below.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "dashattn/dtype.h"
#include "dashattn/error.h"
#include "dashattn/geometry.h"
#include "dashattn/params.h"
#include "dashattn/validate.h"
#include "dashattn_cuda_instances.h"  // generated: DASHATTN_CUDA_INSTANCES(X)

namespace dashattn {
namespace cuda {

// ---------------------------------------------------------------------------------------------------------------
// Launch entry points (host functions; each dispatches on head dim and dtype)
// ---------------------------------------------------------------------------------------------------------------

// Stage 0 (summarize.cu): summaries of chunks [first_chunk, n_k_s / C) of every sequence.
void launch_summarize(const SummarizeParams& p, cudaStream_t stream);
struct BiasLists;  // bias_lists.cuh
// Stage 1 (route.cu): mask, tau, mu, active_chunks, and with `lists` (forward() only) each token's routed chunks
// and log weights for Stage 2. s = route_shape(p).
void launch_route(const RouteParams& p, const ProblemShape& s, cudaStream_t stream,
                  const BiasLists* lists = nullptr);
// Stage 2 (attend_*.cu): prefill and decode sparse attention. s = attend_shape(p).
void launch_attend(const AttendParams& p, const ProblemShape& s, cudaStream_t stream);
// Dense causal baseline (dense_*.cu). s = shape of p as for attend (scale resolved).
void launch_dense(const DenseParams& p, const ProblemShape& s, cudaStream_t stream);

// Smallest group weight Stage 2 uses for a chunk whose Stage-1 bit is set (w recomputed there may differ from
// Stage 1's in the last bit and underflow to 0; the bit decides, the bias stays finite).
constexpr float kMinRoutedWeight = 1e-30f;

// ---------------------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------------------

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw InternalError(std::string("cuda:") + file + ":" + std::to_string(line),
                      std::string(expr) + " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

#define DASHATTN_CUDA_CHECK(expr)                                                   \
  do {                                                                              \
    const cudaError_t dashattn_err_ = (expr);                                       \
    if (dashattn_err_ != cudaSuccess) {                                             \
      ::dashattn::cuda::throw_cuda_error(dashattn_err_, #expr, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)
#define CUDA_CHECK(expr) DASHATTN_CUDA_CHECK(expr)

// After a launch: reports launch-configuration errors without synchronizing.
#define DASHATTN_CUDA_CHECK_LAUNCH() DASHATTN_CUDA_CHECK(cudaGetLastError())

// ---------------------------------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------------------------------

template <typename T>
struct ElementTraits;
template <>
struct ElementTraits<__nv_bfloat16> {
  static constexpr DType kDType = DType::kBF16;
};
template <>
struct ElementTraits<__half> {
  static constexpr DType kDType = DType::kF16;
};

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }

// Calls fn(std::integral_constant<int, HDIM>{}, CTYPE{}) for the instantiated pair matching (d, dtype); returns
// false when the pair is not instantiated (the caller throws Unsupported).
template <typename Fn>
bool dispatch_instance(int64_t d, DType dtype, Fn&& fn) {
#define DASHATTN_DISPATCH_ONE(HDIM, CTYPE)                                       \
  if (d == (HDIM) && dtype == ElementTraits<CTYPE>::kDType) {                    \
    fn(std::integral_constant<int, (HDIM)>{}, CTYPE{});                          \
    return true;                                                                 \
  }
  DASHATTN_CUDA_INSTANCES(DASHATTN_DISPATCH_ONE)
#undef DASHATTN_DISPATCH_ONE
  return false;
}

// Comma-separated list of the instantiated head dims, for messages ("64, 128, 256").
std::string instantiated_head_dims();
bool head_dim_instantiated(int64_t d);

// ---------------------------------------------------------------------------------------------------------------
// Device views
// ---------------------------------------------------------------------------------------------------------------

// A trivially copyable copy of a TensorView's pointer and strides, passed to kernels by value. Undefined views
// have data == nullptr.
struct DeviceTensor {
  void* data;
  int64_t shape[4];
  int64_t stride[4];  // elements

  __host__ __device__ __forceinline__ int64_t offset(int64_t i0, int64_t i1 = 0, int64_t i2 = 0,
                                                      int64_t i3 = 0) const {
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
  }
  template <typename T>
  __host__ __device__ __forceinline__ T* ptr(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<T*>(data) + offset(i0, i1, i2, i3);
  }
  __host__ __device__ __forceinline__ bool defined() const { return data != nullptr; }
};

inline DeviceTensor device_tensor(const TensorView& v) {
  DeviceTensor t{};
  t.data = v.data;
  for (int i = 0; i < 4; ++i) {
    t.shape[i] = i < v.rank ? v.shape[i] : 1;
    t.stride[i] = i < v.rank ? v.stride[i] : 0;
  }
  return t;
}

// The batch layout as kernels see it: pointers into device memory plus the padded sizes.
struct DeviceBatch {
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqlens_q;
  const int32_t* seqlens_k;
  int64_t padded_n_q;  // n_q of a padded batch (varlen: max_seqlen_q)
  int64_t padded_n_k;  // n_k of a padded batch (varlen: max_seqlen_k)
};

inline DeviceBatch device_batch(const BatchLayout& b, int64_t padded_n_q, int64_t padded_n_k) {
  return DeviceBatch{b.cu_seqlens_q, b.cu_seqlens_k, b.seqlens_q, b.seqlens_k, padded_n_q, padded_n_k};
}

// Device twin of dashattn::sequence_span: sequence s's row offsets and lengths. Varlen sequences index the
// rank-4 [1, total, h, d] views at batch 0 from row q_begin / k_begin; padded sequences index batch s from row 0.
// The summaries (and any per-sequence chunk axis) are indexed by the sequence number s in both cases.
__device__ __forceinline__ SequenceSpan device_sequence_span(const DeviceBatch& b, int64_t s) {
  SequenceSpan sp;
  sp.seq = s;
  if (b.cu_seqlens_q != nullptr) {
    sp.batch_index = 0;
    sp.q_begin = b.cu_seqlens_q[s];
    sp.n_q = b.cu_seqlens_q[s + 1] - sp.q_begin;
    sp.k_begin = b.cu_seqlens_k[s];
    sp.n_k = b.cu_seqlens_k[s + 1] - sp.k_begin;
    return sp;
  }
  sp.batch_index = s;
  sp.q_begin = 0;
  sp.k_begin = 0;
  sp.n_q = b.seqlens_q != nullptr ? b.seqlens_q[s] : b.padded_n_q;
  sp.n_k = b.seqlens_k != nullptr ? b.seqlens_k[s] : b.padded_n_k;
  return sp;
}

// Per-row outputs ([b, heads, rows] views: lse, tau, mu, active_chunks) of row `row` of sequence span sp.
__device__ __forceinline__ int64_t row_output_offset(const DeviceTensor& t, const SequenceSpan& sp, int64_t head,
                                                     int64_t row) {
  return t.offset(sp.batch_index, head, sp.q_begin + row);
}

// Loads of 16 bytes (8 half-precision elements) when the address allows, for strided rows whose inner stride is 1.
template <typename T>
__device__ __forceinline__ uint4 load_vec16(const T* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// Round-up integer division on 64-bit sizes.
__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid-size helpers: CUDA caps gridDim.y and gridDim.z at 65535.
constexpr int64_t kMaxGridYZ = 65535;

}  // namespace cuda
}  // namespace dashattn
