// Step inputs of the decode tests: a run of rows cut out of a whole problem's padded tensors; and one decoder step
// with every output read back.
#pragma once

#include <cstdint>

#include "dashattn/dashattn.h"
#include "reference/checks.h"
#include "reference/reference.h"

namespace dashattn::decode_test {

// The decode tests' problem: b sequences of n tokens, with queries scaled so that routing scores spread over several
// units (sparse routing).
ref::ProblemSpec sparse_problem_spec(int64_t b, int64_t n, int64_t h_q, int64_t h_kv, int64_t d, DType dtype,
                                     uint64_t seed);

// The decode tests' decoder: chunk size `chunk`, gamma = 4 (with the queries above, a few chunks per row carry
// weight), the given page size (0: contiguous) and initial capacity.
DecoderConfig decoder_config(int64_t batch, int64_t h_q, int64_t h_kv, int64_t d, DType dtype, int chunk,
                             int64_t page_size, int64_t initial_capacity);

// Rows [begin, begin + count) of a padded [b, n, h, d] host tensor as a contiguous [b, count, h, d] tensor.
ref::HostTensor slice_rows(const ref::HostTensor& t, int64_t begin, int64_t count);

// One dec.step(q, k, v, ..., new_tokens) with caller-owned outputs for every result (o in q's dtype, masks of
// `words` words per row), each first filled with the byte `fill` (nonzero: rows a step leaves alone show), and
// the outputs on the host.
ref::ForwardOutputs step_outputs(Backend& be, Decoder& dec, const ref::DeviceTensor& q, const ref::DeviceTensor& k,
                                 const ref::DeviceTensor& v, int64_t words, const int32_t* new_tokens = nullptr,
                                 unsigned char fill = 0);

}  // namespace dashattn::decode_test
