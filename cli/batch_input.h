// The batch layout of an input file: the optional int32 tensors that give each sequence its length and, for a
// paged K/V cache, its pages.
//
//   seqlens_k     [b]              padded batch: key length of each sequence (the padded length is k's n)
//   cu_seqlens_q  [num_seqs + 1]   packed varlen batch: prefix sums of the query rows of q [total_q, h_q, d]
//   cu_seqlens_k  [num_seqs + 1]   packed varlen batch: prefix sums of the key counts
//   block_table   [sequences, w]   paged K/V: key j of sequence i is row j % P of page block_table[i, j / P] of
//                                  the pools k, v [pages, P, h_kv, d]; needs seqlens_k or cu_seqlens_k
//
// Only what the file format adds is checked here (dtypes, ranks, the table's rows and width, lengths present);
// the values themselves (page size, entries in range, monotone prefix sums) are the library's validation.
#pragma once

#include "dashattn/io/tensor_file.h"
#include "problem.h"
#include "tensor_input.h"

namespace dashattn::cli {

// p holds q, k and v already in [b, n, h, d] order; the result sizes the layout from the lengths.
HostBatch load_batch_layout(const io::TensorFile& file, const InputOptions& options, const HostProblem& p);

}  // namespace dashattn::cli
