// Stage 0: one summary per complete chunk and KV head, softmax(⟨q̄, k⟩/sqrt(d)) over the chunk's keys with the
// keys as values. A summary reads only its own chunk, through the same code path wherever the chunk sits, so a
// chunk summarized during decoding is bitwise the summary prefill computed.
#include <tbb/enumerable_thread_specific.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_stages.h"
#include "backends/cpu/simd_kernels.h"
#include "dashattn/geometry.h"

namespace dashattn {
namespace cpu {
namespace {

// Keys of sequence s (seq, batch_index, k_begin, n_k; the query side is unused). Summaries only need the key side
// of the layout, so read it directly: a varlen Stage 0 may come without cu_seqlens_q. padded_n_k: Stage 0's
// padded key length (summarize_shape).
SequenceSpan key_span(const BatchLayout& batch, int64_t padded_n_k, int64_t s) {
  SequenceSpan sp;
  sp.seq = s;
  if (batch.is_varlen()) {
    sp.k_begin = batch.cu_seqlens_k[s];
    sp.n_k = batch.cu_seqlens_k[s + 1] - sp.k_begin;
  } else {
    sp.batch_index = s;
    sp.n_k = batch.seqlens_k ? batch.seqlens_k[s] : padded_n_k;
  }
  return sp;
}

struct SummaryScratch {
  Scratch<float> keys, logits, acc;
};

}  // namespace

void summarize(const SummarizeParams& params) {
  const SummarizeParams p = normalize_summarize(params);
  const TensorView& k = p.k;
  const int64_t h_kv = k.shape[2], d = k.shape[3], C = p.method.chunk_size;
  const int64_t dp = pad_floats(d);
  const ProblemShape shape = summarize_shape(p);
  const int64_t count = shape.batch;
  const KeyPages pages = key_pages(p.batch, k);
  const float inv_sqrt_d = routing_inv_sqrt_d(d);

  std::vector<SequenceSpan> spans(static_cast<size_t>(count));
  std::vector<std::pair<int64_t, int64_t>> items;  // (sequence, chunk)
  for (int64_t s = 0; s < count; ++s) {
    spans[s] = key_span(p.batch, shape.n_k, s);
    const int64_t first = p.first_chunks != nullptr ? p.first_chunks[s] : p.first_chunk;
    for (int64_t c = first; c < num_complete_chunks(spans[s].n_k, C); ++c) items.emplace_back(s, c);
  }

  const bool has_query = p.summary_query.defined();
  std::vector<float> queries(static_cast<size_t>(h_kv * dp), 0.0f);
  if (has_query) {
    for (int64_t r = 0; r < h_kv; ++r) {
      load_row(element(p.summary_query, r, 0), p.summary_query.dtype, d, queries.data() + r * dp);
    }
  }

  // Per-thread scratch kept across calls (grow-only), so repeated calls do not fault in fresh pages. A TBB thread
  // runs one of these task bodies at a time (they start no nested parallel work), so sharing it is safe.
  static tbb::enumerable_thread_specific<SummaryScratch> scratch;
  parallel_items(static_cast<int64_t>(items.size()), [&](int64_t idx) {
    const int64_t s = items[idx].first, c = items[idx].second;
    // The chunk lies in one page (the page size is a multiple of C): translate its first key only.
    const KeyRow at = locate_key(pages, spans[s], c * C);
    SummaryScratch& ws = scratch.local();
    float* keys = ws.keys.reserve(C * dp);
    float* logits = ws.logits.reserve(C);
    float* acc = ws.acc.reserve(dp);
    for (int64_t r = 0; r < h_kv; ++r) {
      for (int64_t j = 0; j < C; ++j) {
        float* dst = keys + j * dp;
        load_row(element(k, at.index, at.row + j, r), k.dtype, d, dst);
        std::fill(dst + d, dst + dp, 0.0f);
      }
      // An undefined summary query is zeros: every logit is 0 and the summary is the mean key.
      float m = 0.0f;
      for (int64_t j = 0; j < C; ++j) {
        logits[j] = has_query ? dot_row(queries.data() + r * dp, keys + j * dp, d) * inv_sqrt_d : 0.0f;
        m = j == 0 ? logits[j] : std::max(m, logits[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < C; ++j) {
        logits[j] = std::exp(logits[j] - m);
        sum += logits[j];
      }
      for (int64_t j = 0; j < C; ++j) logits[j] = logits[j] / sum;
      std::fill(acc, acc + dp, 0.0f);
      const float one = 1.0f;
      const float* probs = logits;
      accumulate_pv(&acc, &one, &probs, 1, keys, dp, static_cast<int>(C), static_cast<int>(dp));
      store_row(acc, d, 1.0f, p.summaries.dtype, mutable_element(p.summaries, s, c, r));
    }
  });
}

}  // namespace cpu
}  // namespace dashattn
