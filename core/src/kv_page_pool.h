// The paged K/V cache of a Decoder (DecoderConfig::page_size > 0).
//
// A K pool and a V pool [num_pages, P, h_kv, d] on the backend's device, a free list of pages, and an int32 block
// table [batch, width]: a host mirror (which decides where appended rows go) and a device copy (which forward()
// reads). A sequence takes a fresh page when its length crosses a page boundary; pages are handed out one table
// column at a time across the batch, so a sequence's pages are interleaved with the others'. Pages are never
// returned: the decoder's sequences only grow.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "dashattn/decoder.h"

namespace dashattn::detail {

class KvPagePool {
 public:
  // Allocates pages for initial_capacity tokens per sequence (none taken yet) and a table as wide.
  KvPagePool(Backend& backend, const DecoderConfig& config);
  ~KvPagePool();
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  // Gives every sequence pages for its first `tokens` keys, growing the pools and the table as needed.
  void reserve(int64_t tokens, void* stream);
  // Copies the rows of keys [from, from + steps) of every sequence from k and v ([b, steps, h_kv, d], dense
  // per sequence) into their pages; a sequence's rows may straddle a page boundary. Needs reserve(from + steps).
  void append(const TensorView& k, const TensorView& v, int64_t from, int64_t steps, void* stream);
  // Copies the host table to the device if it changed since the last upload.
  void upload_table(void* stream);
  // Points p's k, v and block table at the pools, for a padded batch of sequences n_k keys long.
  void describe(ForwardParams* p, int64_t n_k) const;

  int64_t num_pages() const { return num_pages_; }
  TensorView key_pages() const { return pool_view(k_); }
  TensorView value_pages() const { return pool_view(v_); }
  TensorView table() const;

 private:
  TensorView pool_view(void* data) const;
  int32_t take_page(void* stream);
  void grow_pool(int64_t pages, void* stream);
  void widen_table(int64_t width, void* stream);
  void copy_rows(void* pool, const TensorView& src, int64_t seq, int64_t from, int64_t steps, void* stream);

  Backend& backend_;
  DecoderConfig config_;
  int64_t row_bytes_ = 0;    // one key of one sequence: h_kv * d elements
  int64_t num_pages_ = 0;
  void* k_ = nullptr;
  void* v_ = nullptr;
  std::deque<int32_t> free_;           // pages no sequence owns, lowest first
  std::vector<int64_t> owned_;         // pages each sequence owns (its table row's leading entries)
  int64_t width_ = 0;                  // table columns
  std::vector<int32_t> host_table_;    // [batch, width]
  void* device_table_ = nullptr;
  bool table_dirty_ = true;
};

}  // namespace dashattn::detail
