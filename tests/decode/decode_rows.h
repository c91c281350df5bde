// Step inputs of the decode tests: a run of rows cut out of a whole problem's padded tensors.
#pragma once

#include <cstdint>

#include "reference/reference.h"

namespace dashattn::decode_test {

// Rows [begin, begin + count) of a padded [b, n, h, d] host tensor as a contiguous [b, count, h, d] tensor.
ref::HostTensor slice_rows(const ref::HostTensor& t, int64_t begin, int64_t count);

}  // namespace dashattn::decode_test
