// Stage 0's work for one chunk, on one CTA of 128 threads:
//   k̄_c = Σ_t softmax_t(⟨q̄_r, k_t⟩ / sqrt(d)) · k_t
// in fp32, stored rounded to the key dtype, with fixed reduction orders (butterfly shuffles for the dot products, a
// sequential sum over the chunk's keys). A chunk's summary reads nothing but that chunk's keys, so it is bitwise
// the same whichever launch computes it, in prefill or in decoding. The Stage-0 kernel (summarize.cu) runs it a
// CTA per chunk; any other launch that carries Stage-0 work must call this function to keep those bits.
#pragma once

#include <cmath>
#include <string>

#include "cuda_internal.cuh"

namespace dashattn {
namespace cuda {
namespace stage0 {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunk = 128;
constexpr int kMaxHeadDim = 256;               // the largest head dim the backend accepts
constexpr int kMaxPerLane = kMaxHeadDim / 32;  // head-dim elements per lane in the logits

struct SummarizeArgs {
  DeviceTensor k;             // [b, n, h_kv, d]
  DeviceTensor summaries;     // [b, max_chunks, h_kv, d]
  const void* summary_query;  // [h_kv, d] rows with stride sq_row_stride, or nullptr (zeros)
  int64_t sq_row_stride;
  bool sq_is_f32;
  bool vector_copy;           // 16-byte copies of key rows (every row 16-byte aligned and contiguous)
  DeviceBatch batch;
  int64_t first_chunk;
  int64_t todo;               // chunks per sequence the launch covers: first_chunk .. first_chunk + todo − 1
  int64_t batch_count;        // sequences
  int64_t h_kv;
  int chunk;
  int d;
  float inv_sqrt_d;
};

// Shared memory of one chunk's work: the keys [chunk][d] (16-byte aligned), then the chunk's logits and weights.
__host__ __device__ constexpr size_t key_bytes(int chunk, int d) { return size_t(chunk) * size_t(d) * 2; }
__host__ __device__ constexpr size_t scratch_bytes(int chunk, int d) {
  return key_bytes(chunk, d) + 2 * size_t(chunk) * 4 + 16;
}

// The launch arguments of validated params; todo <= 0 when every chunk is already valid. Throws Unsupported for
// what no Stage-0 launch of this backend handles.
inline SummarizeArgs summarize_args(const SummarizeParams& p) {
  const bool varlen = p.batch.is_varlen();
  const int64_t batch = varlen ? p.batch.num_seqs : p.k.shape[0];
  const int64_t padded_n_k = varlen ? p.batch.max_seqlen_k : p.k.shape[1];
  const int64_t h_kv = p.k.shape[2];
  const int64_t d = p.k.shape[3];
  const int64_t max_chunks = num_complete_chunks(padded_n_k, p.method.chunk_size);
  if (p.method.chunk_size > kMaxChunk) {
    throw Unsupported("cuda", "chunk_size", "chunk sizes above " + std::to_string(kMaxChunk));
  }
  if (h_kv > kMaxGridYZ || batch > kMaxGridYZ) {
    throw Unsupported("cuda", "k", "more than 65535 KV heads or sequences in one call");
  }
  if (d > kMaxHeadDim) throw Unsupported("cuda", "k", "head dims above " + std::to_string(kMaxHeadDim));
  SummarizeArgs a{};
  a.k = device_tensor(p.k);
  a.summaries = device_tensor(p.summaries);
  a.summary_query = p.summary_query.defined() ? p.summary_query.data : nullptr;
  a.sq_row_stride = p.summary_query.defined() ? p.summary_query.stride[0] : 0;
  a.sq_is_f32 = p.summary_query.defined() && p.summary_query.dtype == DType::kF32;
  a.vector_copy = d % 8 == 0 && a.k.stride[3] == 1 && reinterpret_cast<uintptr_t>(a.k.data) % 16 == 0 &&
                  a.k.stride[0] % 8 == 0 && a.k.stride[1] % 8 == 0 && a.k.stride[2] % 8 == 0;
  a.batch = device_batch(p.batch, 0, padded_n_k);
  a.first_chunk = p.first_chunk;
  a.todo = batch == 0 ? 0 : max_chunks - p.first_chunk;
  a.batch_count = batch;
  a.h_kv = h_kv;
  a.chunk = p.method.chunk_size;
  a.d = static_cast<int>(d);
  a.inv_sqrt_d = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  return a;
}

// Chunk c's summary for KV head r of sequence s (nothing for a chunk the sequence has not completed). `smem`
// holds scratch_bytes(chunk, d), 16-byte aligned. Every thread of the CTA calls it (it synchronizes the CTA).
template <typename T>
__device__ __forceinline__ void summarize_chunk(const SummarizeArgs& a, int64_t c, int r, int64_t s,
                                                unsigned char* smem) {
  const SequenceSpan sp = device_sequence_span(a.batch, s);
  if (c >= num_complete_chunks(sp.n_k, a.chunk)) return;

  uint4* keys_raw = reinterpret_cast<uint4*>(smem);
  const T* keys = reinterpret_cast<const T*>(smem);
  float* logits = reinterpret_cast<float*>(smem + key_bytes(a.chunk, a.d));
  float* weights = logits + a.chunk;
  float* inv_sum = weights + a.chunk;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t key0 = sp.k_begin + c * a.chunk;
  // The summary query in registers: lane l holds elements l, l + 32, ... of the head dim (the order in which a
  // key's dot product takes them). Its loads are issued before the keys are stored, so that the two round trips
  // overlap: in a decode step (one chunk per sequence) the work is a chain of such latencies.
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
  if (a.vector_copy) {
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
              a.k.ptr<T>(sp.batch_index, key0 + task / pieces, r, (task % pieces) * 8));
        }
      }
      if (base == 0) load_query();
#pragma unroll
      for (int i = 0; i < kCopyBatch; ++i) {
        const int task = base + i * kThreads + threadIdx.x;
        if (task < tasks) keys_raw[task] = held[i];
      }
    }
  } else {
    load_query();
    T* keys_w = reinterpret_cast<T*>(smem);
    for (int task = threadIdx.x; task < a.chunk * a.d; task += kThreads)
      keys_w[task] = *a.k.ptr<T>(sp.batch_index, key0 + task / a.d, r, task % a.d);
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
      *inv_sum = 1.0f / sum;
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < a.chunk; t += kThreads) weights[t] *= *inv_sum;
  __syncthreads();

  // Weighted sum of the keys: one thread per output element, keys in order (unrolled so that the shared-memory
  // loads run ahead of the multiply-add chain).
  for (int e = threadIdx.x; e < a.d; e += kThreads) {
    float acc = 0.0f;
#pragma unroll 16
    for (int t = 0; t < a.chunk; ++t) acc = fmaf(weights[t], to_float(keys[t * a.d + e]), acc);
    *a.summaries.ptr<T>(s, c, r, e) = from_float<T>(acc);
  }
  __syncthreads();  // the scratch may be reused by the next chunk
}

}  // namespace stage0
}  // namespace cuda
}  // namespace dashattn
