// Decoder::reset and Decoder::fork (continuous batching), checked against a twin decoder that reaches the same state
// without them. The same check runs on the CPU backend (tests/decode) and on the CUDA backend (tests/cuda).
#pragma once

#include <cstdint>

#include "dashattn/dashattn.h"

namespace dashattn::decode_test {

struct LifecycleCase {
  int64_t h_q = 4, h_kv = 2, d = 64;
  DType dtype = DType::kBF16;
  int chunk = 32;
  int64_t page_size = 0;          // 0: contiguous caches
  int64_t initial_capacity = 16;  // small: the caches grow during the run
};

// Two decoders of three sequences, A and B, take the same steps, except that:
//  - A's sequence 1 first holds a prompt, then is reset; B's sequence 1 stays empty until both take a new prompt;
//  - A's sequence 2 becomes a fork of sequence 0; B's sequence 2 is reset and then fed sequence 0's tokens;
//  - A's sequence 0, the fork's source, is reset while the fork still shares its pages, and takes a long new prompt
//    (which reuses the freed pages); B's sequence 0 is reset too and fed the same prompt.
// Sequence 0 stays the longest, so that both decoders run the same padded batches; after each reset or fork every
// step's outputs (o, lse, mask, tau, mu, active counts) must be the same bytes in A and B, and in a step that feeds
// a fork and its source the same tokens, their rows must be the same bytes. On a paged decoder the check also
// counts pages: a reset frees the sequence's own pages, a fork shares its source's full pages and copies only a
// partly filled last one, a reset source leaves the shared pages with the fork, and a new prompt reuses freed
// pages before the pools grow. Bad sequence indices are InvalidArgument naming the argument.
void check_reset_and_fork(Backend& backend, const LifecycleCase& c, uint64_t seed);

}  // namespace dashattn::decode_test
