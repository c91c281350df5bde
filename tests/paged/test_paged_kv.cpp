// Paged K/V on the CPU backend: a batch whose keys and values live in a page pool behind a block table gives, bit
// for bit, what the same batch gives with contiguous K/V (o, lse, mask, tau, mu, active chunks, summaries), for
// the whole forward (prefill, and decode from a summary cache) and stage by stage. The pool (paged_pool.h) is
// shuffled, shares a prefix page between two sequences and is NaN wherever no sequence owns a row, so a read
// through a wrong translation cannot go unnoticed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "paged_pool.h"
#include "reference/backend_io.h"

using namespace dashattn;
using namespace dashattn::paged_test;

namespace {

struct Config {
  int64_t n = 0, h_q = 0, h_kv = 0, d = 0, page = 0;
  int chunk = 0;
  DType dtype = DType::kF32;
  PriorMode prior = PriorMode::kEstimateDiagonal;
  std::vector<int32_t> lengths;  // seqlens_k of the three sequences (the padded length is n)
};

// Chunk sizes 16/64/128 against page sizes 64/128/256, GQA groups 1 and 4, head dims 64 and 128, f32 and bf16,
// sequences shorter than a page, ending inside a page, on a page boundary and filling the padded length.
std::vector<Config> configs() {
  return {
      {300, 4, 4, 64, 64, 16, DType::kF32, PriorMode::kEstimateDiagonal, {300, 211, 97}},
      {420, 8, 2, 128, 128, 64, DType::kBF16, PriorMode::kEstimateDiagonal, {420, 130, 385}},
      {600, 8, 2, 64, 256, 128, DType::kBF16, PriorMode::kEstimateDiagonal, {600, 517, 256}},
      {333, 4, 1, 128, 256, 16, DType::kF32, PriorMode::kRaw, {333, 64, 300}},
      {257, 4, 4, 64, 64, 64, DType::kBF16, PriorMode::kNone, {200, 257, 63}},
      {400, 8, 2, 128, 128, 128, DType::kF32, PriorMode::kEstimateDiagonal, {400, 129, 399}},
  };
}

MethodParams method_of(const Config& c) {
  MethodParams m;
  m.chunk_size = c.chunk;
  m.gamma = 8.0f;  // sharp routing, so that queries drop chunks and the mask matters
  m.sigma = 1.0f;
  m.prior = c.prior;
  return m;
}

// Prefill (n_q = n_k, each sequence's queries as long as its keys) or decode (1 to 3 new queries per sequence).
ref::Problem make_problem(const Config& c, bool decode, uint64_t seed) {
  ref::ProblemSpec spec;
  spec.batch = 3;
  spec.n_k = c.n;
  spec.n_q = decode ? 3 : c.n;
  spec.h_q = c.h_q;
  spec.h_kv = c.h_kv;
  spec.d = c.d;
  spec.dtype = c.dtype;
  spec.seqlens_k = c.lengths;
  spec.seqlens_q = decode ? std::vector<int32_t>{1, 3, 2} : c.lengths;
  spec.seed = seed;
  ref::Problem pr = ref::make_problem(spec);
  share_prefix(pr, c.page);
  return pr;
}

std::string describe(const Config& c) {
  return "n " + std::to_string(c.n) + " h " + std::to_string(c.h_q) + "/" + std::to_string(c.h_kv) + " d " +
         std::to_string(c.d) + " C " + std::to_string(c.chunk) + " P " + std::to_string(c.page) + " " +
         dtype_name(c.dtype);
}

ForwardParams forward_params(const ref::Problem& pr, const MethodParams& m, Outputs& out) {
  ForwardParams p = ref::forward_inputs(pr, m);
  out.attach(&p);
  return p;
}

void check_outputs(const Outputs& paged, const Outputs& dense) {
  CHECK_FALSE(has_nan(paged.o));
  check_same_outputs(paged, dense);
}

// Stage 0 of the whole padded problem on contiguous keys: the summaries prefill computes.
ref::HostTensor prefill_summaries(Backend& be, const ref::Problem& pr, const MethodParams& m) {
  Outputs out(pr, m.chunk_size);
  SummarizeParams sp;
  sp.k = pr.k.view;
  sp.summary_query = pr.summary_query.view;
  sp.summaries = out.summaries.view;
  sp.batch = pr.layout();
  sp.method = m;
  summarize(be, sp);
  return out.summaries;
}

}  // namespace

TEST_CASE("paged forward equals contiguous K/V bit for bit: prefill") {
  Backend* be = cpu_backend();
  if (be == nullptr) {
    MESSAGE("no cpu backend in this build: skipped");
    return;
  }
  uint64_t seed = 11;
  for (const Config& c : configs()) {
    INFO(describe(c));
    const MethodParams m = method_of(c);
    const ref::Problem pr = make_problem(c, false, seed++);
    const PagePool pool = make_pool(pr, c.page, seed++, /*share=*/true);

    Outputs dense(pr, c.chunk), paged(pr, c.chunk);
    forward(*be, forward_params(pr, m, dense));
    ForwardParams p = forward_params(pr, m, paged);
    p.k = pool.k.view;
    p.v = pool.v.view;
    p.batch = pool.layout(pr);
    forward(*be, p);
    check_outputs(paged, dense);
  }
}

TEST_CASE("paged forward equals contiguous K/V bit for bit: decode from a summary cache") {
  Backend* be = cpu_backend();
  if (be == nullptr) {
    MESSAGE("no cpu backend in this build: skipped");
    return;
  }
  uint64_t seed = 101;
  for (const Config& c : configs()) {
    INFO(describe(c));
    const MethodParams m = method_of(c);
    const ref::Problem pr = make_problem(c, true, seed++);
    const PagePool pool = make_pool(pr, c.page, seed++, /*share=*/true);
    const ref::HostTensor full = prefill_summaries(*be, pr, m);

    // The cache trusts the chunks before `valid`; the step summarizes the rest of each sequence's complete chunks
    // from the keys (through the pages when paged). The untrusted rows hold the sentinel, not the answer.
    const int64_t shortest = *std::min_element(c.lengths.begin(), c.lengths.end());
    const int64_t valid = std::max<int64_t>(0, (shortest - 3) / c.chunk - 1);
    INFO("summaries_valid " << valid);
    Outputs dense(pr, c.chunk), paged(pr, c.chunk);
    const TensorView& sv = full.view;
    const int64_t row_bytes = sv.shape[2] * sv.shape[3] * dtype_size(sv.dtype);
    for (Outputs* out : {&dense, &paged})
      for (int64_t s = 0; s < sv.shape[0]; ++s)
        std::memcpy(out->summaries.bytes.data() + sv.offset(s, 0, 0, 0) * dtype_size(sv.dtype),
                    full.bytes.data() + sv.offset(s, 0, 0, 0) * dtype_size(sv.dtype),
                    static_cast<size_t>(valid * row_bytes));

    ForwardParams pd = forward_params(pr, m, dense);
    pd.summaries_valid = valid;
    forward(*be, pd);
    ForwardParams pp = forward_params(pr, m, paged);
    pp.k = pool.k.view;
    pp.v = pool.v.view;
    pp.batch = pool.layout(pr);
    pp.summaries_valid = valid;
    forward(*be, pp);
    check_outputs(paged, dense);
    // The chunks the step completed from pages are bitwise the prefill's summaries of the same chunks.
    check_same_bytes(paged.summaries, full, "summaries against prefill");
  }
}

TEST_CASE("paged stages equal contiguous K/V bit for bit: summarize, route, attend") {
  Backend* be = cpu_backend();
  if (be == nullptr) {
    MESSAGE("no cpu backend in this build: skipped");
    return;
  }
  uint64_t seed = 201;
  for (const Config& c : configs()) {
    for (bool decode : {false, true}) {
      INFO(describe(c) << (decode ? " decode" : " prefill"));
      const MethodParams m = method_of(c);
      const ref::Problem pr = make_problem(c, decode, seed++);
      const PagePool pool = make_pool(pr, c.page, seed++, /*share=*/true, /*extra_pages=*/2, /*slack=*/3);
      Outputs dense(pr, c.chunk), paged(pr, c.chunk);

      // Stage 0 from the pool, whose page count says nothing of the batch: summaries.shape[0] does.
      for (int64_t first_chunk : {int64_t{0}, int64_t{1}}) {
        SummarizeParams sd;
        sd.k = pr.k.view;
        sd.summary_query = pr.summary_query.view;
        sd.summaries = dense.summaries.view;
        sd.first_chunk = first_chunk;
        sd.batch = pr.layout();
        sd.method = m;
        SummarizeParams sp = sd;
        sp.k = pool.k.view;
        sp.summaries = paged.summaries.view;
        sp.batch = pool.layout(pr);
        summarize(*be, sd);
        summarize(*be, sp);
        check_same_bytes(paged.summaries, dense.summaries, "summaries, first_chunk " + std::to_string(first_chunk));
      }

      // Stage 1 reads no keys; a paged batch layout routes as the padded one does.
      for (Outputs* out : {&dense, &paged}) {
        RouteParams rp;
        rp.q = pr.q.view;
        rp.summaries = out->summaries.view;
        rp.n_k = c.n;
        rp.batch = out == &paged ? pool.layout(pr) : pr.layout();
        rp.method = m;
        rp.routing = {out->mask.view, out->tau.view, out->mu.view, out->active.view};
        route(*be, rp);
      }

      // Stage 2 through the pages.
      for (Outputs* out : {&dense, &paged}) {
        AttendParams ap;
        ap.q = pr.q.view;
        ap.k = out == &paged ? pool.k.view : pr.k.view;
        ap.v = out == &paged ? pool.v.view : pr.v.view;
        ap.summaries = out->summaries.view;
        ap.routing = {out->mask.view, out->tau.view, out->mu.view, {}};
        ap.o = out->o.view;
        ap.lse = out->lse.view;
        ap.batch = out == &paged ? pool.layout(pr) : pr.layout();
        ap.method = m;
        attend(*be, ap);
      }
      check_outputs(paged, dense);
    }
  }
}

// A packed varlen batch whose keys live in a page pool (chunked prefill in a serving engine): cu_seqlens_k gives
// the lengths, the table the rows. Checked through the reference library's run_forward, which builds the same
// kind of pool (shuffled, NaN spare pages, a shared first page); a bad entry of a packed batch's table is named.
TEST_CASE("paged forward equals contiguous K/V bit for bit: packed varlen batches") {
  Backend* be = cpu_backend();
  if (be == nullptr) {
    MESSAGE("no cpu backend in this build: skipped");
    return;
  }
  struct Packed {
    std::vector<int32_t> q, k;
    int64_t h_q, h_kv, d, page;
    int chunk;
    DType dtype;
  };
  const Packed shapes[] = {{{300, 3, 130}, {300, 500, 130}, 8, 2, 64, 64, 16, DType::kF32},
                           {{1, 2, 70}, {257, 1000, 70}, 8, 2, 128, 128, 64, DType::kBF16},
                           {{200, 64, 1}, {400, 64, 700}, 4, 4, 64, 256, 128, DType::kF32}};
  uint64_t seed = 71;
  for (const Packed& c : shapes) {
    ref::ProblemSpec spec;
    spec.h_q = c.h_q;
    spec.h_kv = c.h_kv;
    spec.d = c.d;
    spec.dtype = c.dtype;
    spec.varlen_q = c.q;
    spec.varlen_k = c.k;
    spec.seed = seed++;
    ref::Problem pr = ref::make_problem(spec);
    share_prefix(pr, c.page);
    MethodParams m;
    m.chunk_size = c.chunk;
    m.gamma = 8.0f;
    INFO("d " << c.d << " C " << c.chunk << " P " << c.page << " " << dtype_name(c.dtype));
    ref::RunOptions contiguous;
    ref::RunOptions paged = contiguous;
    paged.page_size = c.page;
    paged.page_seed = seed++;
    paged.share_first_page = true;
    const ref::RunResult want = ref::run_forward(*be, pr, m, contiguous);
    const ref::RunResult got = ref::run_forward(*be, pr, m, paged);
    check_same_outputs(got.out, want.out);
    CHECK_FALSE(has_nan(got.out.o));
  }

  // A table entry outside the pool, in a packed batch: named before anything runs.
  ref::ProblemSpec spec;
  spec.h_q = 4;
  spec.h_kv = 2;
  spec.d = 64;
  spec.dtype = DType::kF32;
  spec.varlen_q = {100, 20};
  spec.varlen_k = {100, 200};
  const ref::Problem pr = ref::make_problem(spec);
  PagePool pool = make_pool(pr, 64, 5, /*share=*/false);
  pool.table[1 * pool.stride + 2] = -3;
  ref::HostTensor o = ref::make_host_tensor(DType::kF32, {120, 4, 64});
  std::memset(o.bytes.data(), 0x5a, o.bytes.size());
  const std::vector<unsigned char> before = o.bytes;
  ForwardParams p;
  p.q = pr.q.view;
  p.k = pool.k.view;
  p.v = pool.v.view;
  p.summary_query = pr.summary_query.view;
  p.o = o.view;
  p.batch = pool.layout(pr);
  p.method.chunk_size = 16;
  try {
    forward(*be, p);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("block_table[1, 2]") != std::string::npos);
  }
  CHECK(o.bytes == before);
}
