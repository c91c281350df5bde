#include "backends/cpu/kv_pack.h"

#include <algorithm>
#include <cstring>

#include <tbb/enumerable_thread_specific.h>

#include "dashattn/geometry.h"

namespace dashattn {
namespace cpu {

void PackedKv::pack(const TensorView& k, const TensorView& v, const Sequences& seqs, int64_t chunk) {
  chunk_ = chunk;
  chunk_pad_ = pad_floats(chunk);
  d_ = k.shape[3];
  d_pad_ = pad_floats(d_);
  h_kv_ = k.shape[2];
  chunk_base_.assign(static_cast<size_t>(seqs.count) + 1, 0);
  std::vector<SequenceSpan> spans(static_cast<size_t>(seqs.count));
  for (int64_t s = 0; s < seqs.count; ++s) {
    spans[s] = seqs.span(s);
    chunk_base_[s + 1] = chunk_base_[s] + num_chunks_total(spans[s].n_k, chunk);
  }
  total_chunks_ = chunk_base_[seqs.count];
  const int64_t kt_size = d_ * chunk_pad_, v_size = chunk_ * d_pad_;
  kt_.reserve(static_cast<size_t>(std::max<int64_t>(1, h_kv_ * total_chunks_ * kt_size)));
  v_.reserve(static_cast<size_t>(std::max<int64_t>(1, h_kv_ * total_chunks_ * v_size)));

  // Flatten (sequence, chunk) so a long sequence spreads over every thread.
  std::vector<int64_t> seq_of(static_cast<size_t>(total_chunks_));
  for (int64_t s = 0; s < seqs.count; ++s)
    for (int64_t c = chunk_base_[s]; c < chunk_base_[s + 1]; ++c) seq_of[c] = s;

  // Per-thread scratch kept across calls (grow-only), so repeated calls do not fault in fresh pages. A TBB thread
  // runs one of these task bodies at a time (they start no nested parallel work), so sharing it is safe.
  static tbb::enumerable_thread_specific<Scratch<float>> rows_tls;
  const KeyPages pages = key_pages(seqs.batch, k);
  parallel_items(total_chunks_, [&](int64_t flat) {
    const int64_t s = seq_of[flat];
    const int64_t c = flat - chunk_base_[s];
    const SequenceSpan& sp = spans[s];
    const int64_t first = c * chunk_;
    const int64_t keys = std::min(chunk_, sp.n_k - first);
    // A chunk never straddles two pages (the page size is a multiple of the chunk size), so its keys are the
    // consecutive rows at.row + j of one K/V index: a page of a pool, or the sequence's own rows.
    const KeyRow at = locate_key(pages, sp, first);
    float* rows = rows_tls.local().reserve(static_cast<size_t>(chunk_ * d_pad_));
    for (int64_t r = 0; r < h_kv_; ++r) {
      const int64_t block = r * total_chunks_ + flat;
      float* kt = kt_.data() + block * kt_size;
      float* vb = v_.data() + block * v_size;
      for (int64_t j = 0; j < keys; ++j) {
        load_row(element(k, at.index, at.row + j, r), k.dtype, d_, rows + j * d_pad_);
      }
      for (int64_t t = 0; t < d_; ++t) {
        float* dst = kt + t * chunk_pad_;
        for (int64_t j = 0; j < keys; ++j) dst[j] = rows[j * d_pad_ + t];
        std::fill(dst + keys, dst + chunk_pad_, 0.0f);
      }
      for (int64_t j = 0; j < keys; ++j) {
        float* dst = vb + j * d_pad_;
        load_row(element(v, at.index, at.row + j, r), v.dtype, d_, dst);
        std::fill(dst + d_, dst + d_pad_, 0.0f);
      }
      std::fill(vb + keys * d_pad_, vb + v_size, 0.0f);
    }
  });
}

}  // namespace cpu
}  // namespace dashattn
