// Parameter structs: one per stage, one for the whole forward (prefill and decode alike), one for dense attention.
//
// Conventions (see docs/api.md and semantics.md):
//  - q [b, n_q, h_q, d], k and v [b, n_k, h_kv, d], any element strides with stride 1 on d. A packed varlen batch
//    passes rank-3 [total, h, d] tensors (or rank 4 with b = 1) plus batch.cu_seqlens_*.
//  - Causality is bottom-right: query i of a sequence sits at absolute position n_k − n_q + i.
//  - Integer arrays in BatchLayout live on the same device as the tensors; max_seqlen_* size the launch grid so
//    no backend has to read device memory on the host.
//  - Every pointer is caller-owned. Nothing here allocates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dashattn/entmax.h"
#include "dashattn/prior.h"
#include "dashattn/tensor.h"

namespace dashattn {

struct MethodParams {
  int chunk_size = 64;
  float alpha = 1.5f;   // α-entmax α (> 1)
  float gamma = 1.0f;   // routing temperature γ
  float sigma = 1e8f;   // prior strength σ (> 0), used by PriorMode::kEstimateDiagonal
  float scale = 0.0f;   // softmax scale; 0 selects 1/sqrt(d)
  PriorMode prior = PriorMode::kEstimateDiagonal;
  EntmaxSolver solver = EntmaxSolver::kExact;
};

// How the sequences of a batch are laid out.
struct BatchLayout {
  // Packed varlen (FlashAttention convention): num_seqs + 1 int32 prefix sums of the query / key lengths.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int num_seqs = 0;        // required with cu_seqlens
  int max_seqlen_q = 0;    // required with cu_seqlens
  int max_seqlen_k = 0;    // required with cu_seqlens
  // Padded batches: optional per-sequence lengths [b]; rows past them are padding (o = 0, lse = −inf, mask 0).
  const int32_t* seqlens_q = nullptr;
  const int32_t* seqlens_k = nullptr;
  // Paged K/V (padded or packed batches; FlashAttention's KV-cache convention). k and v are then page pools
  // [num_pages, page_size, h_kv, d], and key j of sequence i is row j % page_size of page
  // block_table[i * block_table_stride + j / page_size]. page_size = k.shape[1] must be a multiple of 64 (the
  // GPU's key tile) and of the chunk size, so that a chunk and a tile never straddle two pages. max_seqlen_k is
  // the padded key length n_k (required); seqlens_k (padded) or cu_seqlens_k (packed) each sequence's length.
  // Pages may be shared between sequences (a common prefix): every stage only reads K and V.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;  // int32 entries per sequence, >= ceil(max_seqlen_k / page_size)

  // Either prefix-sum array marks a packed batch: Stage 0 needs only cu_seqlens_k, the other stages both.
  bool is_varlen() const { return cu_seqlens_q != nullptr || cu_seqlens_k != nullptr; }
  bool is_paged() const { return block_table != nullptr; }
};

// Stage-1 results consumed by Stage 2: the bit-packed mask plus the compact numbers the bias is rebuilt from.
struct RoutingView {
  TensorView mask;           // u32 [b, h_kv, n_q, words], bit c%32 of word c/32, diagonal bit set
  TensorView tau;            // f32 [b, h_q, n_q]: entmax threshold of each query head (on (α−1)·z̄)
  TensorView mu;             // f32 [b, h_kv, n_q]: mean log w over the routed chunks (0 when none)
  TensorView active_chunks;  // i32 [b, h_kv, n_q]: routed chunks + 1 (the diagonal); optional statistics output
};

// Stage 0: summaries of complete chunks [first_chunk, n_k / C) of every sequence.
struct SummarizeParams {
  TensorView k;              // [b, n_k, h_kv, d]
  TensorView summary_query;  // [h_kv, d], key dtype or f32; undefined means zeros (mean pooling)
  TensorView summaries;      // out: [b, max_chunks, h_kv, d] in the key dtype
  int64_t first_chunk = 0;   // chunks before this one are already valid (decode cache)
  // Optional per-sequence first chunks ([sequences] int32 in the memory of k, each >= first_chunk): sequence i's
  // chunks before first_chunks[i] are already valid and are not summarized again (sequences of different lengths
  // in one decode step).
  const int32_t* first_chunks = nullptr;
  BatchLayout batch;
  MethodParams method;
  void* stream = nullptr;
};

// Stage 1: routing of every query against the summaries of the chunks before its own.
struct RouteParams {
  TensorView q;              // [b, n_q, h_q, d]
  TensorView summaries;      // [b, max_chunks, h_kv, d]
  int64_t n_k = 0;           // keys per sequence of a padded batch (ignored for varlen)
  BatchLayout batch;
  MethodParams method;
  RoutingView routing;       // out: mask, tau, mu required; active_chunks optional
  void* stream = nullptr;
};

// Stage 2: sparse attention over the routed chunks plus the diagonal chunk.
struct AttendParams {
  TensorView q, k, v;
  TensorView summaries;      // needed to rebuild w unless method.prior == kNone
  RoutingView routing;       // in: mask (+ tau, mu unless prior none)
  TensorView o;              // out [b, n_q, h_q, d], dtype of q or f32
  TensorView lse;            // optional out, f32 [b, h_q, n_q]
  BatchLayout batch;
  MethodParams method;
  void* stream = nullptr;
};

// The whole forward: Stage 0 + 1 + 2. Decode is the same call with few queries and a summary cache.
struct ForwardParams {
  TensorView q, k, v;
  TensorView summary_query;  // [h_kv, d]; undefined means zeros
  // Optional caller-owned summary cache [b, max_chunks, h_kv, d]; chunks < summaries_valid are trusted as already
  // computed (decode). When undefined, summaries live in the workspace.
  TensorView summaries;
  int64_t summaries_valid = 0;
  // Optional per-sequence counts of valid summaries ([sequences] int32 in the memory of q, each >= summaries_valid):
  // Stage 0 starts sequence i at summaries_valid_per_seq[i] (SummarizeParams::first_chunks).
  const int32_t* summaries_valid_per_seq = nullptr;
  TensorView o;              // out
  TensorView lse;            // optional out
  RoutingView routing;       // optional outputs; whatever is undefined lives in the workspace
  BatchLayout batch;
  MethodParams method;
  void* workspace = nullptr; // caller-owned scratch of at least workspace_size() bytes; null: the backend allocates
  size_t workspace_bytes = 0;
  void* stream = nullptr;    // cudaStream_t / hipStream_t on GPU backends
};

// Dense causal attention (bottom-right aligned), the baseline of `verify` and `bench`.
struct DenseParams {
  TensorView q, k, v, o, lse;
  BatchLayout batch;
  float scale = 0.0f;        // 0 selects 1/sqrt(d)
  void* stream = nullptr;
};

}  // namespace dashattn
