// A paged Decoder (DecoderConfig::page_size > 0) against a contiguous one on the same backend, step by step. The
// same check runs on the CPU backend (tests/decode) and on the CUDA backend (tests/cuda).
#pragma once

#include <cstdint>
#include <vector>

#include "dashattn/dashattn.h"

namespace dashattn::decode_test {

struct PagedDecoderCase {
  int64_t batch = 3;
  int64_t h_q = 8, h_kv = 2, d = 64;
  DType dtype = DType::kBF16;
  int chunk = 64;
  int64_t page_size = 64;
  int64_t initial_capacity = 16;  // small: the pools, the table and the summary cache all grow several times
  std::vector<int64_t> steps;     // tokens per step
};

// Tokens per step for a run of `total` tokens: a short prefill, then single tokens, three-token steps and longer
// steps, so that steps start and end anywhere inside a page and some straddle a page boundary.
std::vector<int64_t> step_schedule(int64_t total);

// Runs a paged and a contiguous decoder over the same problem and CHECKs (doctest) that:
//  - every step's o, lse, mask, tau, mu and active counts are the same bytes;
//  - the summary caches and the keys and values (read through the paged decoder's table) are the same bytes;
//  - the pools and the table grew, every page belongs to one sequence, and the table is not contiguous;
//  - a step that fails in forward() (NaN keys and values, no output) before each step that takes a new page
//    commits nothing and leaves nothing behind that changes the retried step.
void check_paged_against_contiguous(Backend& backend, const PagedDecoderCase& c, uint64_t seed);

}  // namespace dashattn::decode_test
