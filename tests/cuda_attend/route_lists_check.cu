// Stage 1's bias lists (bias_lists.cuh) against Stage 1's own mask, μ and active counts: on random prefill
// problems routed by the CUDA kernels with lists, every row's count is kNoList or the number of its routed chunks
// (at most kBiasListCap), a listed row names exactly its routed chunks once each, every log w is finite and at
// most 0 (a group weight is at most 1), and their mean is μ up to float summation order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attend_check.h"
#include "bias_lists.cuh"
#include "cuda_check.h"
#include "cuda_internal.cuh"
#include "dashattn/dashattn.h"
#include "dashattn/dtype.h"
#include "dashattn/geometry.h"
#include "dashattn/validate.h"

using namespace dashattn;

namespace attend_check {
namespace {

struct RouteCase {
  std::string name;
  int64_t n = 2000;
  int h_q = 32, h_kv = 2, d = 128, chunk = 64;
  float q_std = 4.0f;
  int min_listed_percent = 90;  // of the rows with at most kBiasListCap routed chunks
};

std::vector<uint16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<uint16_t> out(n);
  for (auto& x : out) x = float_to_bf16(nd(rng));
  return out;
}

template <typename T>
T* device_copy(const std::vector<T>& h) {
  T* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(h.size(), 1) * sizeof(T)));
  CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <typename T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

TensorView dev_view(void* p, DType t, std::initializer_list<int64_t> shape) {
  return make_view(p, t, shape, Device{DeviceType::kCuda, 0});
}

// Returns the failures of one case (a line each when verbose or failing).
int check_case(const RouteCase& c, uint64_t seed, bool verbose) {
  std::mt19937 rng{static_cast<uint32_t>(seed)};
  const int64_t n = c.n, nc = n / c.chunk, words = mask_words(n, c.chunk);
  const auto qh = random_bf16(size_t(n * c.h_q * c.d), c.q_std, rng);
  const auto sh = random_bf16(size_t(std::max<int64_t>(nc, 1) * c.h_kv * c.d), 1.0f, rng);
  uint16_t* q = device_copy(qh);
  uint16_t* summ = device_copy(sh);
  uint32_t* mask = nullptr;
  float *tau = nullptr, *mu = nullptr;
  int32_t* active = nullptr;
  CK(cudaMalloc(&mask, size_t(c.h_kv * n * words) * 4));
  CK(cudaMalloc(&tau, size_t(c.h_q * n) * 4));
  CK(cudaMalloc(&mu, size_t(c.h_kv * n) * 4));
  CK(cudaMalloc(&active, size_t(c.h_kv * n) * 4));
  const int64_t rows = c.h_kv * n;
  void* lists_mem = nullptr;
  CK(cudaMalloc(&lists_mem, cuda::bias_lists_bytes(rows)));
  const cuda::BiasLists lists = cuda::carve_bias_lists(lists_mem, rows);
  // Poison: a row the kernels leave unwritten shows as a count of 0x7f7f7f7f.
  CK(cudaMemset(lists.counts, 0x7f, size_t(rows) * 4));
  CK(cudaMemset(lists.entries, 0xff, size_t(rows) * cuda::kBiasListCap * sizeof(int2)));

  RouteParams rp;
  rp.q = dev_view(q, DType::kBF16, {1, n, c.h_q, c.d});
  rp.summaries = dev_view(summ, DType::kBF16, {1, std::max<int64_t>(nc, 1), c.h_kv, c.d});
  rp.n_k = n;
  rp.method.chunk_size = c.chunk;
  rp.routing.mask = dev_view(mask, DType::kU32, {1, c.h_kv, n, words});
  rp.routing.tau = dev_view(tau, DType::kF32, {1, c.h_q, n});
  rp.routing.mu = dev_view(mu, DType::kF32, {1, c.h_kv, n});
  rp.routing.active_chunks = dev_view(active, DType::kI32, {1, c.h_kv, n});
  const RouteParams norm = normalize_route(rp);
  cuda::launch_route(norm, route_shape(norm), nullptr, &lists);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  const auto mh = host_copy(mask, size_t(c.h_kv * n * words));
  const auto muh = host_copy(mu, size_t(rows));
  const auto ah = host_copy(active, size_t(rows));
  const auto counts = host_copy(lists.counts, size_t(rows));
  const auto entries = host_copy(lists.entries, size_t(rows) * cuda::kBiasListCap);
  int64_t bad = 0, listed = 0, listable = 0;
  std::string first_bad;
  for (int64_t r = 0; r < c.h_kv; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = r * n + i, diag = i / c.chunk;
      const uint32_t* m = &mh[size_t(row * words)];
      std::vector<int32_t> routed;
      for (int64_t ch = 0; ch < diag; ++ch)
        if ((m[ch >> 5] >> (ch & 31)) & 1u) routed.push_back(int32_t(ch));
      const int32_t count = counts[size_t(row)];
      std::string why;
      if (ah[size_t(row)] != int32_t(routed.size()) + 1) why = "active count";
      if (int64_t(routed.size()) <= cuda::kBiasListCap) ++listable;
      if (why.empty() && count != cuda::kNoList) {
        if (count != int32_t(routed.size()) || count > cuda::kBiasListCap) {
          why = "count " + std::to_string(count) + " for " + std::to_string(routed.size()) + " routed";
        } else {
          ++listed;
          std::vector<int32_t> got;
          double sum = 0;
          for (int k = 0; k < count; ++k) {
            const int2 e = entries[size_t(row * cuda::kBiasListCap + k)];
            float lw;
            std::memcpy(&lw, &e.y, 4);
            got.push_back(e.x);
            if (!std::isfinite(lw) || lw > 1e-6f) why = "log w " + std::to_string(lw);
            sum += lw;
          }
          std::sort(got.begin(), got.end());
          if (got != routed) why = "chunks differ from the mask";
          const double mean = count > 0 ? sum / count : 0.0;
          const double want = muh[size_t(row)];
          if (why.empty() && std::fabs(mean - want) > 1e-4 * std::max(1.0, std::fabs(want)))
            why = "mean log w " + std::to_string(mean) + " vs mu " + std::to_string(want);
        }
      }
      if (!why.empty()) {
        if (bad++ == 0) first_bad = "row (" + std::to_string(r) + ", " + std::to_string(i) + "): " + why;
      }
    }
  }
  const bool enough = listed * 100 >= int64_t(c.min_listed_percent) * listable;
  const bool ok = bad == 0 && enough;
  if (!ok || verbose) {
    std::printf("%-4s %-36s listed %lld of %lld rows with <= %d chunks, %lld bad%s%s\n", ok ? "ok" : "FAIL",
                c.name.c_str(), (long long)listed, (long long)listable, cuda::kBiasListCap, (long long)bad,
                first_bad.empty() ? "" : ", first ", first_bad.c_str());
    std::fflush(stdout);
  }
  for (void* p : {static_cast<void*>(q), static_cast<void*>(summ), static_cast<void*>(mask), static_cast<void*>(tau),
                  static_cast<void*>(mu), static_cast<void*>(active), lists_mem})
    cudaFree(p);
  return ok ? 0 : 1;
}

}  // namespace

int run_route_lists_check(bool verbose) {
  // {name, n, h_q, h_kv, d, chunk, q std, least listed percent}
  const std::vector<RouteCase> cases = {
      {"route lists d128 g16 C64 n3000", 3000, 32, 2, 128, 64, 4.0f, 90},
      {"route lists d128 g16 C32 n1500 q std 8", 1500, 32, 2, 128, 32, 8.0f, 90},
      // Long rows: many past the cap (kNoList), the rest listed.
      {"route lists d64 g4 C16 n4000", 4000, 8, 2, 64, 16, 2.0f, 50},
      {"route lists d128 g1 C64 n777", 777, 2, 2, 128, 64, 4.0f, 90},
  };
  int failures = 0;
  uint64_t seed = 777;
  for (const RouteCase& c : cases) failures += check_case(c, seed++, verbose);
  std::printf("route lists: %d failure(s)\n", failures);
  return failures;
}

}  // namespace attend_check
