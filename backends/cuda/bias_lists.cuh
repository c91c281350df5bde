// Per-token lists of the routed chunks' log group weights, written by Stage 1 and read by Stage 2's bias table.
//
// Stage 1 computes each routed chunk's group weight w_c to set the mask bit and to form μ; Stage 2 needs
// log w_c again for the prior bias, and without these lists recomputes it per CTA (x = Q k̄^T on the tensor
// cores for every pair of the CTA's union, the heads' entmax weights, their group sums and a logarithm: the
// bias table). With them, Stage 2 scatters ready values into its table: prefill Stage 2 2-3 % faster at 32K-64K,
// 87.5-93.75 %, on an H100 (perf-log.md, fortieth pass). The values are Stage 1's own: the bias of a chunk is
// the log of the weight that set its bit and entered μ.
//
// Layout, one row per (sequence, KV head, query token), indexed like μ (the row's offset in the μ view, which
// forward()'s workspace carves contiguous [b, h_kv, rows_q]): counts[row] and entries[row][0 .. cap), each
// entry {chunk, bits of log w_c} in no particular order. counts[row] = the routed chunks (the diagonal not
// among them) when every one of them is listed, kNoList when the row has none: more than `cap`, or Stage 1
// took a path that does not list (the decode kernels, the multi-pass kernel, the emit's windowed fallback).
// Stage 2 takes the lists only when every token of its CTA has one, and otherwise computes its table as before.
//
// They exist only inside forward(): Stage 1 writes every row's count in the same call, so Stage 2 never reads
// a stale one. The standalone route() and attend() calls take no lists.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_internal.cuh"

namespace dashattn::cuda {

// Entries per row: a token routes about (1 − s) of the chunks before it, so at 93.75 % a 64 K-token sequence's last
// tokens route ~64 chunks and a 128 K one's ~128, at 87.5 % a 64 K one's ~128; denser rows fall back to the
// computed table. (A cap of 64 left the table to the later half of a 64 K sequence at 87.5 %.) 1028 bytes per
// row: 135 MB at 64K with h_kv = 2.
constexpr int kBiasListCap = 128;
// Entries Stage 2 stages in shared memory at a CTA's entry: every list at 93.75 % up to 64 K keys fits, and a copy of
// all 128 cost 32K / 93.75 % 1.5 % (perf-log.md, forty-second pass); a longer list's rest is read at the table.
constexpr int kBiasListStaged = 64;
constexpr int32_t kNoList = -1;
// Sequences whose forward() carves lists (cuda_backend.cu): up to 128 K keys, 270 MB of lists at h_kv = 2. Past
// that, the tokens route more than the cap at the sparsities the lists serve, and the lists' memory grows with n.
constexpr int64_t kBiasListMaxKeys = int64_t(128) * 1024;

// Whether Stage 2 reads lists for this shape, so that forward() carves them and Stage 1 writes them: the warpgroup
// tilings' list instance (d = 128) at g = 16, C <= 64 and at most kBiasListMaxKeys keys; elsewhere they would cost
// memory and Stage-1 stores for nothing.
inline bool bias_lists_read(int64_t d, int64_t group, int64_t chunk, int64_t n_k) {
  return d == 128 && group == 16 && chunk <= 64 && n_k <= kBiasListMaxKeys;
}

struct BiasLists {
  int2* entries = nullptr;    // [rows][cap]: {chunk, __float_as_int(log w)}
  int32_t* counts = nullptr;  // [rows]
  int64_t rows = 0;           // rows the buffers hold (null buffers: no lists)
  __host__ __device__ __forceinline__ bool on() const { return counts != nullptr; }
  // The entries of row r (the row of counts + r).
  __host__ __device__ __forceinline__ int2* row(int64_t r) const { return entries + r * int64_t(kBiasListCap); }
};

// Bytes of the counts of `rows` rows, and of both arrays (each 256-byte aligned).
inline size_t bias_list_aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
inline size_t bias_list_counts_bytes(int64_t rows) { return bias_list_aligned(size_t(rows) * sizeof(int32_t)); }
inline size_t bias_lists_bytes(int64_t rows) {
  const size_t entries = bias_list_aligned(size_t(rows) * kBiasListCap * sizeof(int2));
  return rows > 0 ? bias_list_counts_bytes(rows) + entries : 0;
}

// The lists at the front of `scratch` (256-byte aligned), sized for `rows` rows.
inline BiasLists carve_bias_lists(void* scratch, int64_t rows) {
  BiasLists l;
  if (scratch == nullptr || rows <= 0) return l;
  char* base = static_cast<char*>(scratch);
  l.counts = reinterpret_cast<int32_t*>(base);
  l.entries = reinterpret_cast<int2*>(base + bias_list_counts_bytes(rows));
  l.rows = rows;
  return l;
}

// The lists a launch may use with this μ view and prior: none without a prior (Stage 2 reads them only for the
// bias, so Stage 1 writes them only then), and every row's offset in the view must fall inside the lists (a
// contiguous [b, h_kv, rows_q] view of at most l->rows elements, as forward()'s workspace carves it).
inline BiasLists bias_lists_for(const BiasLists* l, const DeviceTensor& mu, PriorMode prior) {
  if (l == nullptr || !l->on() || prior == PriorMode::kNone || !mu.defined()) return BiasLists{};
  int64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    if (mu.shape[i] <= 0 || mu.stride[i] < 0) return BiasLists{};
    last += (mu.shape[i] - 1) * mu.stride[i];
  }
  return last < l->rows ? *l : BiasLists{};
}

}  // namespace dashattn::cuda
