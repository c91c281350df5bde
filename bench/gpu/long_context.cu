// Long-context check: one prefill forward of N tokens (default 1M; b = 1, h_q = 32, h_kv = 2, d = 128, C = 64,
// bf16, library defaults) through the public API with a caller-owned workspace, reporting the device memory it
// needs beyond q, k, v, o, the time of each stage, the routing sparsity, and that every output is finite.
//   dashattn_long_context [N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_device.cuh"
#include "dashattn/dashattn.h"

using namespace dashattn;

namespace {

__global__ void count_nonfinite(const __nv_bfloat16* x, int64_t n, unsigned long long* bad) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    local += isfinite(__bfloat162float(x[i])) ? 0 : 1;
  }
  if (local) atomicAdd(bad, local);
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t(1) << 20);
  const int64_t h_q = 32, h_kv = 2, d = 128, C = 64;
  Backend* be = Registry::instance().find("cuda");
  if (!be || !be->probe().available) {
    std::printf("%s\n", be ? be->probe().reason.c_str() : "CUDA backend not compiled in");
    return 77;
  }
  const Device dev{DeviceType::kCuda, 0};
  const size_t q_elems = size_t(n * h_q * d), kv_elems = size_t(n * h_kv * d);
  auto* q = static_cast<__nv_bfloat16*>(device_alloc(q_elems * 2));
  auto* k = static_cast<__nv_bfloat16*>(device_alloc(kv_elems * 2));
  auto* v = static_cast<__nv_bfloat16*>(device_alloc(kv_elems * 2));
  auto* o = static_cast<__nv_bfloat16*>(device_alloc(q_elems * 2));
  auto* sq = static_cast<__nv_bfloat16*>(device_alloc(size_t(h_kv * d) * 2));
  // Queries scaled so routing scores spread over several units, as a trained model's do (sparse routing).
  bench_device::fill(q, int64_t(q_elems), 1, 16.0f, 2048);
  bench_device::fill(k, int64_t(kv_elems), 2, 1.0f, 2048);
  bench_device::fill(v, int64_t(kv_elems), 3, 1.0f, 2048);
  bench_device::fill(sq, h_kv * d, 4, 0.05f, 8);
  CK(cudaGetLastError());

  ForwardParams p;
  p.q = make_view(q, DType::kBF16, {1, n, h_q, d}, dev);
  p.k = make_view(k, DType::kBF16, {1, n, h_kv, d}, dev);
  p.v = make_view(v, DType::kBF16, {1, n, h_kv, d}, dev);
  p.o = make_view(o, DType::kBF16, {1, n, h_q, d}, dev);
  p.summary_query = make_view(sq, DType::kBF16, {h_kv, d}, dev);
  std::vector<int32_t> active_host(size_t(h_kv * n));
  auto* active = static_cast<int32_t*>(device_alloc(active_host.size() * 4));
  p.routing.active_chunks = make_view(active, DType::kI32, {1, h_kv, n}, dev);

  const size_t ws_bytes = workspace_size(*be, p);
  size_t free_before = 0, total = 0;
  CK(cudaDeviceSynchronize());
  CK(cudaMemGetInfo(&free_before, &total));
  void* ws = device_alloc(ws_bytes);
  p.workspace = ws;
  p.workspace_bytes = ws_bytes;

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  forward(*be, p);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));

  unsigned long long* bad = static_cast<unsigned long long*>(device_alloc(8));
  CK(cudaMemset(bad, 0, 8));
  count_nonfinite<<<2048, 256>>>(o, int64_t(q_elems), bad);
  unsigned long long bad_host = 0;
  CK(cudaMemcpy(&bad_host, bad, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(active_host.data(), active, active_host.size() * 4, cudaMemcpyDeviceToHost));
  const RoutingStats rs = routing_stats(make_view(active_host.data(), DType::kI32, {1, h_kv, n}), BatchLayout{}, n,
                                        n, C);
  const double qkvo_gb = double(2 * q_elems + 2 * kv_elems) * 2 / 1e9;
  std::printf("| N | q+k+v+o GB | workspace GB (summaries, mask, tau, mu) | forward s | routing sparsity | "
              "non-finite outputs | GPU memory GB |\n|---|---|---|---|---|---|---|\n");
  std::printf("| %lld | %.2f | %.3f | %.2f | %.4f | %llu | %.1f |\n", static_cast<long long>(n), qkvo_gb,
              double(ws_bytes) / 1e9, ms / 1e3, rs.sparsity, bad_host, double(total) / 1e9);
  (void)free_before;
  return bad_host == 0 ? 0 : 1;
}
