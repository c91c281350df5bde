// A paged Decoder (DecoderConfig::page_size > 0) on the CPU backend: every step's outputs, the summary cache and
// the cached keys and values bit for bit those of a contiguous decoder, for every page size and chunk size that
// fit together; and the page-size rule and the accessors a paged decoder refuses.
#include <doctest/doctest.h>

#include <string>

#include "dashattn/dashattn.h"
#include "decode/paged_decoder_check.h"

using namespace dashattn;
using decode_test::PagedDecoderCase;

namespace {

Backend& cpu_backend() {
  Backend* be = Registry::instance().find("cpu");
  REQUIRE(be != nullptr);
  return *be;
}

DecoderConfig small_config(int chunk, int64_t page_size) {
  DecoderConfig c;
  c.batch = 2;
  c.h_q = 4;
  c.h_kv = 1;
  c.d = 64;
  c.dtype = DType::kF32;
  c.method.chunk_size = chunk;
  c.initial_capacity = 64;
  c.page_size = page_size;
  return c;
}

// The InvalidArgument `make` throws: its argument, and every fragment in its message.
template <typename F>
void check_invalid(F&& make, const std::string& argument, std::initializer_list<const char*> fragments) {
  try {
    make();
    FAIL("accepted; expected an InvalidArgument naming " << argument);
  } catch (const InvalidArgument& e) {
    CHECK(e.argument() == argument);
    const std::string message = e.what();
    for (const char* f : fragments) {
      CHECK_MESSAGE(message.find(f) != std::string::npos, message << " lacks " << std::string(f));
    }
  }
}

}  // namespace

TEST_CASE("a paged decoder's steps equal a contiguous decoder's bit for bit (CPU)") {
  Backend& be = cpu_backend();
  if (!Registry::instance().probe(be).available) {
    MESSAGE("the CPU backend is unavailable, skipped");
    return;
  }
  int64_t runs = 0;
  for (int64_t page : {64, 128, 256}) {
    for (int chunk : {16, 32, 64, 128}) {
      if (page % chunk != 0) continue;
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (int64_t group : {1, 4}) {
          PagedDecoderCase c;
          c.h_kv = 2;
          c.h_q = 2 * group;
          c.dtype = dtype;
          c.chunk = chunk;
          c.page_size = page;
          // Five pages per sequence from one: the pools grow three times, the table widens to 2, 4 and 8 columns,
          // and the fourth page is taken without a widening (the table must be uploaded all the same).
          c.steps = decode_test::step_schedule(4 * page + page / 2 + 13);
          INFO("P " << page << " C " << chunk << " " << dtype_name(dtype) << " g " << group);
          decode_test::check_paged_against_contiguous(be, c, 1000 + page + chunk + group);
          ++runs;
        }
      }
    }
  }
  CHECK(runs == 44);
}

TEST_CASE("a paged decoder refuses a page size off the 64-key and chunk grid, and strided key views") {
  Backend& be = cpu_backend();
  // page_size: 0 or a multiple of 64 and of the chunk size, refused before anything is allocated.
  check_invalid([&] { Decoder d(be, small_config(16, 32)); }, "page_size", {"multiple of 64", "got 32"});
  check_invalid([&] { Decoder d(be, small_config(16, -64)); }, "page_size", {"multiple of 64", "got -64"});
  check_invalid([&] { Decoder d(be, small_config(128, 64)); }, "page_size",
                {"chunk_size = 128", "a multiple of 128", "got 64"});
  check_invalid([&] { Decoder d(be, small_config(128, 192)); }, "page_size", {"a multiple of 128", "got 192"});
  check_invalid([&] { Decoder d(be, small_config(32, 96)); }, "page_size", {"a multiple of 64", "got 96"});
  if (!Registry::instance().probe(be).available) return;
  CHECK_NOTHROW(Decoder(be, small_config(128, 384)));

  // keys() / values() of a paged decoder: no strided view exists; the message points at the pools and the table.
  Decoder paged(be, small_config(32, 128));
  CHECK(paged.page_size() == 128);
  CHECK(paged.num_pages() == 2);  // one page per sequence for initial_capacity = 64
  CHECK(paged.key_pages().shape[1] == 128);
  CHECK(paged.block_table().dtype == DType::kI32);
  check_invalid([&] { (void)paged.keys(); }, "keys", {"key_pages()", "block_table()", "page_size = 128"});
  check_invalid([&] { (void)paged.values(); }, "values", {"value_pages()", "block_table()"});

  // The page accessors of a contiguous decoder.
  Decoder contiguous(be, small_config(32, 0));
  CHECK(contiguous.num_pages() == 0);
  check_invalid([&] { (void)contiguous.key_pages(); }, "key_pages", {"page_size > 0"});
  check_invalid([&] { (void)contiguous.value_pages(); }, "value_pages", {"page_size > 0"});
  check_invalid([&] { (void)contiguous.block_table(); }, "block_table", {"page_size > 0"});
}
