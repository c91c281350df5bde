// Device-side arguments of the Stage-2 kernels (sparse prefill, split-KV decode, dense causal baseline).
//
// attend_launch.cu translates the public AttendParams / DenseParams (validated, normalized to rank-4 views) into
// this flat struct once per call. Tensors use the backend's DeviceTensor views and the batch layout its
// DeviceBatch (cuda_internal.cuh), so a kernel never consults host memory and a decode step stays
// CUDA-graph capturable. Per-row tensors (mask, tau, mu, lse) are [b, head, rows_q] views indexed with
// row_output_offset(); the summaries are indexed by the sequence number.
#pragma once

#include <cstdint>

#include "bias_lists.cuh"
#include "cuda_internal.cuh"
#include "dashattn/prior.h"

namespace dashattn::cuda {

struct AttendArgs {
  DeviceTensor q{}, k{}, v{};  // [b, n, h, d]
  DeviceTensor o{};            // [b, n_q, h_q, d]
  DType o_dtype = DType::kBF16;
  DeviceTensor lse{};          // optional f32 [b, h_q, rows_q]

  DeviceTensor mask{};         // u32 [b, h_kv, rows_q, words]; unused when dense
  int mask_words = 0;

  // Prior bias inputs (unused with PriorMode::kNone and in dense mode).
  DeviceTensor summaries{};    // [num_seqs, max_chunks, h_kv, d], same dtype as k
  DeviceTensor tau{};          // f32 [b, h_q, rows_q]
  DeviceTensor mu{};           // f32 [b, h_kv, rows_q]
  PriorMode prior = PriorMode::kNone;
  float alpha = 1.5f, gamma = 1.0f, inv_sigma = 0.0f;
  // Bias computed by the consumer warps (g divides 16): a per-CTA table of bias_table_floats floats at byte
  // bias_table_offset of the aligned shared memory, filled before the main loop when the CTA's (tile, chunk,
  // token) entries fit; otherwise per tile (on the per-warp path). allow_bias_table = false forces the per-tile
  // path (tests, timings).
  bool allow_bias_table = true;
  int bias_table_floats = 0;
  uint32_t bias_table_offset = 0;

  DeviceBatch batch{};
  int num_seqs = 0;
  int h_q = 0, h_kv = 0, group = 0;
  int chunk = 64, log2_chunk = 6;
  float scale_log2 = 0.0f;  // softmax scale * log2(e)
  bool dense = false;       // every causally visible key attended (the dense baseline)
  bool use_tma = false;     // sm_90 kernels: whole K/V tiles by tensor copy (the tensor maps are kernel params)
  // sm_90 wide tilings: a CTA's Q rows by tensor copy (one thread issues them, so the CTA's other threads start on
  // the union at once), and a warp's 16 staged o rows by a tensor store where they are all in the sequence.
  bool q_tma = false, o_tma = false;

  // Split-KV (decode): split z of a row block takes the z-th equal share of the active tiles of its union and
  // writes an fp32 partial (normalized o and lse), merged by combine_splits_kernel. 1 writes o / lse directly.
  int num_splits = 1;
  float* part_o = nullptr;    // [split, num_seqs, h_q, padded_n_q, d]
  float* part_lse = nullptr;  // [split, num_seqs, h_q, padded_n_q]

  // The persistent kernel's item counter (zeroed on the stream before each launch): CTAs take their next row
  // block from it, so that the work evens out whatever the masks. Null: a fixed order of items per CTA.
  unsigned long long* item_counter = nullptr;

  // Paged K/V: k and v are page pools read through this block table (table null: contiguous). Last, so that the
  // other arguments keep their places in the parameter space.
  KeyPages pages{};

  // forward() only: Stage 1's per-token lists of routed chunks and log weights (bias_lists.cuh), from which the
  // wide tilings' bias table is filled without recomputing it (off: computed as before).
  BiasLists lists{};
};

// The chunks a query of a sequence of n_k keys may route: those before the last key's chunk (a query never routes
// its own chunk). Only their k̄ are read for the bias. The last chunk, even when complete, is left alone: a decode
// step's Stage 0 may be writing its summary beside Stage 2.
__device__ __forceinline__ int64_t routable_chunks(int64_t n_k, int log2_chunk) {
  return n_k > 0 ? (n_k - 1) >> log2_chunk : 0;
}

}  // namespace dashattn::cuda
