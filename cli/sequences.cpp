#include "sequences.h"

#include <cstring>

namespace dashattn::cli {
namespace {

// Bytes of one index of axis `axis` (the product of the later axes).
size_t bytes_after(const io::Tensor& t, size_t axis) {
  size_t bytes = static_cast<size_t>(dtype_size(t.dtype()));
  for (size_t i = axis + 1; i < t.shape().size(); ++i) bytes *= static_cast<size_t>(t.shape()[i]);
  return bytes;
}

// Rows [begin, begin + count) of batch index b of a tensor [B, rows, ...] (q, o, summaries).
io::Tensor rows_of(const io::Tensor& t, int64_t b, int64_t begin, int64_t count) {
  std::vector<int64_t> shape = t.shape();
  const size_t row_bytes = bytes_after(t, 1);
  shape[0] = 1;
  shape[1] = count;
  io::Tensor out(t.name(), t.dtype(), shape);
  if (count > 0) {
    std::memcpy(out.data(), t.data() + static_cast<size_t>(b * t.shape()[1] + begin) * row_bytes,
                static_cast<size_t>(count) * row_bytes);
  }
  return out;
}

// Rows [begin, begin + count) of batch index b of a per-row tensor [B, heads, rows, ...] (lse, mask, ...).
io::Tensor head_rows_of(const io::Tensor& t, int64_t b, int64_t begin, int64_t count) {
  std::vector<int64_t> shape = t.shape();
  const int64_t heads = shape[1], rows = shape[2];
  const size_t row_bytes = bytes_after(t, 2);
  shape[0] = 1;
  shape[2] = count;
  io::Tensor out(t.name(), t.dtype(), shape);
  for (int64_t h = 0; h < heads && count > 0; ++h) {
    std::memcpy(out.data() + static_cast<size_t>(h * count) * row_bytes,
                t.data() + static_cast<size_t>((b * heads + h) * rows + begin) * row_bytes,
                static_cast<size_t>(count) * row_bytes);
  }
  return out;
}

// Keys [0, n_k) of a sequence from wherever the layout keeps them: its batch row, its packed rows or its pages.
io::Tensor gather_keys(const io::Tensor& kv, const HostProblem& p, const SequenceSpan& span) {
  const KeyPages pages{p.layout.paged() ? p.layout.block_table.data() : nullptr, p.layout.block_table_stride,
                       p.page_size()};
  const int64_t rows_per_index = kv.shape()[1];
  const size_t row_bytes = bytes_after(kv, 1);
  io::Tensor out(kv.name(), kv.dtype(), {1, span.n_k, kv.shape()[2], kv.shape()[3]});
  for (int64_t j = 0; j < span.n_k; ++j) {
    const KeyRow at = locate_key(pages, span, j);
    std::memcpy(out.data() + static_cast<size_t>(j) * row_bytes,
                kv.data() + static_cast<size_t>(at.index * rows_per_index + at.row) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace

SequenceSpan span_of(const HostProblem& p, int64_t s) {
  const BatchLayout layout = p.layout.view();
  return sequence_span(layout, s, p.n_q(), p.n_k());
}

HostProblem sequence_problem(const HostProblem& p, int64_t s) {
  const SequenceSpan span = span_of(p, s);
  HostProblem one;
  one.q = rows_of(p.q, span.batch_index, span.q_begin, span.n_q);
  one.k = gather_keys(p.k, p, span);
  one.v = gather_keys(p.v, p, span);
  one.summary_query = p.summary_query;
  one.source_rank = 4;
  return one;
}

ForwardOutputs sequence_outputs(const HostProblem& p, const ForwardOutputs& out, int64_t s, int64_t chunk) {
  const SequenceSpan span = span_of(p, s);
  ForwardOutputs one;
  one.o = rows_of(out.o, span.batch_index, span.q_begin, span.n_q);
  one.lse = head_rows_of(out.lse, span.batch_index, span.q_begin, span.n_q);
  one.mask = head_rows_of(out.mask, span.batch_index, span.q_begin, span.n_q);
  one.active = head_rows_of(out.active, span.batch_index, span.q_begin, span.n_q);
  one.tau = head_rows_of(out.tau, span.batch_index, span.q_begin, span.n_q);
  one.mu = head_rows_of(out.mu, span.batch_index, span.q_begin, span.n_q);
  // The summary cache has one row per sequence; this sequence's complete chunks lead it.
  one.summaries = rows_of(out.summaries, span.seq, 0, num_complete_chunks(span.n_k, chunk));
  one.seconds = out.seconds;
  return one;
}

}  // namespace dashattn::cli
