// Device helpers shared by the GPU benchmark programs: a CUDA error check that names the call, and a pseudo-normal
// bf16 fill on the device (benchmarks never time on zeros).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace bench_device {

__device__ inline uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Sum of four hashed uniforms, variance-matched to `stddev`: never zeros, reproducible from `seed`.
__global__ void fill_normal_bf16(__nv_bfloat16* out, int64_t n, uint64_t seed, float stddev) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int j = 0; j < 4; ++j) s += mix(seed * 0x9e3779b97f4a7c15ull + uint64_t(i) * 4 + j) * 2.3283064e-10f;
    out[i] = __float2bfloat16((s - 2.0f) * 1.7320508f * stddev);
  }
}

inline void fill(void* p, int64_t n, uint64_t seed, float stddev, int blocks = 1024) {
  fill_normal_bf16<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, stddev);
  CK(cudaGetLastError());
}

// Keeps the stream busy for `ns` nanoseconds without touching memory. Launched before a timed replay, it holds the
// GPU while the host records the start event and launches the replay, so that the timing counts GPU time only (as
// `triton.testing.do_bench` does with its cache flush), not the host's launch latency.
__global__ void busy_wait_ns(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

}  // namespace bench_device
