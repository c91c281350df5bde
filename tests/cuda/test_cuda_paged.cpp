// Paged K/V on the CUDA backend: forward on a page pool (pages in a shuffled order, NaN spare pages, NaN pages
// behind every unused table entry, one page shared by two sequences) writes the same bits as forward on the
// contiguous tensors, in every output: o, lse, mask, τ, μ, active counts and the summaries, for padded and packed
// varlen batches. The shapes reach each place that addresses K/V: Stage 0's chunk reads, Stage 2's whole tiles by
// tensor copy (prefill, and the decode split's evict-first copies) and its last partial tile by cp.async, at every
// compiled head dim.
#include <doctest/doctest.h>

#include <string>

#include "cuda_test_support.h"
#include "reference/checks.h"

namespace dashattn::cuda_test {
namespace {

struct PagedCase {
  std::string name;
  ref::ProblemSpec spec;
  int chunk;
  int64_t page;
  PriorMode prior = PriorMode::kEstimateDiagonal;
  bool share = false;
};

void run_case(const PagedCase& c) {
  INFO(c.name);
  ref::Problem pr = ref::make_problem(c.spec);
  if (c.share) ref::share_prefix(pr, c.page);
  MethodParams m;
  m.chunk_size = c.chunk;
  m.prior = c.prior;
  ref::RunOptions contiguous;
  contiguous.out_dtype = c.spec.dtype;
  ref::RunOptions paged = contiguous;
  paged.page_size = c.page;
  paged.page_seed = c.spec.seed + 7;
  paged.share_first_page = c.share;
  const ref::RunResult want = ref::run_forward(cuda_backend(), pr, m, contiguous);
  const ref::RunResult got = ref::run_forward(cuda_backend(), pr, m, paged);
  REQUIRE_FALSE(want.unsupported);
  REQUIRE_FALSE(got.unsupported);
  for (const std::string& diff : ref::byte_differences(got.out, want.out)) FAIL_CHECK(diff);
  // And the paged run against the float64 reference, so that equal bits are also right ones.
  const ref::CheckReport rep = ref::check_forward(pr, m, got.out);
  INFO(rep.summary());
  for (const std::string& f : rep.failures) INFO(f);
  CHECK(rep.pass());
}

}  // namespace

TEST_CASE("cuda paged K/V: forward equals the contiguous run bit for bit") {
  std::vector<PagedCase> cases;
  for (int64_t d : {64, 128, 256}) {
    if (!compiled(d)) continue;
    const std::string at = " d=" + std::to_string(d);
    // Prefill, two sequences of other lengths (partial last tiles), the first page shared.
    PagedCase a{"prefill g=16 C=64 P=128" + at, spec(2, 1000, 1000, 32, 2, d, DType::kBF16, 8.0, 201), 64, 128};
    a.spec.seqlens_q = {1000, 700};
    a.spec.seqlens_k = {1000, 700};
    a.share = true;
    cases.push_back(a);
    // Small chunks in 64-key pages, fp16, raw prior.
    PagedCase b{"prefill g=4 C=16 P=64 f16 raw" + at, spec(2, 513, 513, 8, 2, d, DType::kF16, 6.0, 203), 16, 64,
                PriorMode::kRaw};
    b.spec.seqlens_q = {513, 130};
    b.spec.seqlens_k = {513, 300};
    cases.push_back(b);
    // Chunks of 128 in 256-key pages, one KV head per query head, no prior.
    cases.push_back({"prefill g=1 C=128 P=256 none" + at, spec(1, 700, 700, 2, 2, d, DType::kBF16, 6.0, 205), 128,
                     256, PriorMode::kNone});
    // Chunked prefill: fewer queries than keys.
    cases.push_back({"chunked prefill g=4 C=64 P=64" + at, spec(1, 200, 2100, 8, 2, d, DType::kBF16, 8.0, 207), 64, 64});
    // Decode, one new token: the split-KV kernel's evict-first tile copies; lengths down to one chunk.
    PagedCase e{"decode g=16 C=64 P=256" + at, spec(4, 1, 4000, 32, 2, d, DType::kBF16, 16.0, 209), 64, 256};
    e.spec.seqlens_k = {4000, 3001, 64, 1999};
    e.share = true;
    cases.push_back(e);
    // A packed varlen batch on pages (a serving engine's chunked prefill beside decode rows): cu_seqlens_k gives
    // the lengths, the table the rows; the first page shared.
    PagedCase f{"packed g=4 C=64 P=64" + at, spec(1, 0, 0, 8, 2, d, DType::kBF16, 8.0, 213), 64, 64};
    f.spec.varlen_q = {1, 300, 57};
    f.spec.varlen_k = {1000, 300, 600};
    f.share = true;
    cases.push_back(f);
    // Decode, three new tokens, g = 16 over one KV head, C = 32.
    cases.push_back({"decode t=3 g=16 C=32 P=64" + at, spec(2, 3, 1500, 16, 1, d, DType::kBF16, 16.0, 211), 32, 64});
  }
  REQUIRE_FALSE(cases.empty());
  for (const PagedCase& c : cases) run_case(c);
}

}  // namespace dashattn::cuda_test
