// --paged P of the GPU benchmark: the same keys and values moved into a page pool of P-token pages in a shuffled
// order, with its block table, so that Stage 0 and Stage 2 can be timed on paged K/V beside the contiguous
// tensors. A serving engine's pages are scattered over its pool; a shuffled order makes no two consecutive pages
// of a sequence neighbours in memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "bench_device.cuh"
#include "dashattn/dashattn.h"

namespace bench_paged {

struct PagedKv {
  void* k = nullptr;
  void* v = nullptr;
  int32_t* table = nullptr;  // device [b, n / P]
  int64_t pages = 0, page = 0, b = 0, n = 0, h_kv = 0, d = 0;

  PagedKv() = default;
  PagedKv(const PagedKv&) = delete;
  PagedKv& operator=(const PagedKv&) = delete;
  ~PagedKv() {
    cudaFree(k);
    cudaFree(v);
    cudaFree(table);
  }

  dashattn::TensorView pool(void* p) const {
    return dashattn::make_view(p, dashattn::DType::kBF16, {pages, page, h_kv, d},
                               dashattn::Device{dashattn::DeviceType::kCuda, 0});
  }
  // The batch layout of the pool: padded, every sequence n keys long.
  dashattn::BatchLayout layout() const {
    dashattn::BatchLayout bl;
    bl.block_table = table;
    bl.block_table_stride = n / page;
    bl.max_seqlen_k = int(n);
    return bl;
  }
  // p with k (and v) replaced by the pool's and the block table added (the other views unchanged).
  dashattn::AttendParams on_pages(dashattn::AttendParams p) const {
    p.k = pool(k);
    p.v = pool(v);
    p.batch = layout();
    return p;
  }
  dashattn::SummarizeParams on_pages(dashattn::SummarizeParams p) const {
    p.k = pool(k);
    p.batch = layout();
    return p;
  }
};

// Moves contiguous bf16 [b, n, h_kv, d] k and v into a pool of (b · n / page) pages, page j of sequence s at table
// entry perm[s · n / page + j] (a seeded shuffle). n must be a multiple of page.
inline std::unique_ptr<PagedKv> make_paged(const void* k, const void* v, int64_t b, int64_t n, int64_t h_kv, int64_t d,
                                           int64_t page, uint64_t seed) {
  auto pk = std::make_unique<PagedKv>();
  pk->page = page;
  pk->b = b;
  pk->n = n;
  pk->h_kv = h_kv;
  pk->d = d;
  const int64_t per_seq = n / page;
  pk->pages = b * per_seq;
  const size_t page_bytes = size_t(page * h_kv * d * 2);
  CK(cudaMalloc(&pk->k, page_bytes * size_t(pk->pages)));
  CK(cudaMalloc(&pk->v, page_bytes * size_t(pk->pages)));
  std::vector<int32_t> perm(static_cast<size_t>(pk->pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t i = 0; i < pk->pages; ++i) {
    const size_t src = size_t(i) * page_bytes, dst = size_t(perm[size_t(i)]) * page_bytes;
    CK(cudaMemcpy(static_cast<char*>(pk->k) + dst, static_cast<const char*>(k) + src, page_bytes, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(static_cast<char*>(pk->v) + dst, static_cast<const char*>(v) + src, page_bytes, cudaMemcpyDeviceToDevice));
  }
  CK(cudaMalloc(&pk->table, perm.size() * sizeof(int32_t)));
  CK(cudaMemcpy(pk->table, perm.data(), perm.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return pk;
}

}  // namespace bench_paged
