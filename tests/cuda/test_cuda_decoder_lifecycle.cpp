// Decoder::reset and Decoder::fork on the CUDA backend: the twin-decoder check of
// tests/decode/test_decode_lifecycle.cpp on a GPU (a reset slot's new prompt, a fork and its source, a reset source
// whose freed pages are reused), every step's outputs bit for bit those of a decoder that reached the same state
// without reset or fork.
#include <doctest/doctest.h>

#include "cuda_test_support.h"
#include "decode/decoder_lifecycle_check.h"

namespace dashattn::cuda_test {

TEST_CASE("cuda decoder: reset and fork give the outputs of a decoder fed the same tokens") {
  struct Shape {
    int64_t page;
    int chunk;
    int64_t group;
  };
  int64_t runs = 0;
  for (int64_t d : {64, 128}) {
    if (!compiled(d)) continue;
    for (const Shape& s : {Shape{0, 32, 4}, Shape{64, 16, 2}, Shape{128, 64, 16}, Shape{256, 128, 1}}) {
      decode_test::LifecycleCase c;
      c.h_kv = 2;
      c.h_q = 2 * s.group;
      c.d = d;
      c.dtype = DType::kBF16;
      c.chunk = s.chunk;
      c.page_size = s.page;
      INFO("d " << d << " P " << s.page << " C " << s.chunk << " g " << s.group);
      decode_test::check_reset_and_fork(cuda_backend(), c, 3000 + d + s.page + s.chunk);
      ++runs;
    }
  }
  REQUIRE(runs > 0);
}

}  // namespace dashattn::cuda_test
