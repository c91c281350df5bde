// Decoder::reset and Decoder::fork on the CPU backend (continuous batching): a reset slot takes a new prompt, a fork
// continues its source's prefix, and both give bit for bit the outputs of a decoder that reached the same state
// without them, on contiguous and paged caches (tests/decode/decoder_lifecycle_check.h).
#include <doctest/doctest.h>

#include <string>

#include "dashattn/dashattn.h"
#include "decode/decoder_lifecycle_check.h"

using namespace dashattn;

TEST_CASE("reset and fork give the outputs of a decoder fed the same tokens, and pages are shared and reused (CPU)") {
  Backend* be = Registry::instance().find("cpu");
  REQUIRE(be != nullptr);
  if (!Registry::instance().probe(*be).available) {
    MESSAGE("the CPU backend is unavailable, skipped");
    return;
  }
  for (int64_t page : {0, 64, 128}) {
    for (int chunk : {32, 64}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        if (page > 0 && page % chunk != 0) continue;
        const std::string name = "page_size " + std::to_string(page) + " C " + std::to_string(chunk) + " " +
                                 dtype_name(dtype);
        INFO(name);
        decode_test::LifecycleCase c;
        c.dtype = dtype;
        c.chunk = chunk;
        c.page_size = page;
        decode_test::check_reset_and_fork(*be, c, 900 + page + chunk);
      }
    }
  }
}
