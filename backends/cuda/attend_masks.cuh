// Which keys of a 64-key tile a query row attends, and which tiles a group of query tokens needs.
//
// Stage 2 walks key tiles of 64 keys (independent of the chunk size C in {16, 32, 64, 128}): a tile is needed by
// a query when it holds keys of a routed chunk c < c_i or visible keys of the diagonal chunk c_i. The mask bit is
// ground truth for routed chunks; chunks at or past the diagonal are decided by position alone, so a stray bit
// can never open a future key.
#pragma once

#include <cstdint>

namespace dashattn::cuda {

constexpr int kTileKeys = 64;

// Bits lo..hi (inclusive) of a 64-bit word; empty when lo > hi.
__device__ __forceinline__ uint64_t bit_range64(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > 63) hi = 63;
  if (lo > hi) return 0ull;
  return (~0ull >> (63 - hi)) & (~0ull << lo);
}

// Low n bits of a 32-bit word (n clamped to [0, 32]).
__device__ __forceinline__ uint32_t low_bits32(int64_t n) {
  if (n <= 0) return 0u;
  if (n >= 32) return ~0u;
  return (1u << n) - 1u;
}

// One query row as the mask logic sees it.
struct RowRouting {
  const uint32_t* mask_row;  // words of this query's mask row (null in dense mode)
  int64_t pos;               // absolute key position p of the query; < 0 marks an invalid (padding) row
  int64_t diag;              // diagonal chunk c_i = p / C
};

// The mask word a row's last tile read. Tiles come in ascending order and a word covers 32 chunks, so a row
// loads a word once per 32 chunks instead of once per tile (that load sat on every tile's critical path).
struct MaskWordCache {
  int64_t index = -1;
  uint32_t bits = 0u;
  __device__ __forceinline__ uint32_t get(const uint32_t* row, int64_t w) {
    if (w != index) {
      bits = row[w];
      index = w;
    }
    return bits;
  }
};

// Attended keys of tile t for one row, as a 64-bit set (bit j = key 64t + j).
__device__ __forceinline__ uint64_t row_tile_keys(const RowRouting& r, MaskWordCache& words, int64_t tile, int chunk,
                                                  int log2_chunk, bool dense) {
  if (r.pos < 0) return 0ull;
  const int64_t k0 = tile * kTileKeys;
  if (dense) return bit_range64(0, r.pos - k0);
  const int64_t diag_lo = r.diag << log2_chunk;  // first key of the diagonal chunk
  if (chunk >= kTileKeys && k0 + kTileKeys <= diag_lo) {
    // Wholly before the diagonal chunk (most tiles): the chunk's mask bit alone, without the position ranges.
    const int64_t c = k0 >> log2_chunk;
    return ((words.get(r.mask_row, c >> 5) >> (c & 31)) & 1u) ? ~0ull : 0ull;
  }
  uint64_t keys = bit_range64(diag_lo - k0, r.pos - k0);
  if (chunk >= kTileKeys) {
    const int64_t c = k0 >> log2_chunk;
    if (c < r.diag && ((words.get(r.mask_row, c >> 5) >> (c & 31)) & 1u)) keys = ~0ull;
  } else {
    const int per_tile = kTileKeys >> log2_chunk;  // 2 or 4 chunks, all inside one mask word
    const int64_t c0 = k0 >> log2_chunk;
    const uint32_t word = words.get(r.mask_row, c0 >> 5) >> (c0 & 31);
    const uint64_t seg = (1ull << chunk) - 1ull;
    for (int q = 0; q < per_tile; ++q) {
      if (c0 + q < r.diag && ((word >> q) & 1u)) keys |= seg << (q * chunk);
    }
  }
  return keys;
}

// row_tile_word for C = 64 (a tile is a chunk) from the row's mask word w already loaded (raw; 0 past the row).
__device__ __forceinline__ uint32_t row_tile_word_c64(const RowRouting& r, int64_t w, uint32_t raw) {
  if (r.pos < 0) return 0u;
  const uint32_t causal = low_bits32(r.pos / kTileKeys + 1 - 32 * w);
  const uint32_t before_diag = low_bits32(r.diag - 32 * w);
  return (causal & ~before_diag) | (raw & before_diag);
}

// Bits of tiles 32w .. 32w+31 that row r needs.
__device__ __forceinline__ uint32_t row_tile_word(const RowRouting& r, int64_t w, int chunk, int log2_chunk,
                                                  int mask_words, bool dense) {
  if (r.pos < 0) return 0u;
  const int64_t last_tile = r.pos / kTileKeys;
  const uint32_t causal = low_bits32(last_tile + 1 - 32 * w);
  if (dense) return causal;
  // The tiles overlapping the diagonal chunk's visible keys [diag*C, p].
  const int64_t diag_first_tile = (r.diag << log2_chunk) / kTileKeys;
  uint32_t bits = causal & ~low_bits32(diag_first_tile - 32 * w);
  if (chunk == kTileKeys) {
    if (w < mask_words) bits |= r.mask_row[w] & low_bits32(r.diag - 32 * w);
    return bits;
  }
  if (chunk > kTileKeys) {
    // Tile t belongs to chunk t * 64 / C; a word of tiles spans 32 * 64 / C chunks.
    const int shift = log2_chunk - 6;
    for (int b = 0; b < 32; ++b) {
      const int64_t c = (32 * w + b) >> shift;
      if (c >= r.diag) break;
      if ((r.mask_row[c >> 5] >> (c & 31)) & 1u) bits |= 1u << b;
    }
    return bits;
  }
  // C < 64: tile t covers chunks [t * per, (t + 1) * per).
  const int per = kTileKeys >> log2_chunk;
  const int64_t c_first = 32 * w * per;
  if (c_first >= r.diag) return bits;
  for (int b = 0; b < 32; ++b) {
    const int64_t c0 = c_first + int64_t(b) * per;
    if (c0 >= r.diag) break;
    const uint32_t word = r.mask_row[c0 >> 5] >> (c0 & 31);
    const uint32_t below = low_bits32(r.diag - c0);
    if (word & low_bits32(per) & below) bits |= 1u << b;
  }
  return bits;
}

}  // namespace dashattn::cuda
