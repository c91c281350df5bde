// The paged Decoder on the CUDA backend: every step's outputs, the summary cache and the cached keys and values
// bit for bit those of a contiguous decoder (the check of tests/decode/test_decode_paged.cpp, on a GPU).
#include <doctest/doctest.h>

#include <string>

#include "cuda_test_support.h"
#include "decode/paged_decoder_check.h"

namespace dashattn::cuda_test {

TEST_CASE("cuda paged decoder: steps equal a contiguous decoder's bit for bit") {
  struct Shape {
    int64_t page;
    int chunk;
    int64_t group;
  };
  int64_t runs = 0;
  for (int64_t d : {64, 128}) {
    if (!compiled(d)) continue;
    for (const Shape& s : {Shape{64, 16, 4}, Shape{128, 64, 1}, Shape{256, 128, 4}, Shape{256, 32, 16}}) {
      decode_test::PagedDecoderCase c;
      c.h_kv = 2;
      c.h_q = 2 * s.group;
      c.d = d;
      c.dtype = DType::kBF16;
      c.chunk = s.chunk;
      c.page_size = s.page;
      c.steps = decode_test::step_schedule(4 * s.page + s.page / 2 + 13);  // five pages per sequence
      INFO("d " << d << " P " << s.page << " C " << s.chunk << " g " << s.group);
      decode_test::check_paged_against_contiguous(cuda_backend(), c, 2000 + d + s.page + s.chunk);
      ++runs;
    }
  }
  REQUIRE(runs > 0);
}

}  // namespace dashattn::cuda_test
