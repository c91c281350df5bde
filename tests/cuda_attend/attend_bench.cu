// Timings of the Stage-2 kernels at the paper's benchmark shapes (h_q = 32, h_kv = 2, d = 128, C = 64, bf16):
// prefill at batch 1 and decoding (one new token) at batch 24, random masks at chunk sparsity 75 / 87.5 /
// 93.75 % (each routable chunk kept with probability 1 - s, the diagonal always), drawn per token (the worst case:
// no two tokens share a tile by design) and per query chunk (all 64 tokens of a chunk share the draw, the locality
// real routing has), plus the same kernel dense. Variants: tokens per CTA (consumer warps 7 / 4 / 1), tensor-copy
// or cp.async loads, with and without the prior bias (raw mode; per-CTA table or per tile). Medians of CUDA-event
// timings after warm-up, on random (non-zero) inputs.
#include <cuda_runtime.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attend_check.h"
#include "cuda_check.h"
#include "attend_launch.cuh"
#include "dashattn/geometry.h"

using namespace dashattn;


namespace attend_check {
namespace {

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = (hash32(seed * 0x9e3779b97f4a7c15ull + i) >> 8) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16((u - 0.5f) * 3.4f);
  }
}

// Random mask rows [b, h_kv, n_q, words]: chunk c < c_i kept with probability keep, the diagonal bit set. With
// per_chunk, the draw depends on the query chunk i / 64 instead of the token.
__global__ void fill_mask(uint32_t* m, int64_t b, int64_t h_kv, int64_t n_q, int64_t n_k, int64_t words,
                          float keep, uint64_t seed, bool per_chunk = false) {
  const int64_t total = b * h_kv * n_q * words;
  const uint32_t thresh = uint32_t(double(keep) * 4294967295.0);
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = t % words;
    const int64_t i = (t / words) % n_q;
    const int64_t p = n_k - n_q + i;
    const int64_t ci = p / 64;
    uint32_t bits = 0;
    for (int e = 0; e < 32; ++e) {
      const int64_t c = w * 32 + e;
      const uint64_t row = per_chunk ? uint64_t((t / words - i) + i / 64) * uint64_t(words) + uint64_t(w)
                                     : uint64_t(t);
      if (c < ci && hash32(seed ^ (row * 32 + e) * 0x9e3779b97f4a7c15ull) < thresh) bits |= 1u << e;
      if (c == ci) bits |= 1u << e;
    }
    m[t] = bits;
  }
}

__global__ void fill_f32(float* p, size_t n, float value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = value;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TensorView view4(void* p, int64_t b, int64_t n, int64_t h, int64_t d) {
  TensorView v;
  v.data = p;
  v.dtype = DType::kBF16;
  v.device = Device{DeviceType::kCuda, 0};
  v.rank = 4;
  v.shape = {b, n, h, d};
  v.stride = {n * h * d, h * d, d, 1};
  return v;
}

struct Setup {
  int64_t b, n_q, n_k;
  int h_q = 32, h_kv = 2, d = 128, C = 64;
};

// Times one configuration; returns the median in ms.
// Prior-bias inputs: summaries [1, chunks, h_kv, d], tau [b, h_q, n_q] far below every score (all weights
// positive), mu [b, h_kv, n_q].
struct BiasInputs {
  void* summaries = nullptr;
  float* tau = nullptr;
  float* mu = nullptr;
};

float time_config(const Setup& st, void* q, void* k, void* v, void* o, uint32_t* mask, bool dense,
                  cuda::AttendPlan plan, void* ws, int reps, const BiasInputs* bias = nullptr) {
  ProblemShape s;
  s.batch = st.b;
  s.n_q = st.n_q;
  s.n_k = st.n_k;
  s.rows_q = st.n_q;
  s.h_q = st.h_q;
  s.h_kv = st.h_kv;
  s.group = st.h_q / st.h_kv;
  s.d = st.d;
  s.chunk = st.C;
  s.max_chunks = st.n_k / st.C;
  s.mask_words = mask_words(st.n_k, st.C);
  s.scale = 1.0f / std::sqrt(float(st.d));
  cuda::AttendArgs args;
  if (dense) {
    DenseParams p;
    p.q = view4(q, st.b, st.n_q, st.h_q, st.d);
    p.k = view4(k, st.b, st.n_k, st.h_kv, st.d);
    p.v = view4(v, st.b, st.n_k, st.h_kv, st.d);
    p.o = view4(o, st.b, st.n_q, st.h_q, st.d);
    args = cuda::make_dense_args(p, s);
  } else {
    AttendParams p;
    p.q = view4(q, st.b, st.n_q, st.h_q, st.d);
    p.k = view4(k, st.b, st.n_k, st.h_kv, st.d);
    p.v = view4(v, st.b, st.n_k, st.h_kv, st.d);
    p.o = view4(o, st.b, st.n_q, st.h_q, st.d);
    TensorView m;
    m.data = mask;
    m.dtype = DType::kU32;
    m.device = Device{DeviceType::kCuda, 0};
    m.rank = 4;
    const int64_t words = s.mask_words;
    m.shape = {st.b, st.h_kv, st.n_q, words};
    m.stride = {st.h_kv * st.n_q * words, st.n_q * words, words, 1};
    p.routing.mask = m;
    p.method.prior = PriorMode::kNone;
    if (bias != nullptr) {
      p.method.prior = PriorMode::kRaw;
      p.summaries = view4(bias->summaries, 1, s.max_chunks, st.h_kv, st.d);
      auto rows = [&](float* data, int64_t heads) {
        TensorView t;
        t.data = data;
        t.dtype = DType::kF32;
        t.device = Device{DeviceType::kCuda, 0};
        t.rank = 3;
        t.shape = {st.b, heads, st.n_q, 1};
        t.stride = {heads * st.n_q, st.n_q, 1, 0};
        return t;
      };
      p.routing.tau = rows(bias->tau, st.h_q);
      p.routing.mu = rows(bias->mu, st.h_kv);
    }
    args = cuda::make_attend_args(p, s);
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // Short kernels are timed over a batch of launches to amortize the event resolution.
  const int inner = st.n_q <= 4 ? 20 : 1;
  for (int w = 0; w < 2; ++w) cuda::launch_attend_planned(args, st.d, DType::kBF16, plan, ws, nullptr);
  std::vector<float> ts;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(e0));
    for (int u = 0; u < inner; ++u) cuda::launch_attend_planned(args, st.d, DType::kBF16, plan, ws, nullptr);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms / inner);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return median(ts);
}

// Expected attended keys (summed over queries) for keep probability `keep`: routed chunks plus the diagonal.
double attended_keys(int64_t n_q, int64_t n_k, double keep) {
  double sum = 0;
  for (int64_t i = 0; i < n_q; ++i) {
    const int64_t p = n_k - n_q + i;
    sum += keep * double(p / 64) * 64 + double(p % 64 + 1);
  }
  return sum;
}

}  // namespace

void run_profile_cases(int n_k_thousands) {
  // One launch pair per case for a profiler (each case: 2 warm-up launches + 1 timed): n_k_thousands·1024 keys,
  // masks per query chunk at 75 %, the default d = 128 tiling without and with the prior bias.
  const int64_t n = int64_t(n_k_thousands) * 1024;
  const int h_q = 32, h_kv = 2, d = 128;
  void *q, *k, *v, *o;
  uint32_t* mask;
  CK(cudaMalloc(&q, size_t(n) * h_q * d * 2));
  CK(cudaMalloc(&o, size_t(n) * h_q * d * 2));
  CK(cudaMalloc(&k, size_t(n) * h_kv * d * 2));
  CK(cudaMalloc(&v, size_t(n) * h_kv * d * 2));
  const int64_t words = mask_words(n, 64);
  CK(cudaMalloc(&mask, size_t(n) * h_kv * words * 4));
  BiasInputs bias;
  CK(cudaMalloc(&bias.summaries, size_t(n / 64) * h_kv * d * 2));
  CK(cudaMalloc(&bias.tau, size_t(n) * h_q * 4));
  CK(cudaMalloc(&bias.mu, size_t(n) * h_kv * 4));
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(q), size_t(n) * h_q * d, 1);
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(k), size_t(n) * h_kv * d, 2);
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(v), size_t(n) * h_kv * d, 3);
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(bias.summaries), size_t(n / 64) * h_kv * d, 4);
  fill_f32<<<1024, 256>>>(bias.tau, size_t(n) * h_q, -50.0f);
  fill_f32<<<1024, 256>>>(bias.mu, size_t(n) * h_kv, 0.0f);
  fill_mask<<<2048, 256>>>(mask, 1, h_kv, n, n, words, 0.25f, 77, true);
  CK(cudaDeviceSynchronize());
  Setup st{1, n, n};
  cuda::AttendPlan plan;
  plan.warps = 8;
  plan.num_splits = 1;
  // The persistent kernel, then the default (one row block per CTA).
  for (const bool persistent : {true, false}) {
    plan.persistent = persistent;
    const float t0 = time_config(st, q, k, v, o, mask, false, plan, nullptr, 1);
    const float t1 = time_config(st, q, k, v, o, mask, false, plan, nullptr, 1, &bias);
    std::printf("profile cases (%dK, per query chunk, 75 %%, %s): no bias %.3f ms, bias %.3f ms\n",
                n_k_thousands, persistent ? "persistent" : "one item per CTA", t0, t1);
  }
  for (void* p : {q, k, v, o, static_cast<void*>(mask), bias.summaries, static_cast<void*>(bias.tau),
                  static_cast<void*>(bias.mu)})
    CK(cudaFree(p));
}

void run_benchmark(int max_n_k_thousands) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  const int64_t max_n = int64_t(max_n_k_thousands) * 1024;
  const int h_q = 32, h_kv = 2, d = 128;
  // Prefill buffers (b = 1, n = max_n) double as decode buffers (b = 24, n_k = max_n).
  const size_t q_elems = size_t(std::max<int64_t>(max_n, 24)) * h_q * d;
  const size_t kv_elems = size_t(24) * max_n * h_kv * d;
  void *q, *k, *v, *o, *ws;
  uint32_t* mask;
  CK(cudaMalloc(&q, q_elems * 2));
  CK(cudaMalloc(&o, q_elems * 2));
  CK(cudaMalloc(&k, kv_elems * 2));
  CK(cudaMalloc(&v, kv_elems * 2));
  const size_t mask_bytes = size_t(max_n) * h_kv * size_t(mask_words(max_n, 64)) * 4 + 24 * 4 * 4096;
  CK(cudaMalloc(&mask, mask_bytes));
  const size_t ws_bytes = size_t(64) * 24 * h_q * (d + 1) * 4 + 1024;
  CK(cudaMalloc(&ws, ws_bytes));
  BiasInputs bias;
  const size_t summ_elems = size_t(max_n / 64 + 1) * h_kv * d;
  CK(cudaMalloc(&bias.summaries, summ_elems * 2));
  CK(cudaMalloc(&bias.tau, size_t(max_n) * h_q * 4));
  CK(cudaMalloc(&bias.mu, size_t(max_n) * h_kv * 4));
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(q), q_elems, 1);
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(k), kv_elems, 2);
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(v), kv_elems, 3);
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(bias.summaries), summ_elems, 4);
  fill_f32<<<1024, 256>>>(bias.tau, size_t(max_n) * h_q, -50.0f);
  fill_f32<<<1024, 256>>>(bias.mu, size_t(max_n) * h_kv, 0.0f);
  CK(cudaDeviceSynchronize());

  const double sparsities[3] = {0.75, 0.875, 0.9375};
  struct Variant {
    const char* name;
    int warps;
    bool tma, bias;
    bool long_too;  // also at the longer lengths
    int stages = 0;  // 0: the launcher's choice
    bool bias_table = true;  // false: bias per tile by the consumers
    bool persistent = false;  // true: the persistent kernel (the d = 128 warpgroup tiling)
    int persistent_ctas = 0;  // its grid (0: one CTA per SM; 1 << 30: a CTA per item, no overlap)
  };
  // "w8" is the default d = 128 tiling: 8 consumer warps, warpgroup MMA where the CTA's tokens share their tiles.
  // "persistent": the same tiling as the persistent kernel; "pers/item": that kernel with a CTA per item (its
  // code without the overlap of items).
  const Variant variants[] = {{"w8 auto", 8, true, false, true},
                              {"w8 persistent", 8, true, false, true, 0, true, true},
                              {"w8 pers/item", 8, true, false, true, 0, true, true, 1 << 30},
                              {"tma w7", 7, true, false, true},
                              {"w8 auto bias", 8, true, true, true},
                              {"w8 bias persistent", 8, true, true, true, 0, true, true},
                              {"w8 bias pers/item", 8, true, true, true, 0, true, true, 1 << 30},
                              {"w8 bias/tile", 8, true, true, false, 0, false},
                              {"tma w7 bias", 7, true, true, false},
                              {"w7 bias/tile", 7, true, true, false, 0, false}, {"tma w1", 1, true, false, false}};
  std::printf("\nprefill b=1 h_q=32 h_kv=2 d=128 C=64 bf16: ms (useful TFLOP/s); masks per token | per query chunk\n");
  std::printf("%-6s %-12s %15s | %15s %15s %15s | %15s %15s %15s\n", "N", "variant", "dense", "tok 75%",
              "tok 87.5%", "tok 93.75%", "chunk 75%", "chunk 87.5%", "chunk 93.75%");
  for (int64_t n = 32768; n <= max_n; n *= 2) {
    Setup st{1, n, n};
    const int64_t words = mask_words(n, 64);
    for (const Variant& var : variants) {
      if (n > 32768 && !var.long_too) continue;
      cuda::AttendPlan plan;
      plan.warps = var.warps;
      plan.num_splits = 1;
      plan.tma = var.tma;
      plan.stages = var.stages;
      plan.bias_table = var.bias_table;
      plan.persistent = var.persistent;
      plan.persistent_ctas = var.persistent_ctas;
      const int reps = n >= 65536 ? 5 : 7;
      const double dense_flops = 4.0 * d * h_q * attended_keys(n, n, 1.0);
      std::printf("%-6lld %-12s", (long long)n, var.name);
      if (!var.bias) {
        const float t_dense = time_config(st, q, k, v, o, mask, true, plan, ws, reps);
        std::printf(" %7.3f (%5.0f) |", t_dense, dense_flops / t_dense / 1e9);
      } else {
        std::printf(" %15s |", "-");
      }
      for (int per_chunk = 0; per_chunk < 2; ++per_chunk) {
        for (double sp : sparsities) {
          fill_mask<<<2048, 256>>>(mask, 1, h_kv, n, n, words, float(1.0 - sp), 77, per_chunk != 0);
          const float t = time_config(st, q, k, v, o, mask, false, plan, ws, reps, var.bias ? &bias : nullptr);
          const double flops = 4.0 * d * h_q * attended_keys(n, n, 1.0 - sp);
          std::printf(" %7.3f (%5.0f)", t, flops / t / 1e9);
        }
        std::printf(per_chunk ? "\n" : " |");
      }
      std::fflush(stdout);
    }
  }

  std::printf("\ndecode b=24 n_q=1 h_q=32 h_kv=2 d=128 C=64 bf16 (us; TB/s of attended K+V)\n");
  std::printf("%-6s %-7s %14s %14s %14s %14s\n", "N", "splits", "dense", "s=75%", "s=87.5%", "s=93.75%");
  for (int64_t n = 32768; n <= max_n; n *= 2) {
    Setup st{24, 1, n};
    ProblemShape s;
    s.batch = 24; s.n_q = 1; s.n_k = n; s.h_q = h_q; s.h_kv = h_kv; s.group = 16; s.d = d;
    cuda::AttendPlan plan = cuda::plan_attend(s, sms, false);
    const int64_t words = mask_words(n, 64);
    const float t_dense = time_config(st, q, k, v, o, mask, true, plan, ws, 15);
    const double dense_bytes = 24.0 * h_kv * n * d * 2 * 2;
    std::printf("%-6lld %-7d %7.1f %6.2f", (long long)n, plan.num_splits, t_dense * 1e3,
                dense_bytes / (t_dense * 1e-3) / 1e12);
    for (double sp : sparsities) {
      fill_mask<<<2048, 256>>>(mask, 24, h_kv, 1, n, words, float(1.0 - sp), 99);
      const float t = time_config(st, q, k, v, o, mask, false, plan, ws, 15);
      const double bytes = 24.0 * h_kv * attended_keys(1, n, 1.0 - sp) * d * 2 * 2;
      std::printf(" %7.1f %6.2f", t * 1e3, bytes / (t * 1e-3) / 1e12);
    }
    std::printf("\n");
  }
  CK(cudaFree(q));
  CK(cudaFree(k));
  CK(cudaFree(v));
  CK(cudaFree(o));
  CK(cudaFree(mask));
  CK(cudaFree(ws));
  CK(cudaFree(bias.summaries));
  CK(cudaFree(bias.tau));
  CK(cudaFree(bias.mu));
}

}  // namespace attend_check
