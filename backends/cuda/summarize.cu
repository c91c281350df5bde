// Stage 0 on the GPU: one block per (chunk, KV head, sequence) computes
//   k̄_c = Σ_t softmax_t(⟨q̄_r, k_t⟩ / sqrt(d)) · k_t
// in fp32 and stores it rounded to the key dtype. The reduction order is fixed (butterfly shuffles for the dot
// products, a sequential sum over the chunk's keys), and a chunk's summary reads nothing but that chunk's keys,
// so a summary computed during decoding is bitwise identical to the prefill summary of the same chunk.
#include <cmath>

#include "cuda_internal.cuh"

namespace dashattn {
namespace cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunk = 128;
constexpr int kMaxHeadDim = 256;  // the largest head dim the backend accepts
constexpr int kMaxPerLane = kMaxHeadDim / 32;  // head-dim elements per lane in the logits

struct SummarizeArgs {
  DeviceTensor k;          // [b, n, h_kv, d]
  DeviceTensor summaries;  // [b, max_chunks, h_kv, d]
  const void* summary_query;  // [h_kv, d] rows with stride sq_row_stride, or nullptr (zeros)
  int64_t sq_row_stride;
  bool sq_is_f32;
  DeviceBatch batch;
  KeyPages pages;  // paged K/V (table null: contiguous)
  int64_t first_chunk;
  const int32_t* first_chunks;  // per-sequence first chunks, or null
  int chunk;
  int d;
  float inv_sqrt_d;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) summarize_kernel(SummarizeArgs a, bool vector_copy) {
  const int64_t c = a.first_chunk + blockIdx.x;
  const int r = blockIdx.y;
  const int64_t s = blockIdx.z;
  const SequenceSpan sp = device_sequence_span(a.batch, s);
  if (c >= num_complete_chunks(sp.n_k, a.chunk)) return;
  if (a.first_chunks != nullptr && c < a.first_chunks[s]) return;  // already valid for this sequence

  extern __shared__ uint4 smem_keys_raw[];
  T* keys = reinterpret_cast<T*>(smem_keys_raw);
  __shared__ __align__(16) float logits[kMaxChunk];
  __shared__ __align__(16) float weights[kMaxChunk];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // The chunk's first key in the K/V view (a chunk lies in one page of a paged pool).
  const KeyRow first = locate_key(a.pages, sp, c * a.chunk);
  const int64_t key0 = first.row;
  // The summary query in registers: lane l holds elements l, l + 32, ... of the head dim (the order in which a
  // key's dot product takes them). Its loads are issued before the keys are stored, so that the two round trips
  // overlap: in a decode step (one chunk per sequence) the kernel is a chain of such latencies.
  const bool have_query = a.summary_query != nullptr;
  float qv[kMaxPerLane];
  auto load_query = [&]() {
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int e = lane + 32 * j;
      qv[j] = !have_query || e >= a.d ? 0.0f
              : a.sq_is_f32 ? static_cast<const float*>(a.summary_query)[r * a.sq_row_stride + e]
                            : to_float(static_cast<const T*>(a.summary_query)[r * a.sq_row_stride + e]);
    }
  };
  // The chunk's keys [chunk][d] are staged once with all loads in flight together: reading them row by row from
  // global memory, as the logits and the weighted sum need them, put one L2 round trip per key on the critical
  // path (about 10 us for a decode step's single chunk).
  if (vector_copy) {
    // Batches of kCopyBatch loads per thread are issued before any is stored: a loop that stores each piece as it
    // arrives waits one DRAM round trip per piece (8 per thread at C = 64, d = 128, ~8 us for a decode step).
    constexpr int kCopyBatch = 8;
    const int pieces = a.d / 8;  // 16-byte pieces per key row
    const int tasks = a.chunk * pieces;
    for (int base = 0; base < tasks; base += kThreads * kCopyBatch) {
      uint4 held[kCopyBatch];
#pragma unroll
      for (int i = 0; i < kCopyBatch; ++i) {
        const int task = base + i * kThreads + threadIdx.x;
        if (task < tasks) {
          held[i] = *reinterpret_cast<const uint4*>(
              a.k.ptr<T>(first.index, key0 + task / pieces, r, (task % pieces) * 8));
        }
      }
      if (base == 0) load_query();
#pragma unroll
      for (int i = 0; i < kCopyBatch; ++i) {
        const int task = base + i * kThreads + threadIdx.x;
        if (task < tasks) smem_keys_raw[task] = held[i];
      }
    }
  } else {
    load_query();
    for (int task = threadIdx.x; task < a.chunk * a.d; task += kThreads)
      keys[task] = *a.k.ptr<T>(first.index, key0 + task / a.d, r, task % a.d);
  }
  __syncthreads();

  // Logits: one warp per key, lanes over the head dim (each lane's elements in ascending order from 0), butterfly
  // reduction (fixed order). Four keys per step keep four independent load, multiply-add and shuffle chains in
  // flight (keys past the chunk read key 0 and are not stored).
  for (int t0 = warp; t0 < a.chunk; t0 += 4 * kWarps) {
    float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (have_query) {
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j) {
        const int e = lane + 32 * j;
        if (e < a.d) {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int t = t0 + u * kWarps < a.chunk ? t0 + u * kWarps : 0;
            dot[u] = fmaf(qv[j], to_float(keys[t * a.d + e]), dot[u]);
          }
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int u = 0; u < 4; ++u) dot[u] += __shfl_xor_sync(0xffffffffu, dot[u], off);
    }
    if (lane == 0)
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (t0 + u * kWarps < a.chunk) logits[t0 + u * kWarps] = dot[u] * a.inv_sqrt_d;
  }
  __syncthreads();

  // Softmax over the chunk. The max (order-free) and the exponentials run in parallel; the sum stays one
  // thread's sequential sum in key order, so the summary's bits do not depend on the launch shape.
  __shared__ float inv_sum;
  if (warp == 0) {
    float m = -INFINITY;
    for (int t = lane; t < a.chunk; t += 32) m = fmaxf(m, logits[t]);
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    for (int t = lane; t < a.chunk; t += 32) weights[t] = expf(logits[t] - m);
    __syncwarp();
    if (lane == 0) {
      float sum = 0.0f;
      int t = 0;
#pragma unroll 4
      for (; t + 4 <= a.chunk; t += 4) {  // 16-byte loads, added one by one in key order
        const float4 w4 = *reinterpret_cast<const float4*>(weights + t);
        sum += w4.x;
        sum += w4.y;
        sum += w4.z;
        sum += w4.w;
      }
      for (; t < a.chunk; ++t) sum += weights[t];
      inv_sum = 1.0f / sum;
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < a.chunk; t += kThreads) weights[t] *= inv_sum;
  __syncthreads();

  // Weighted sum of the keys: one thread per output element, keys in order (unrolled so that the shared-memory
  // loads run ahead of the multiply-add chain).
  for (int e = threadIdx.x; e < a.d; e += kThreads) {
    float acc = 0.0f;
#pragma unroll 16
    for (int t = 0; t < a.chunk; ++t) acc = fmaf(weights[t], to_float(keys[t * a.d + e]), acc);
    *a.summaries.ptr<T>(s, c, r, e) = from_float<T>(acc);
  }
}

}  // namespace

void launch_summarize(const SummarizeParams& p, cudaStream_t stream) {
  const ProblemShape shape = summarize_shape(p);
  const int64_t batch = shape.batch, padded_n_k = shape.n_k, h_kv = shape.h_kv, d = shape.d;
  const int64_t max_chunks = shape.max_chunks;
  const int64_t todo = max_chunks - p.first_chunk;
  if (todo <= 0 || batch == 0) return;
  if (p.method.chunk_size > kMaxChunk) {
    throw Unsupported("cuda", "chunk_size", "chunk sizes above " + std::to_string(kMaxChunk));
  }
  if (h_kv > kMaxGridYZ || batch > kMaxGridYZ) {
    throw Unsupported("cuda", "k", "more than 65535 KV heads or sequences in one call");
  }
  SummarizeArgs a{};
  a.k = device_tensor(p.k);
  a.summaries = device_tensor(p.summaries);
  a.summary_query = p.summary_query.defined() ? p.summary_query.data : nullptr;
  a.sq_row_stride = p.summary_query.defined() ? p.summary_query.stride[0] : 0;
  a.sq_is_f32 = p.summary_query.defined() && p.summary_query.dtype == DType::kF32;
  a.batch = device_batch(p.batch, 0, padded_n_k);
  a.pages = key_pages(p.batch, p.k);
  a.first_chunk = p.first_chunk;
  a.first_chunks = p.first_chunks;
  a.chunk = p.method.chunk_size;
  a.d = static_cast<int>(d);
  a.inv_sqrt_d = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));

  if (d > kMaxHeadDim) throw Unsupported("cuda", "k", "head dims above " + std::to_string(kMaxHeadDim));
  // 16-byte copies of key rows when every row starts 16-byte aligned with contiguous elements.
  const bool vector_copy = d % 8 == 0 && a.k.stride[3] == 1 && reinterpret_cast<uintptr_t>(a.k.data) % 16 == 0 &&
                           a.k.stride[0] % 8 == 0 && a.k.stride[1] % 8 == 0 && a.k.stride[2] % 8 == 0;
  const size_t smem = size_t(p.method.chunk_size) * size_t(d) * 2;  // up to 64 KB (C = 128, d = 256)
  const dim3 grid(static_cast<unsigned>(todo), static_cast<unsigned>(h_kv), static_cast<unsigned>(batch));
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024)
      DASHATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<grid, kThreads, smem, stream>>>(a, vector_copy);
  };
  switch (p.k.dtype) {
    case DType::kBF16: launch(summarize_kernel<__nv_bfloat16>); break;
    case DType::kF16: launch(summarize_kernel<__half>); break;
    default: throw Unsupported("cuda", "k.dtype", std::string("Stage 0 on ") + dtype_name(p.k.dtype));
  }
  DASHATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace dashattn
