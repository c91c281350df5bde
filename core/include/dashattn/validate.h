// Argument validation shared by every backend and front end.
//
// Each function throws InvalidArgument naming the argument and the expected value, before anything runs. The
// normalize step turns rank-3 varlen tensors into rank-4 [1, total, h, d] views so backends see one shape.
#pragma once

#include "dashattn/paging.h"
#include "dashattn/params.h"

namespace dashattn {

// Problem sizes derived from validated params.
struct ProblemShape {
  int64_t batch = 0;        // b, or num_seqs for varlen
  int64_t n_q = 0;          // padded query length (varlen: max_seqlen_q)
  int64_t n_k = 0;          // padded key length (varlen: max_seqlen_k)
  int64_t rows_q = 0;       // rows of q's sequence axis (varlen: total_q)
  int64_t h_q = 0, h_kv = 0, group = 0, d = 0;
  int64_t chunk = 0;
  int64_t max_chunks = 0;   // complete chunks of the longest sequence: the summary axis
  int64_t mask_words = 0;   // 32-bit words per mask row
  float scale = 0;          // resolved softmax scale
};

void validate_method(const MethodParams& m);

// Normalized copy (rank-4 views) of p; throws on any violation of the contract.
ForwardParams normalize_forward(const ForwardParams& p);
ProblemShape forward_shape(const ForwardParams& normalized);

SummarizeParams normalize_summarize(const SummarizeParams& p);
RouteParams normalize_route(const RouteParams& p);
AttendParams normalize_attend(const AttendParams& p);
DenseParams normalize_dense(const DenseParams& p);

// Shape of one stage's problem (after normalization). Stage 0's: batch (sequences), n_k (padded keys), h_kv, d,
// chunk and max_chunks.
ProblemShape summarize_shape(const SummarizeParams& normalized);
ProblemShape route_shape(const RouteParams& p);
ProblemShape attend_shape(const AttendParams& p);

// The chunk of the last query (queries end at the last key). Stages 1 and 2 read the summaries of chunks before
// each query's own chunk only, so a Stage 0 that writes no chunk below this one overlaps them safely.
inline int64_t last_query_chunk(const ProblemShape& s) { return s.n_k > 0 ? (s.n_k - 1) / s.chunk : 0; }

// Sequence s's query/key row offsets and lengths within the (normalized) tensors, read from host memory. Only
// for backends whose BatchLayout arrays are host-visible (the CPU).
struct SequenceSpan {
  int64_t seq = 0;          // the sequence (its row of a paged batch's block table)
  int64_t batch_index = 0;  // index into the b axis (0 for varlen)
  int64_t q_begin = 0, n_q = 0;
  int64_t k_begin = 0, n_k = 0;
};
SequenceSpan sequence_span(const BatchLayout& batch, int64_t s, int64_t padded_n_q, int64_t padded_n_k);

// The page translation of a (normalized) K/V view: none unless batch.block_table is set.
inline KeyPages key_pages(const BatchLayout& batch, const TensorView& k) {
  if (!batch.is_paged()) return KeyPages{};
  return KeyPages{batch.block_table, batch.block_table_stride, k.shape[1]};
}

// Key j of sequence sp in the K/V view (host and device code).
DASHATTN_HD KeyRow locate_key(const KeyPages& pages, const SequenceSpan& sp, int64_t j) {
  return locate_key(pages, sp.seq, sp.batch_index, sp.k_begin, j);
}

}  // namespace dashattn
