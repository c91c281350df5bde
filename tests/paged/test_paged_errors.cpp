// The paging rules: every bad block table, page size or batch layout throws InvalidArgument naming the argument,
// before any output is written.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "paged_pool.h"

using namespace dashattn;
using namespace dashattn::paged_test;

namespace {

// A small valid paged forward: 2 sequences of up to 128 keys in pages of 64, chunk size 16.
struct Fixture {
  ref::Problem pr;
  PagePool pool;
  Outputs out;
  ForwardParams p;

  explicit Fixture(int64_t page_size = 64) : pr(problem()), pool(make_pool(pr, page_size, 3, /*share=*/true)), out(pr, 16) {
    p.q = pr.q.view;
    p.k = pool.k.view;
    p.v = pool.v.view;
    p.summary_query = pr.summary_query.view;
    p.batch = pool.layout(pr);
    p.method.chunk_size = 16;
    out.attach(&p);
  }

  static ref::Problem problem() {
    ref::ProblemSpec spec;
    spec.batch = 2;
    spec.n_q = spec.n_k = 128;
    spec.h_q = 4;
    spec.h_kv = 2;
    spec.d = 64;
    spec.dtype = DType::kF32;
    spec.seqlens_q = spec.seqlens_k = {128, 70};
    ref::Problem pr = ref::make_problem(spec);
    share_prefix(pr, 64);
    return pr;
  }

  // Whether the outputs still hold their sentinel (nothing was written).
  bool untouched() const {
    const Outputs fresh(pr, 16);
    using Pair = std::pair<const ref::HostTensor*, const ref::HostTensor*>;
    for (const Pair& t : {Pair{&out.o, &fresh.o}, Pair{&out.lse, &fresh.lse}, Pair{&out.mask, &fresh.mask},
                          Pair{&out.summaries, &fresh.summaries}})
      if (t.first->bytes != t.second->bytes) return false;
    return true;
  }
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// f must throw InvalidArgument whose argument() starts with `argument` (and whose message names it).
void expect_invalid(const std::function<void()>& f, const std::string& argument) {
  try {
    f();
    FAIL("no error thrown; expected one about '" << argument << "'");
  } catch (const InvalidArgument& e) {
    INFO("message: " << std::string(e.what()));
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK_MESSAGE(starts_with(e.argument(), argument), "argument() is '" << e.argument() << "'");
    CHECK(std::string(e.what()).find(argument) != std::string::npos);
  } catch (const std::exception& e) {
    FAIL("wrong exception type: " << e.what());
  }
}

// A forward on the fixture after `mutate` must fail naming `argument` and write nothing.
void expect_invalid_forward(Backend& be, const std::function<void(Fixture&)>& mutate, const std::string& argument,
                            int64_t page_size = 64) {
  Fixture fx(page_size);
  mutate(fx);
  expect_invalid([&] { forward(be, fx.p); }, argument);
  CHECK_MESSAGE(fx.untouched(), "an output was written before the error");
}

}  // namespace

TEST_CASE("paged K/V: bad pages, tables and layouts name their argument") {
  Backend* be = cpu_backend();
  if (be == nullptr) {
    MESSAGE("no cpu backend in this build: skipped");
    return;
  }
  {
    Fixture fx;  // the valid fixture runs
    forward(*be, fx.p);
    CHECK_FALSE(fx.untouched());
    CHECK_FALSE(has_nan(fx.out.o));
  }
  SUBCASE("page size not a multiple of 64") {
    expect_invalid_forward(*be, [](Fixture&) {}, "k.shape[1]", 96);  // 96 is a multiple of C = 16, not of 64
  }
  SUBCASE("page size not a multiple of the chunk size") {
    expect_invalid_forward(*be, [](Fixture& fx) { fx.p.method.chunk_size = 128; }, "k.shape[1]");
  }
  SUBCASE("table stride narrower than max_seqlen_k / page size") {
    expect_invalid_forward(*be, [](Fixture& fx) { fx.p.batch.block_table_stride = 1; }, "block_table_stride");
  }
  SUBCASE("table entry outside the pool, read on the host") {
    expect_invalid_forward(
        *be, [](Fixture& fx) { fx.pool.table[1 * fx.pool.stride + 1] = static_cast<int32_t>(fx.pool.k.view.shape[0]); },
        "block_table[1, 1]");
    expect_invalid_forward(*be, [](Fixture& fx) { fx.pool.table[0] = -1; }, "block_table[0, 0]");
  }
  SUBCASE("max_seqlen_k below 1") {
    expect_invalid_forward(*be, [](Fixture& fx) { fx.p.batch.max_seqlen_k = 0; }, "max_seqlen_k");
  }
  SUBCASE("a sequence longer than max_seqlen_k") {
    expect_invalid_forward(*be, [](Fixture& fx) { fx.p.batch.max_seqlen_k = 100; }, "seqlens_k[0]");
  }
  SUBCASE("dense attention takes no block table") {
    Fixture fx;
    DenseParams d;
    d.q = fx.p.q;
    d.k = fx.pr.k.view;
    d.v = fx.pr.v.view;
    d.o = fx.p.o;
    d.batch = fx.p.batch;
    expect_invalid([&] { dense_attention(*be, d); }, "block_table");
    CHECK(fx.untouched());
  }
  SUBCASE("Stage 0 and Stage 2 check the table too") {
    Fixture fx;
    fx.pool.table[1 * fx.pool.stride + 1] = 1000;
    SummarizeParams sp;
    sp.k = fx.p.k;
    sp.summaries = fx.p.summaries;
    sp.batch = fx.p.batch;
    sp.method = fx.p.method;
    expect_invalid([&] { summarize(*be, sp); }, "block_table[1, 1]");
    sp.summaries = {};  // a paged Stage 0 counts its sequences on the summary cache, which it then needs
    expect_invalid([&] { summarize(*be, sp); }, "summaries");
    AttendParams ap;
    ap.q = fx.p.q;
    ap.k = fx.p.k;
    ap.v = fx.p.v;
    ap.o = fx.p.o;
    ap.summaries = fx.p.summaries;
    ap.routing = fx.p.routing;
    ap.batch = fx.p.batch;
    ap.method = fx.p.method;
    expect_invalid([&] { attend(*be, ap); }, "block_table[1, 1]");
    CHECK(fx.untouched());
  }
}
