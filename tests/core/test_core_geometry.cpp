// Chunk geometry, mask bits, the prior bias / group weight helpers and routing statistics, each against a
// brute-force count written from the definitions of semantics.md.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "dashattn/dashattn.h"

using namespace dashattn;

TEST_CASE("geometry helpers match brute-force definitions") {
  for (int64_t C : {4, 16, 32, 64, 128}) {
    for (int64_t n_k : {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 1000, 4097}) {
      int64_t complete = 0, total = 0;
      for (int64_t c = 0; c * C < n_k; ++c) {
        ++total;
        if ((c + 1) * C <= n_k) ++complete;  // all C keys present
      }
      INFO("C " << C << " n_k " << n_k);
      CHECK(num_complete_chunks(n_k, C) == complete);
      CHECK(num_chunks_total(n_k, C) == total);
      CHECK(mask_words(n_k, C) == (total + 31) / 32);
      for (int64_t n_q : {int64_t(1), std::min<int64_t>(3, n_k), n_k}) {
        for (int64_t i = 0; i < n_q; ++i) {
          const int64_t p = query_position(i, n_q, n_k);
          REQUIRE(p == n_k - n_q + i);  // bottom-right: the last query sees every key
          int64_t diag_keys = 0, visible = 0;
          for (int64_t j = 0; j <= p; ++j) {
            ++visible;
            if (chunk_of(j, C) == chunk_of(p, C)) ++diag_keys;
          }
          CHECK(diagonal_chunk(p, C) == chunk_of(p, C));
          CHECK(diagonal_keys(p, C) == diag_keys);
          CHECK(visible_keys(p) == visible);
          // Routable chunks [0, c_i) are always complete.
          CHECK(diagonal_chunk(p, C) <= num_complete_chunks(n_k, C));
        }
      }
    }
  }
  // 64-bit positions: products past 2^31 stay exact.
  CHECK(mask_words(int64_t(1) << 34, 16) == ((int64_t(1) << 30) + 31) / 32);
}

TEST_CASE("mask bits: bit c % 32 of word c / 32") {
  std::vector<uint32_t> row(4, 0u);
  for (int64_t c : {0, 5, 31, 32, 63, 64, 127}) set_mask_bit(row.data(), c);
  CHECK(row[0] == ((1u << 0) | (1u << 5) | (1u << 31)));
  CHECK(row[1] == ((1u << 0) | (1u << 31)));
  CHECK(row[2] == 1u);
  CHECK(row[3] == (1u << 31));
  for (int64_t c = 0; c < 128; ++c) {
    const bool want = c == 0 || c == 5 || c == 31 || c == 32 || c == 63 || c == 64 || c == 127;
    CHECK(mask_bit(row.data(), c) == want);
  }
}

TEST_CASE("prior bias of each mode") {
  const float log_w = std::log(0.125f), mu = -1.25f;
  CHECK(prior_bias(PriorMode::kEstimateDiagonal, log_w, mu, 1.0f / 4.0f) == doctest::Approx((log_w - mu) / 4.0));
  CHECK(prior_bias(PriorMode::kEstimateDiagonal, log_w, mu, 1e-8f) == doctest::Approx((log_w - mu) * 1e-8));
  CHECK(prior_bias(PriorMode::kRaw, log_w, mu, 0.5f) == log_w);
  CHECK(prior_bias(PriorMode::kNone, log_w, mu, 0.5f) == 0.0f);
  for (PriorMode m : {PriorMode::kEstimateDiagonal, PriorMode::kRaw, PriorMode::kNone}) {
    PriorMode parsed = PriorMode::kNone;
    REQUIRE(parse_prior_mode(prior_mode_name(m), &parsed));
    CHECK(parsed == m);
  }
  PriorMode p;
  CHECK_FALSE(parse_prior_mode("sigmoid", &p));
}

TEST_CASE("group weight is the mean of the heads' entmax weights") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 0.3);
  for (float alpha : {1.5f, 2.0f, 1.3f}) {
    for (int g : {1, 2, 4, 8, 16}) {
      std::vector<float> x(g), tau(g);
      for (int h = 0; h < g; ++h) {
        x[h] = static_cast<float>(normal(rng));
        tau[h] = static_cast<float>(normal(rng));
      }
      double want = 0;
      for (int h = 0; h < g; ++h) {
        const double y = double(x[h]) - double(tau[h]);
        if (y > 0) want += std::pow(y, 1.0 / (double(alpha) - 1.0));
      }
      want /= g;
      const float got = group_weight([&](int h) { return x[h]; }, [&](int h) { return tau[h]; }, g, alpha);
      INFO("alpha " << alpha << " g " << g);
      CHECK(std::fabs(double(got) - want) <= 1e-5 * std::max(1e-30, want) + 1e-30);
      CHECK((got > 0.0f) == (want > 0.0));
    }
  }
}

namespace {

// Expected statistics of one KV head, written from the definitions: attended keys = routed·C + the diagonal
// chunk's visible keys; visible keys = p + 1.
struct Expected {
  int64_t queries = 0, attended = 0, visible = 0;
  double active_sum = 0;
};

}  // namespace

TEST_CASE("routing statistics from active chunk counts (padded batch with lengths)") {
  const int64_t b = 3, h_kv = 2, n_q = 70, n_k = 150, C = 16;
  const std::vector<int32_t> seqlens_q = {70, 5, 0}, seqlens_k = {150, 40, 33};
  std::vector<int32_t> active(b * h_kv * n_q, -7);  // padding rows hold garbage: they must be ignored
  std::mt19937_64 rng(17);
  std::vector<Expected> want(h_kv);
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t r = 0; r < h_kv; ++r) {
      for (int64_t i = 0; i < seqlens_q[s]; ++i) {
        const int64_t p = seqlens_k[s] - seqlens_q[s] + i, ci = p / C;
        const int32_t a = static_cast<int32_t>(1 + rng() % (ci + 1));  // routed ∈ [0, c_i], plus the diagonal
        active[(s * h_kv + r) * n_q + i] = a;
        Expected& e = want[r];
        ++e.queries;
        e.active_sum += a;
        e.attended += (a - 1) * C + (p - ci * C + 1);
        e.visible += p + 1;
      }
    }
  }
  TensorView view = make_view(active.data(), DType::kI32, {b, h_kv, n_q});
  BatchLayout layout;
  layout.seqlens_q = seqlens_q.data();
  layout.seqlens_k = seqlens_k.data();
  const RoutingStats st = routing_stats(view, layout, n_q, n_k, C);
  REQUIRE(st.per_kv_head.size() == static_cast<size_t>(h_kv));
  int64_t att = 0, vis = 0, queries = 0;
  double active_sum = 0;
  for (int64_t r = 0; r < h_kv; ++r) {
    const HeadRoutingStats& hs = st.per_kv_head[r];
    CHECK(hs.queries == want[r].queries);
    CHECK(hs.attended_keys == want[r].attended);
    CHECK(hs.visible_keys == want[r].visible);
    CHECK(hs.mean_active_chunks == doctest::Approx(want[r].active_sum / want[r].queries));
    CHECK(hs.sparsity == doctest::Approx(1.0 - double(want[r].attended) / double(want[r].visible)));
    att += want[r].attended;
    vis += want[r].visible;
    queries += want[r].queries;
    active_sum += want[r].active_sum;
  }
  CHECK(st.sparsity == doctest::Approx(1.0 - double(att) / double(vis)));
  CHECK(st.mean_active_chunks == doctest::Approx(active_sum / double(queries)));
}

TEST_CASE("routing statistics: dense routing has zero sparsity; varlen layout") {
  // Every routable chunk routed: attended == visible.
  const int64_t n = 100, C = 16;
  const std::vector<int32_t> cu_q = {0, 100, 130}, cu_k = {0, 100, 180};
  std::vector<int32_t> active(1 * 1 * 130);
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t nq = cu_q[s + 1] - cu_q[s], nk = cu_k[s + 1] - cu_k[s];
    for (int64_t i = 0; i < nq; ++i) active[cu_q[s] + i] = static_cast<int32_t>((nk - nq + i) / C + 1);
  }
  TensorView view = make_view(active.data(), DType::kI32, {1, 1, 130});
  BatchLayout layout;
  layout.cu_seqlens_q = cu_q.data();
  layout.cu_seqlens_k = cu_k.data();
  layout.num_seqs = 2;
  layout.max_seqlen_q = 100;
  layout.max_seqlen_k = 100;
  const RoutingStats st = routing_stats(view, layout, n, n, C);
  CHECK(st.per_kv_head[0].queries == 130);
  CHECK(st.sparsity == doctest::Approx(0.0));
  CHECK(st.per_kv_head[0].attended_keys == st.per_kv_head[0].visible_keys);
  // Wrong dtype is a typed error naming the argument.
  std::vector<float> wrong(130);
  TensorView bad = make_view(wrong.data(), DType::kF32, {1, 1, 130});
  try {
    routing_stats(bad, layout, n, n, C);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.argument() == "active_chunks");
  }
}
