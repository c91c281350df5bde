// Input files with a batch layout for the tool's tests: a padded batch with per-sequence key lengths, a packed
// varlen batch, and the paged copy of either (its keys shuffled into a page pool).
#pragma once

#include <cstdint>
#include <string>

#include "dashattn/io/tensor_file.h"

namespace dashattn_test {

// Three sequences of 64 queries each over 320 padded keys, seqlens_k = {320, 130, 257}; f32, h_q 4, h_kv 2, d 64.
dashattn::io::TensorFile padded_batch();

// Three sequences of {40, 1, 70} queries over {300, 129, 70} keys, packed: q [111, 4, 64], k and v [499, 2, 64],
// cu_seqlens_q and cu_seqlens_k.
dashattn::io::TensorFile packed_batch();

// The same problem with k and v in page pools [pages, page_size, h_kv, d] and a block_table: each sequence's pages
// in an order shuffled from the seed, two spare pages, and NaN in every pool row no sequence uses (a gather that
// reads a wrong row turns the output into NaN). Table entries past a sequence's length are -1.
dashattn::io::TensorFile paged_copy(const dashattn::io::TensorFile& contiguous, int64_t page_size, uint64_t seed);

// f without the tensor called name.
dashattn::io::TensorFile without(const dashattn::io::TensorFile& f, const std::string& name);

// Writes f to the test's scratch directory and returns the path.
std::string write_scratch(const dashattn::io::TensorFile& f, const std::string& name);

}  // namespace dashattn_test
