// The paged K/V cache of a Decoder (DecoderConfig::page_size > 0).
//
// A K pool and a V pool [num_pages, P, h_kv, d] on the backend's device, a free list of pages, and an int32 block
// table [batch, width]: a host mirror (which decides where appended rows go) and a device copy (which forward()
// reads). A sequence takes a fresh page when its length crosses a page boundary; pages are handed out one table
// column at a time across the batch, so a sequence's pages are interleaved with the others'; a sequence only
// takes the pages its own length needs. Sequences may share pages (a fork shares its source's full pages): each
// page counts its holders and returns to the free list when the last one releases it. A shared page is never
// written again, since appends only write a sequence's partly filled last page, which a fork copies.
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

  // Gives sequence i pages for its first tokens[i] keys and makes the table wide enough for a padded batch of
  // `padded` keys per sequence (forward() reads ceil(padded / page_size) columns whatever a sequence's length),
  // growing the pools and the table as needed.
  void reserve(const std::vector<int64_t>& tokens, int64_t padded, void* stream);
  // Copies the rows of keys [from[i], from[i] + counts[i]) of each sequence i from rows [0, counts[i]) of k and v
  // ([b, t, h_kv, d], dense per sequence) into its pages; a sequence's rows may straddle a page boundary. Needs
  // reserve() of from[i] + counts[i] keys.
  void append(const TensorView& k, const TensorView& v, const std::vector<int64_t>& from,
              const std::vector<int64_t>& counts, void* stream);
  // Returns sequence i's pages (its table row's leading entries) to the pool: each page goes back to the free list
  // once no sequence holds it. The sequence then holds none.
  void release(int64_t seq);
  // Gives sequence dst, which holds no pages, the first `keys` keys of sequence src: the pages those keys fill are
  // shared (no copy), and a partly filled last page is copied into a fresh page of dst's own.
  void share_prefix(int64_t src, int64_t dst, int64_t keys, void* stream);
  // Copies the host table to the device if it changed since the last upload.
  void upload_table(void* stream);
  // Points p's k, v and block table at the pools, for a padded batch of n_k keys per sequence (the caller sets
  // seqlens_k when the sequences' lengths differ).
  void describe(ForwardParams* p, int64_t n_k) const;

  int64_t num_pages() const { return num_pages_; }
  // Pages on the free list (held by no sequence).
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  TensorView key_pages() const { return pool_view(k_); }
  TensorView value_pages() const { return pool_view(v_); }
  TensorView table() const;

 private:
  TensorView pool_view(void* data) const;
  int32_t take_page(void* stream);
  void grow_pool(int64_t pages, void* stream);
  void widen_table(int64_t width, void* stream);
  // The regions that copy rows [0, steps) of sequence seq of src to its keys [from, from + steps) in `pool`.
  void add_row_regions(void* pool, const TensorView& src, int64_t seq, int64_t from, int64_t steps,
                       std::vector<CopyRegion>* regions) const;

  Backend& backend_;
  DecoderConfig config_;
  int64_t row_bytes_ = 0;    // one key of one sequence: h_kv * d elements
  int64_t num_pages_ = 0;
  void* k_ = nullptr;
  void* v_ = nullptr;
  std::deque<int32_t> free_;           // pages no sequence holds
  std::vector<int32_t> holders_;       // per page: the sequences whose table row lists it
  std::vector<int64_t> owned_;         // pages each sequence holds (its table row's leading entries)
  int64_t width_ = 0;                  // table columns
  std::vector<int32_t> host_table_;    // [batch, width]
  void* device_table_ = nullptr;
  bool table_dirty_ = true;
};

}  // namespace dashattn::detail
