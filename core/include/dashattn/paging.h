// Where a sequence's key j lives in the K/V view: the same (axis-0 index, row) translation for every backend.
//
// A contiguous batch addresses key j of sequence s at (batch index, k_begin + j): batch index s and k_begin 0 for
// a padded batch, batch index 0 and k_begin cu_seqlens_k[s] for a packed one. A paged batch (BatchLayout's
// block_table) addresses it at (block_table[s · stride + j / P], j mod P) of the page pool [pages, P, h_kv, d].
// P is a multiple of the chunk size and of 64, so every chunk and every 64-key tile lies in one page and callers
// translate once per chunk or tile, not per key.
#pragma once

#include <cstdint>

#include "dashattn/dtype.h"  // DASHATTN_HD

namespace dashattn {

struct KeyPages {
  const int32_t* table = nullptr;  // null: contiguous K/V
  int64_t stride = 0;              // table entries per sequence
  int64_t page_size = 0;           // P = k.shape[1] of the pool
};

struct KeyRow {
  int64_t index = 0;  // axis 0 of the K/V view: batch index, or page
  int64_t row = 0;    // axis 1: key row
};

// The page rule: a positive multiple of the GPU's 64-key tile and of the chunk size, so that a chunk and a tile
// never straddle two pages. Validation, the Decoder and the tool's flags all ask this one question.
DASHATTN_HD bool is_valid_page_size(int64_t page_size, int64_t chunk_size) {
  return page_size > 0 && page_size % 64 == 0 && chunk_size > 0 && page_size % chunk_size == 0;
}

DASHATTN_HD KeyRow locate_key(const KeyPages& pages, int64_t seq, int64_t batch_index, int64_t k_begin, int64_t j) {
  if (pages.table == nullptr) return KeyRow{batch_index, k_begin + j};
  const int64_t page = pages.table[seq * pages.stride + j / pages.page_size];
  return KeyRow{page, j % pages.page_size};
}

}  // namespace dashattn
