// Chunk geometry: which chunk a key falls in, which chunks a query may route to, how wide a mask row is.
//
// All functions are header-inline and usable from device code so that every backend derives the same grid.
// Positions use 64-bit arithmetic: products such as n_q * h_kv * mask_words pass 2^31 on long contexts.
#pragma once

#include <cstdint>

#include "dashattn/dtype.h"  // DASHATTN_HD

namespace dashattn {

// Absolute position of query i of a sequence with n_q queries and n_k keys (bottom-right causal alignment).
DASHATTN_HD int64_t query_position(int64_t i, int64_t n_q, int64_t n_k) { return n_k - n_q + i; }

// Chunk of key position j.
DASHATTN_HD int64_t chunk_of(int64_t j, int64_t chunk) { return j / chunk; }

// Number of complete chunks (those with all C keys present): the chunks that get a summary.
DASHATTN_HD int64_t num_complete_chunks(int64_t n_k, int64_t chunk) { return n_k / chunk; }

// Number of chunks including a partial last one: the width of the chunk axis of a mask row.
DASHATTN_HD int64_t num_chunks_total(int64_t n_k, int64_t chunk) { return (n_k + chunk - 1) / chunk; }

// 32-bit words per mask row for n_k keys.
DASHATTN_HD int64_t mask_words(int64_t n_k, int64_t chunk) { return (num_chunks_total(n_k, chunk) + 31) / 32; }

// Diagonal chunk of the query at absolute position p; routable chunks are [0, diagonal_chunk).
DASHATTN_HD int64_t diagonal_chunk(int64_t p, int64_t chunk) { return p / chunk; }

// Number of keys of the diagonal branch D_i of the query at absolute position p: keys j with c(j) == c(p), j <= p.
DASHATTN_HD int64_t diagonal_keys(int64_t p, int64_t chunk) { return p % chunk + 1; }

// Causally visible keys of the query at absolute position p.
DASHATTN_HD int64_t visible_keys(int64_t p) { return p + 1; }

DASHATTN_HD bool mask_bit(const uint32_t* row, int64_t c) { return (row[c >> 5] >> (c & 31)) & 1u; }
DASHATTN_HD void set_mask_bit(uint32_t* row, int64_t c) { row[c >> 5] |= 1u << (c & 31); }

}  // namespace dashattn
