// Test support for paged K/V: the reference library's page pool (reference/paged.h), and host output buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dashattn/dashattn.h"
#include "reference/checks.h"
#include "reference/paged.h"

namespace dashattn::paged_test {

using ref::make_pool;
using ref::PagePool;
using ref::share_prefix;

// Caller-owned outputs of a forward (every optional one), pre-filled with a sentinel byte so that two runs
// compare whole buffers, the parts neither writes included.
struct Outputs : ref::ForwardOutputs {
  Outputs(const ref::Problem& pr, int64_t chunk);
  void attach(ForwardParams* p);
};

// Byte equality (ref::byte_difference), with the first differing element's index in the failure message; of one
// output, or of every output of two runs.
void check_same_bytes(const ref::HostTensor& got, const ref::HostTensor& want, const std::string& what);
void check_same_outputs(const ref::ForwardOutputs& got, const ref::ForwardOutputs& want);
// Whether a float tensor (f32, f16 or bf16) holds a NaN.
bool has_nan(const ref::HostTensor& t);

// The CPU backend, or null in builds without it.
Backend* cpu_backend();

}  // namespace dashattn::paged_test
