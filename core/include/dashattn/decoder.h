// Decoder: the convenience object for cached decoding on any backend.
//
// It owns, on the backend's device, the K/V cache and the chunk-summary cache of a padded batch of b sequences,
// grows them geometrically (no cap on chunks other than memory), and on each step appends the new keys and values,
// summarizes exactly the chunks they complete, routes the new queries and attends. A step may give each sequence
// its own count of new tokens (step's new_tokens), so the sequences may differ in length. Engines that own their KV
// cache call forward() with ForwardParams::summaries / summaries_valid instead.
//
// The K/V cache is either contiguous ([b, capacity, h_kv, d] per cache) or, with DecoderConfig::page_size > 0, a
// K and a V page pool [num_pages, page_size, h_kv, d] with an int32 block table [b, width] (the paged layout of
// BatchLayout::block_table). The summary cache is contiguous either way.
//
// Continuous batching: reset() ends a sequence so that its slot takes a new prompt in a later step (a ragged step
// with new_tokens), and fork() makes a sequence a copy of another's prefix (parallel sampling, beam search); a
// paged decoder shares the prefix's full pages instead of copying them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dashattn/backend.h"

namespace dashattn {

struct DecoderConfig {
  int64_t batch = 1;
  int64_t h_q = 0, h_kv = 0, d = 0;
  DType dtype = DType::kBF16;
  int device_index = 0;             // which device of the backend's kind holds the caches (cuda:1 -> 1)
  MethodParams method;
  int64_t initial_capacity = 4096;  // tokens per sequence before the first growth
  // 0: contiguous K/V caches. > 0: K/V in page pools of page_size keys per page, a multiple of 64 and of
  // method.chunk_size (so that no chunk or 64-key tile straddles two pages).
  int64_t page_size = 0;
};

namespace detail {
class KvPagePool;
}

class Decoder {
 public:
  // summary_query: [h_kv, d] on the backend's device (undefined: zeros). Its data must outlive the decoder.
  Decoder(Backend& backend, const DecoderConfig& config, const TensorView& summary_query = {});
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Appends up to t new tokens to every sequence and computes their attention outputs.
  // q [b, t, h_q, d], k and v [b, t, h_kv, d], o [b, t, h_q, d]; lse (optional) [b, h_q, t]; routing (optional
  // outputs) as in ForwardParams for the t new queries, over the padded key length n_k of the step (the longest
  // sequence after it, at least t).
  // new_tokens (optional, HOST memory, `batch` counts in [0, t]): sequence i appends k[i, 0:new_tokens[i]] and
  // v[i, 0:new_tokens[i]] at its own length and its queries q[i, 0:new_tokens[i]] are attended at positions
  // lengths()[i] .. lengths()[i] + new_tokens[i] - 1; its rows past new_tokens[i] are padding (o = 0,
  // lse = -inf). Null: t for every sequence.
  void step(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
            const TensorView& lse = {}, const RoutingView& routing = {}, const int32_t* new_tokens = nullptr);

  // Ends sequence `seq`: its length becomes 0, so that a later step (with new_tokens) starts a new prompt in its
  // slot; the other sequences are untouched. A paged decoder returns the sequence's pages to its pool (a page that
  // a fork shares stays with the other holders). The caches keep their capacity.
  void reset(int64_t seq);
  // Makes sequence `dst` a copy of sequence `src`: its keys, values and summaries, and so its outputs in later steps
  // fed the same tokens; dst's own contents are dropped first (reset). A paged decoder shares src's full pages with
  // dst and copies only a partly filled last page; a contiguous decoder copies the rows. fork(i, i) changes
  // nothing. The copies run on `stream`, like a step's.
  void fork(int64_t src, int64_t dst);

  // The longest sequence's length (every sequence's while no step passed new_tokens).
  int64_t length() const;
  // Each sequence's length.
  const std::vector<int64_t>& lengths() const { return lengths_; }
  // Tokens per sequence before the caches grow (a paged decoder: before the summary cache grows).
  int64_t capacity() const { return capacity_; }
  // Complete chunks of the shortest sequence: the summaries valid for every sequence (a ragged step also passes
  // each sequence's own count, so Stage 0 summarizes only the chunks the step completes).
  int64_t summarized_chunks() const;
  // Views of the caches ([b, length, h_kv, d] and [b, summarized_chunks, h_kv, d]) on the backend's device; rows
  // of sequence i past lengths()[i] are unspecified.
  // A paged decoder's keys and values are no strided view: keys() / values() throw InvalidArgument there (read
  // key_pages() / value_pages() through block_table()).
  TensorView keys() const;
  TensorView values() const;
  TensorView summaries() const;

  // Paged mode (page_size > 0). The pools [num_pages, page_size, h_kv, d] and the block table (int32 [b, width]
  // on the backend's device, as of the last step, reset or fork; entries past a sequence's pages are never read).
  // Key j of sequence i is row j % page_size of page block_table[i, j / page_size]. On a contiguous decoder
  // num_pages() is 0 and the three views throw InvalidArgument.
  int64_t page_size() const { return config_.page_size; }
  int64_t num_pages() const;
  // Pages that no sequence holds (reused before the pools grow again); 0 on a contiguous decoder.
  int64_t free_pages() const;
  TensorView key_pages() const;
  TensorView value_pages() const;
  TensorView block_table() const;
  Backend& backend() const { return backend_; }
  void* stream = nullptr;

 private:
  void reserve(int64_t tokens);
  void reserve_workspace(size_t bytes);
  void check_sequence(const char* argument, int64_t seq) const;
  void empty_sequence(int64_t seq);  // reset() without the table upload
  void copy_sequence_rows(void* cache, int64_t cap_rows, int64_t src, int64_t dst, int64_t rows);
  void append_contiguous(const TensorView& k, const TensorView& v, const std::vector<int64_t>& counts);
  TensorView contiguous_cache(const std::string& name, void* data) const;
  void upload_seqlens(const std::vector<int64_t>& counts, const std::vector<int64_t>& ends);
  TensorView cache_view(void* data, int64_t rows, int64_t cap_rows) const;
  const detail::KvPagePool& pages(const char* accessor) const;

  Backend& backend_;
  DecoderConfig config_;
  TensorView summary_query_;
  void* k_ = nullptr;
  void* v_ = nullptr;
  void* s_ = nullptr;
  std::unique_ptr<detail::KvPagePool> pages_;  // null: contiguous K/V in k_ and v_
  std::vector<int64_t> lengths_;               // per sequence: length() and summarized_chunks() derive from it
  // A ragged step's seqlens_q, seqlens_k and summarized chunks per sequence (int32 [3, b]): the device copy
  // forward() reads, its host source.
  void* seqlens_ = nullptr;
  std::vector<int32_t> host_seqlens_;
  // forward()'s workspace, kept across steps and grown geometrically: without it every step allocated its
  // workspace and freed it again, which then waited for the step to finish (a host synchronization per step).
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int64_t capacity_ = 0;
};

}  // namespace dashattn
