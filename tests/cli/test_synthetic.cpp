// The synthetic problem generator, and the float64 reference behind `dashattn verify`.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "dashattn/dashattn.h"
#include "dashattn/synthetic.h"
#include "verify_reference.h"

namespace synthetic = dashattn::synthetic;

namespace {

synthetic::Config small_config(uint64_t seed) {
  synthetic::Config c;
  c.n = 512;
  c.h_q = 4;
  c.h_kv = 2;
  c.d = 64;
  c.num_needles = 3;
  c.needle_queries = 16;
  c.seed = seed;
  return c;
}

double dot(const float* a, const std::vector<float>& b, int64_t d) {
  double s = 0;
  for (int64_t e = 0; e < d; ++e) s += static_cast<double>(a[e]) * b[static_cast<size_t>(e)];
  return s;
}

}  // namespace

TEST_CASE("a seed gives the same problem, another seed a different one") {
  const synthetic::Problem a = synthetic::generate(small_config(3));
  const synthetic::Problem b = synthetic::generate(small_config(3));
  const synthetic::Problem c = synthetic::generate(small_config(4));
  CHECK(a.q == b.q);
  CHECK(a.k == b.k);
  CHECK(a.v == b.v);
  CHECK(a.summary_query == b.summary_query);
  CHECK(a.q != c.q);
  CHECK(a.q.size() == static_cast<size_t>(512 * 4 * 64));
  CHECK(a.k.size() == static_cast<size_t>(512 * 2 * 64));
  CHECK(a.summary_query.size() == static_cast<size_t>(2 * 64));
}

TEST_CASE("needles sit in distinct routable chunks before their query windows") {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    synthetic::Config cfg = small_config(seed);
    cfg.batch = 2;
    const synthetic::Problem p = synthetic::generate(cfg);
    REQUIRE(p.needles.size() == 6);
    for (const auto& nd : p.needles) {
      CHECK(nd.query_end - nd.query_begin == 16);
      CHECK(nd.query_begin >= (nd.chunk + 1) * cfg.chunk);  // routable from every query of the window
      CHECK(nd.query_end <= cfg.n);
    }
    for (size_t i = 1; i < 3; ++i) CHECK(p.needles[i].chunk > p.needles[i - 1].chunk);
  }
}

TEST_CASE("needle queries score their needle chunk far above the others") {
  const synthetic::Config cfg = small_config(11);
  const synthetic::Problem p = synthetic::generate(cfg);
  const int64_t d = cfg.d, C = cfg.chunk;
  for (const auto& nd : p.needles) {
    for (int64_t r = 0; r < cfg.h_kv; ++r) {
      // Mean key of each chunk (what Stage 0 nearly computes with a small summary query).
      std::vector<std::vector<float>> means(static_cast<size_t>(cfg.n / C), std::vector<float>(static_cast<size_t>(d)));
      for (int64_t j = 0; j < cfg.n; ++j) {
        for (int64_t e = 0; e < d; ++e) {
          means[static_cast<size_t>(j / C)][static_cast<size_t>(e)] += p.k[static_cast<size_t>((j * cfg.h_kv + r) * d + e)] / C;
        }
      }
      const int64_t i = nd.query_begin;
      const float* q = &p.q[static_cast<size_t>((i * cfg.h_q + r * (cfg.h_q / cfg.h_kv)) * d)];
      const double needle = dot(q, means[static_cast<size_t>(nd.chunk)], d) / std::sqrt(d);
      double best_other = -1e30;
      for (int64_t c = 0; c < i / C; ++c) {
        // A query inside two overlapping windows answers both needles: only plain chunks must lose.
        bool other_needle = false;
        for (const auto& o : p.needles) other_needle |= o.chunk == c && i >= o.query_begin && i < o.query_end;
        if (c != nd.chunk && !other_needle) {
          best_other = std::max(best_other, dot(q, means[static_cast<size_t>(c)], d) / std::sqrt(d));
        }
      }
      CHECK(needle > best_other);
    }
  }
}

TEST_CASE("bad configs are rejected naming the field") {
  synthetic::Config c = small_config(0);
  c.h_q = 3;
  CHECK_THROWS_WITH_AS(synthetic::generate(c), doctest::Contains("h_q"), dashattn::InvalidArgument);
  c = small_config(0);
  c.num_needles = 40;
  CHECK_THROWS_WITH_AS(synthetic::generate(c), doctest::Contains("num_needles"), dashattn::InvalidArgument);
  c = small_config(0);
  c.d = 0;
  CHECK_THROWS_AS(synthetic::generate(c), dashattn::InvalidArgument);
}

TEST_CASE("convert rounds like the library's scalar conversions") {
  const std::vector<float> v = {1.0f, 3.14159265f, -2.5e-3f, 65504.0f, 1e-8f};
  const std::vector<uint8_t> bf = synthetic::convert(v, dashattn::DType::kBF16);
  const std::vector<uint8_t> hf = synthetic::convert(v, dashattn::DType::kF16);
  REQUIRE(bf.size() == 10);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t b, h;
    std::memcpy(&b, &bf[2 * i], 2);
    std::memcpy(&h, &hf[2 * i], 2);
    CHECK(b == dashattn::float_to_bf16(v[i]));
    CHECK(h == dashattn::float_to_f16(v[i]));
  }
  CHECK_THROWS_AS(synthetic::convert(v, dashattn::DType::kI32), dashattn::InvalidArgument);
}

TEST_CASE("the sort-based entmax threshold matches the library solver and normalizes") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 2.0);
  for (double alpha : {1.5, 2.0, 1.3, 1.7, 3.0}) {
    for (int trial = 0; trial < 50; ++trial) {
      const int n = 1 + trial % 37;
      std::vector<float> xf(static_cast<size_t>(n));
      for (float& x : xf) x = static_cast<float>(normal(rng));
      const std::vector<double> x(xf.begin(), xf.end());
      const double tau = dashattn::cli::reference::entmax_threshold_sorted(x, alpha);
      double sum = 0;
      for (double v : x) sum += v > tau ? std::pow(v - tau, 1.0 / (alpha - 1.0)) : 0.0;
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-9));
      const dashattn::EntmaxThreshold lib = dashattn::entmax_threshold(xf.data(), n, alpha);
      CHECK(tau == doctest::Approx(lib.tau).epsilon(1e-7));
    }
  }
}

TEST_CASE("the float64 reference Stage 2 with prior none and a full mask is dense causal attention") {
  dashattn::cli::reference::Problem p;
  p.batch = 1;
  p.n_q = p.n_k = 40;
  p.h_q = 2;
  p.h_kv = 1;
  p.d = 8;
  p.method.chunk_size = 8;
  p.method.prior = dashattn::PriorMode::kNone;
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal;
  for (auto* t : {&p.q, &p.k, &p.v}) {
    t->resize(static_cast<size_t>(40 * (t == &p.q ? 2 : 1) * 8));
    for (double& x : *t) x = normal(rng);
  }
  p.summary_query.assign(8, 0.0);
  dashattn::cli::reference::Routing r =
      dashattn::cli::reference::route<double>(p, dashattn::cli::reference::summaries(p));
  for (uint32_t& w : r.mask) w = 0xffffffffu;  // every chunk routed (bits past the diagonal are ignored)
  const auto a = dashattn::cli::reference::attend<double>(p, r);
  for (int64_t i = 0; i < 40; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      double m = -1e300, denom = 0;
      std::vector<double> s(static_cast<size_t>(i + 1)), o(8, 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        double dotp = 0;
        for (int e = 0; e < 8; ++e) dotp += p.q[static_cast<size_t>((i * 2 + h) * 8 + e)] * p.k[static_cast<size_t>(j * 8 + e)];
        s[static_cast<size_t>(j)] = dotp / std::sqrt(8.0);
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j <= i; ++j) {
        const double w = std::exp(s[static_cast<size_t>(j)] - m);
        denom += w;
        for (int e = 0; e < 8; ++e) o[static_cast<size_t>(e)] += w * p.v[static_cast<size_t>(j * 8 + e)];
      }
      for (int e = 0; e < 8; ++e) {
        CHECK(a.o[static_cast<size_t>((i * 2 + h) * 8 + e)] == doctest::Approx(o[static_cast<size_t>(e)] / denom).epsilon(1e-12));
      }
      CHECK(a.lse[static_cast<size_t>(h * 40 + i)] == doctest::Approx(m + std::log(denom)).epsilon(1e-12));
    }
  }
}
