// The float64 reference checked against itself and against hand-built cases: Proposition 1 (the bias form and
// the paper's KL-prior form agree), γ = 0 with no prior is dense causal attention, the routing structure, ties.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "reference/reference.h"

using namespace dashattn;

namespace {

ref::Sequence random_sequence(int64_t n_q, int64_t n_k, int64_t h_q, int64_t h_kv, int64_t d, uint64_t seed,
                              DType dtype = DType::kF32) {
  ref::ProblemSpec spec;
  spec.n_q = n_q;
  spec.n_k = n_k;
  spec.h_q = h_q;
  spec.h_kv = h_kv;
  spec.d = d;
  spec.dtype = dtype;
  spec.seed = seed;
  return ref::make_problem(spec).sequence(0);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

int popcount_row(const uint32_t* row, int64_t words) {
  int n = 0;
  for (int64_t w = 0; w < words; ++w) n += __builtin_popcount(row[w]);
  return n;
}

}  // namespace

TEST_CASE("Proposition 1: the bias form equals the KL-prior form g_sigma with sigmoid lambda") {
  for (double sigma : {1e8, 1e6, 10.0, 1.0, 0.3}) {
    for (double gamma : {0.0, 4.0, 40.0}) {
      for (int64_t C : {16, 32}) {
        const ref::Sequence s = random_sequence(/*n_q=*/150, /*n_k=*/200, 4, 2, 64, 11);
        ref::Method m;
        m.chunk = C;
        m.gamma = gamma;
        m.sigma = sigma;
        m.prior = PriorMode::kEstimateDiagonal;
        const ref::Result res = ref::forward(s, m);
        const ref::Attention kl = ref::attend_kl_prior(s, res.routing, m);
        INFO("sigma " << sigma << " gamma " << gamma << " C " << C);
        CHECK(max_abs_diff(res.attention.o, kl.o) <= 1e-12);
      }
    }
  }
}

TEST_CASE("the prior shifts the output only through sigma") {
  // With a small σ the estimate_diagonal output differs from the mask-only output; with σ = 1e8 it does not.
  const ref::Sequence s = random_sequence(128, 128, 2, 1, 64, 5);
  ref::Method m;
  m.chunk = 16;
  m.gamma = 8.0;
  m.prior = PriorMode::kNone;
  const ref::Result none = ref::forward(s, m);
  m.prior = PriorMode::kEstimateDiagonal;
  m.sigma = 1e8;
  const ref::Attention weak = ref::attend(s, none.routing, m);
  m.sigma = 0.5;
  const ref::Attention strong = ref::attend(s, none.routing, m);
  CHECK(max_abs_diff(weak.o, none.attention.o) <= 1e-6);
  CHECK(max_abs_diff(strong.o, none.attention.o) > 1e-3);
}

TEST_CASE("gamma 0 routes every routable chunk; with no prior that is dense causal attention") {
  for (int64_t n_q : {1, 3, 130}) {
    const ref::Sequence s = random_sequence(n_q, 130, 8, 2, 64, 9);
    ref::Method m;
    m.chunk = 32;
    m.gamma = 0.0;
    m.prior = PriorMode::kNone;
    const ref::Result res = ref::forward(s, m);
    for (int64_t i = 0; i < s.n_q; ++i)
      for (int64_t r = 0; r < s.h_kv; ++r) CHECK(res.routing.active[r * s.n_q + i] == res.routing.diagonal[i] + 1);
    const ref::Attention dense = ref::dense_causal(s, m.resolved_scale(s.d));
    CHECK(max_abs_diff(res.attention.o, dense.o) <= 1e-12);
    CHECK(max_abs_diff(res.attention.lse, dense.lse) <= 1e-12);
  }
}

TEST_CASE("routing structure: diagonal bit, no bit past it, counts, weights, mu") {
  for (double alpha : {1.5, 2.0, 1.3}) {
    const ref::Sequence s = random_sequence(200, 200, 8, 2, 64, 21);
    ref::Method m;
    m.chunk = 16;
    m.alpha = alpha;
    m.gamma = 30.0;
    const ref::Result res = ref::forward(s, m);
    const ref::Routing& rt = res.routing;
    int64_t routed_total = 0, routable_total = 0;
    for (int64_t i = 0; i < s.n_q; ++i) {
      const int64_t ci = rt.diagonal[i];
      CHECK(ci == i / 16);
      for (int64_t h = 0; h < s.h_q && ci > 0; ++h) {
        std::vector<double> x(rt.x.begin() + (i * s.h_q + h) * rt.num_complete,
                              rt.x.begin() + (i * s.h_q + h) * rt.num_complete + ci);
        CHECK(std::fabs(ref::entmax_weight_sum(x, rt.tau[i * s.h_q + h], alpha) - 1.0) <= 1e-9);
      }
      for (int64_t r = 0; r < s.h_kv; ++r) {
        const uint32_t* row = rt.mask_row(r, i);
        CHECK(((row[ci / 32] >> (ci % 32)) & 1u) == 1u);
        for (int64_t c = ci + 1; c < rt.words * 32; ++c) CHECK(((row[c / 32] >> (c % 32)) & 1u) == 0u);
        CHECK(popcount_row(row, rt.words) == rt.active[r * s.n_q + i]);
        double sum_w = 0, sum_log = 0;
        int routed = 0;
        for (int64_t c = 0; c < ci; ++c) {
          sum_w += rt.w(i, r, c);
          if (rt.routed(i, r, c)) {
            ++routed;
            sum_log += std::log(rt.w(i, r, c));
          }
        }
        if (ci > 0) CHECK(sum_w == doctest::Approx(1.0).epsilon(1e-9));
        CHECK(rt.mu[i * s.h_kv + r] == doctest::Approx(routed ? sum_log / routed : 0.0));
        routed_total += routed;
        routable_total += ci;
      }
    }
    INFO("alpha " << alpha);
    CHECK(routed_total < routable_total);  // γ = 30 makes routing sparse
    CHECK(routed_total > 0);
  }
}

TEST_CASE("summaries: a zero summary query is mean pooling, rounded to the key dtype") {
  const ref::Sequence s = random_sequence(64, 100, 2, 2, 64, 4, DType::kBF16);
  ref::Sequence pooled = s;
  pooled.summary_query.assign(pooled.summary_query.size(), 0.0);
  ref::Method m;
  m.chunk = 32;
  const std::vector<double> sm = ref::summarize(pooled, m);
  REQUIRE(sm.size() == size_t(3 * 2 * 64));
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t e = 0; e < 64; ++e) {
        double mean = 0;
        for (int64_t t = 0; t < 32; ++t) mean += s.k_row(c * 32 + t, r)[e];
        mean /= 32;
        const double got = sm[(c * 2 + r) * 64 + e];
        CHECK(got == round_to_dtype(static_cast<float>(mean), DType::kBF16));
      }
}

TEST_CASE("an exact tie is reported and a query with no routable chunk routes nothing") {
  // Sparsemax of (1, 0) has τ = 0: chunk 1 sits exactly on the threshold.
  const int64_t C = 16, d = 64, n = 3 * C;
  std::vector<float> q(n * d, 0.0f), k(n * d, 0.0f), v(n * d, 0.5f);
  for (int64_t t = 0; t < C; ++t) k[t * d + 0] = 1.0f;  // chunk 0: every key e0, chunk 1 and 2: zeros
  q[(n - 1) * d + 0] = 8.0f;                             // ⟨q, e0⟩/sqrt(64) = 1
  const ref::Sequence s = ref::make_sequence(n, n, 1, 1, d, q.data(), k.data(), v.data(), nullptr, DType::kF32);
  ref::Method m;
  m.chunk = C;
  m.alpha = 2.0;
  m.gamma = 1.0;
  const ref::Result res = ref::forward(s, m);
  const ref::Routing& rt = res.routing;
  CHECK(rt.tau[n - 1] == doctest::Approx(0.0));
  CHECK(rt.group_tie(n - 1, 0, 1));
  CHECK_FALSE(rt.group_tie(n - 1, 0, 0));
  // Queries of chunk 0 have c_i = 0: only the diagonal bit, no threshold.
  for (int64_t i = 0; i < C; ++i) {
    CHECK(rt.active[i] == 1);
    CHECK(rt.mask_row(0, i)[0] == 1u);
    CHECK(std::isnan(rt.tau[i]));
    CHECK(rt.mu[i] == 0.0);
  }
  // The output of a first-chunk query is causal softmax over its own chunk: v is constant, so o = 0.5.
  CHECK(res.attention.o[0] == doctest::Approx(0.5));
}

TEST_CASE("same-precision naive stays within its precision of float64") {
  const ref::Sequence s = random_sequence(100, 100, 4, 1, 64, 8, DType::kBF16);
  ref::Method m;
  m.chunk = 16;
  m.gamma = 10.0;
  const ref::Result res = ref::forward(s, m);
  const ref::Attention bf = ref::attend_same_precision(s, res.routing, m, DType::kBF16, DType::kBF16);
  const ref::Attention f32 = ref::attend_same_precision(s, res.routing, m, DType::kF32, DType::kF32);
  const double e_bf = max_abs_diff(bf.o, res.attention.o), e_f32 = max_abs_diff(f32.o, res.attention.o);
  MESSAGE("naive error bf16 " << e_bf << ", f32 " << e_f32);
  CHECK(e_bf <= 2e-2);
  CHECK(e_bf > 0);
  CHECK(e_f32 <= 1e-5);
  CHECK(max_abs_diff(bf.lse, res.attention.lse) <= 1e-4);
  const ref::ToleranceCheck self = ref::check_tolerance(bf.o, res.attention.o, bf.o, ref::default_atol(DType::kBF16));
  CHECK(self.pass());
  // A result twice as bad plus more does not pass.
  std::vector<double> worse = bf.o;
  for (size_t i = 0; i < worse.size(); ++i) worse[i] = res.attention.o[i] + 3.0 * (bf.o[i] - res.attention.o[i]) + 1e-3;
  CHECK_FALSE(ref::check_tolerance(worse, res.attention.o, bf.o, ref::default_atol(DType::kBF16)).pass());
}

TEST_CASE("layouts and varlen packing read the same sequence") {
  ref::ProblemSpec spec;
  spec.batch = 2;
  spec.n_q = 40;
  spec.n_k = 70;
  spec.h_q = 4;
  spec.h_kv = 2;
  spec.d = 64;
  spec.dtype = DType::kF16;
  spec.seed = 77;
  const ref::Problem a = ref::make_problem(spec);
  ref::ProblemSpec spec_b = spec;
  spec_b.layout = ref::Layout::kBHND;
  const ref::Problem b = ref::make_problem(spec_b);
  // Same seed, same element order of generation but different storage: compare through the views.
  const ref::Sequence sa = a.sequence(1);
  ref::Sequence sb;
  {
    // Re-read a's BNHD buffer element by element into a BHND problem to check the strided reader.
    ref::HostTensor qt = ref::make_host_tensor_bhnd(DType::kF16, 2, 40, 4, 64);
    for (int64_t bi = 0; bi < 2; ++bi)
      for (int64_t i = 0; i < 40; ++i)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t e = 0; e < 64; ++e)
            store_from_float(static_cast<unsigned char*>(qt.view.data) + qt.view.offset(bi, i, h, e) * 2, DType::kF16,
                             static_cast<float>(ref::load_element(a.q.view, bi, i, h, e)));
    sb = ref::load_sequence(qt.view, a.k.view, a.v.view, a.summary_query.view, a.span(1));
  }
  CHECK(sa.q == sb.q);
  CHECK(b.q.view.stride[1] == 64);  // [b, h, n, d] storage: consecutive tokens are d apart
  CHECK(b.q.view.stride[2] == 40 * 64);

  ref::ProblemSpec vs = spec;
  vs.varlen_q = {3, 40};
  vs.varlen_k = {20, 70};
  const ref::Problem v = ref::make_problem(vs);
  CHECK(v.num_sequences() == 2);
  CHECK(v.cu_seqlens_q == std::vector<int32_t>{0, 3, 43});
  CHECK(v.q.view.rank == 3);
  const ref::Span sp = v.span(1);
  CHECK(sp.q_begin == 3);
  CHECK(sp.k_begin == 20);
  const ref::Sequence s1 = v.sequence(1);
  CHECK(s1.n_q == 40);
  CHECK(s1.q[0] == ref::load_element(v.q.view, 0, 3, 0, 0));
}
