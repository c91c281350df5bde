// The library's α-entmax threshold solver against the reference's sort-based and bisection thresholds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dashattn/entmax.h"
#include "reference/reference.h"

namespace {

using dashattn::EntmaxSolver;

struct Outcome {
  int tie_flips = 0;       // support differences inside the contract's tie band
  int hard_flips = 0;      // support differences outside it: failures
  double sum_error = 0;    // |Σ ŵ − 1| with the library's τ
  bool support_count_ok = true;
};

// Runs the library solver on float x and compares with the reference threshold of the same values.
Outcome compare_solver(const std::vector<float>& xf, double alpha, EntmaxSolver solver = EntmaxSolver::kExact) {
  const std::vector<double> x(xf.begin(), xf.end());
  const dashattn::EntmaxThreshold lib =
      dashattn::entmax_threshold(xf.data(), static_cast<int>(xf.size()), alpha, solver);
  const double want = dashattn::ref::entmax_threshold_sorted(x, alpha);
  Outcome out;
  int above = 0;
  for (double v : x) {
    const bool in_lib = v > lib.tau, in_ref = v > want;
    above += in_lib ? 1 : 0;
    if (in_lib != in_ref) {
      if (dashattn::ref::is_entmax_tie(v, want)) ++out.tie_flips;
      else ++out.hard_flips;
    }
  }
  out.support_count_ok = above == lib.support;
  out.sum_error = std::fabs(dashattn::ref::entmax_weight_sum(x, lib.tau, alpha) - 1.0);
  return out;
}

// Two doubles with the same bits (a −0 is not a +0, a NaN equals its own pattern).
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// Random score vectors of many shapes: spreads from 1e-3 to 1e3, offsets up to 1e6, heavy ties, constant runs.
std::vector<float> random_scores(std::mt19937_64& rng, int n, int kind) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> level(0, 4);
  std::vector<float> x(n);
  const double spreads[] = {1e-3, 0.1, 1.0, 10.0, 1e3};
  const double spread = spreads[kind % 5];
  const double offset = (kind / 5) % 3 == 0 ? 0.0 : ((kind / 5) % 3 == 1 ? 37.5 : -1e6);
  for (int i = 0; i < n; ++i) {
    if (kind % 7 == 6) x[i] = static_cast<float>(offset + 0.25 * level(rng));  // heavy ties on a coarse grid
    else x[i] = static_cast<float>(offset + spread * normal(rng));
  }
  return x;
}

}  // namespace

TEST_CASE("reference: sort-based threshold equals bisection") {
  std::mt19937_64 rng(7);
  for (double alpha : {1.5, 2.0}) {
    for (int trial = 0; trial < 300; ++trial) {
      const int n = 1 + static_cast<int>(rng() % 300);
      const std::vector<float> xf = random_scores(rng, n, trial);
      const std::vector<double> x(xf.begin(), xf.end());
      const double sorted = dashattn::ref::entmax_threshold_sorted(x, alpha);
      const double bisect = dashattn::ref::entmax_threshold_bisection(x, alpha);
      const double m = *std::max_element(x.begin(), x.end());
      CHECK(std::fabs(sorted - bisect) <= 1e-9 * std::max(1.0, std::fabs(m)));
      // τ carries the rounding of |max|; the weight sum moves by at most ~2·sqrt(n) per unit of τ.
      const double slack = 1e-12 + 8.0 * std::sqrt(double(n)) * 2.3e-16 * std::max(1.0, std::fabs(m));
      CHECK(std::fabs(dashattn::ref::entmax_weight_sum(x, sorted, alpha) - 1.0) <= slack);
    }
  }
}

TEST_CASE("reference: known thresholds") {
  // One value: it alone weighs 1, so τ = x − 1 for every α.
  for (double alpha : {1.2, 1.5, 2.0, 3.0}) CHECK(dashattn::ref::entmax_threshold_sorted({2.5}, alpha) == doctest::Approx(1.5));
  // n equal values: each weighs 1/n, so (x − τ)^{1/(α−1)} = 1/n.
  CHECK(dashattn::ref::entmax_threshold_sorted({0.0, 0.0, 0.0, 0.0}, 2.0) == doctest::Approx(-0.25));
  CHECK(dashattn::ref::entmax_threshold_sorted({0.0, 0.0, 0.0, 0.0}, 1.5) == doctest::Approx(-0.5));
  // Sparsemax of (1, 0.5, −1): support {1, 0.5}, τ = (1.5 − 1)/2.
  CHECK(dashattn::ref::entmax_threshold_sorted({1.0, 0.5, -1.0}, 2.0) == doctest::Approx(0.25));
}

TEST_CASE("entmax solver: exact for alpha 1.5 and 2 on random vectors of length 1..4096") {
  std::mt19937_64 rng(2024);
  std::vector<int> lengths = {1, 2, 3, 5, 31, 32, 33, 64, 127, 1000, 4096};
  for (int i = 0; i < 200; ++i) lengths.push_back(1 + static_cast<int>(rng() % 4096));
  int vectors = 0, tie_flips = 0;
  double worst_sum = 0;
  for (double alpha : {1.5, 2.0}) {
    for (size_t t = 0; t < lengths.size(); ++t) {
      const std::vector<float> x = random_scores(rng, lengths[t], static_cast<int>(t));
      const Outcome o = compare_solver(x, alpha);
      ++vectors;
      tie_flips += o.tie_flips;
      worst_sum = std::max(worst_sum, o.sum_error);
      INFO("alpha " << alpha << " n " << x.size() << " kind " << t);
      CHECK(o.hard_flips == 0);
      CHECK(o.support_count_ok);
      CHECK(o.sum_error <= 1e-5);
    }
  }
  MESSAGE(vectors << " vectors, " << tie_flips << " support flips inside the tie band, worst |sum-1| " << worst_sum);
}

TEST_CASE("entmax solver: heavy ties and degenerate inputs") {
  for (double alpha : {1.5, 2.0, 1.2, 3.0}) {
    INFO("alpha " << alpha);
    // All equal: the whole vector is the support.
    for (int n : {1, 2, 7, 64, 4096}) {
      const std::vector<float> x(n, 3.0f);
      const auto lib = dashattn::entmax_threshold(x.data(), n, alpha);
      CHECK(lib.support == n);
      CHECK(compare_solver(x, alpha).sum_error <= 1e-5);
    }
    // A clear winner followed by a long run of identical losers.
    std::vector<float> x(1000, -5.0f);
    x[17] = 5.0f;
    const Outcome o = compare_solver(x, alpha);
    CHECK(o.hard_flips == 0);
    CHECK(dashattn::entmax_threshold(x.data(), 1000, alpha).support == 1);
    if (alpha == 1.5 || alpha == 2.0) {
      // The closed form's numerator (S2 − 1 or S1 − 1) is exactly zero for a lone winner at the bracket's end, which
      // the solve returns without dividing: τ is x − 1 to the bit.
      CHECK(dashattn::entmax_threshold(x.data(), 1000, alpha).tau == 4.0);
    }
    // Two tied winners far above the rest.
    x[18] = 5.0f;
    CHECK(dashattn::entmax_threshold(x.data(), 1000, alpha).support == 2);
    // Tiny magnitudes: numerically all equal.
    std::vector<float> tiny = {1e-30f, -1e-30f, 0.0f, 2e-30f};
    CHECK(compare_solver(tiny, alpha).sum_error <= 1e-5);
    // Huge magnitudes.
    std::vector<float> huge = {1e6f, 1e6f - 0.5f, -1e6f, 1e6f - 0.0625f, 3e5f};
    const Outcome oh = compare_solver(huge, alpha);
    CHECK(oh.hard_flips == 0);
    CHECK(oh.sum_error <= 1e-5);
  }
}

// Other α over scores of moderate magnitude (offsets 0 and 37.5); the 1e6 offsets have their own case below.
TEST_CASE("entmax solver: other alpha against bisection") {
  std::mt19937_64 rng(99);
  for (double alpha : {1.2, 1.7, 3.0}) {
    for (int t = 0; t < 120; ++t) {
      const int n = 1 + static_cast<int>(rng() % 2048);
      const int kind = (t / 5) % 3 == 2 ? t - 5 : t;
      const std::vector<float> xf = random_scores(rng, n, kind);
      const std::vector<double> x(xf.begin(), xf.end());
      const auto lib = dashattn::entmax_threshold(xf.data(), n, alpha);
      const double want = dashattn::ref::entmax_threshold_bisection(x, alpha);
      INFO("alpha " << alpha << " n " << n << " kind " << kind << " lib " << lib.tau << " want " << want);
      CHECK(std::fabs(lib.tau - want) <= 1e-7 * std::max(1.0, std::fabs(want)) * 10);
      const Outcome o = compare_solver(xf, alpha);
      CHECK(o.hard_flips == 0);
      CHECK(o.sum_error <= 1e-5);
    }
  }
}

// The bracket [max − 1, max] has width 1 whatever |max| is, so a threshold good to |Σŵ − 1| ≤ 1e-5 is reachable
// in double up to |x| ~ 1e9; a stopping rule relative to |τ| is not enough at |x| ~ 1e6.
TEST_CASE("entmax solver: other alpha at magnitude 1e6") {
  std::mt19937_64 rng(123);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double alpha : {1.2, 1.7, 3.0}) {
    for (int t = 0; t < 12; ++t) {
      const int n = 16 + static_cast<int>(rng() % 1024);
      const double spread = t % 3 == 0 ? 1e-3 : (t % 3 == 1 ? 0.1 : 10.0);
      std::vector<float> x(n);
      for (float& v : x) v = static_cast<float>(-1e6 + spread * normal(rng));
      const Outcome o = compare_solver(x, alpha);
      INFO("alpha " << alpha << " n " << n << " spread " << spread);
      CHECK(o.hard_flips == 0);
      CHECK(o.sum_error <= 1e-5);
    }
  }
}

TEST_CASE("entmax solver: alpha near 1 approaches softmax") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double alpha = 1.0001;
  for (int t = 0; t < 20; ++t) {
    const int n = 2 + static_cast<int>(rng() % 60);
    std::vector<double> z(n);
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) {
      z[i] = normal(rng);
      x[i] = static_cast<float>((alpha - 1.0) * z[i]);
    }
    const auto lib = dashattn::entmax_threshold(x.data(), n, alpha);
    const std::vector<double> w =
        dashattn::ref::entmax_weights(std::vector<double>(x.begin(), x.end()), lib.tau, alpha);
    double zmax = *std::max_element(z.begin(), z.end()), norm = 0;
    for (double v : z) norm += std::exp(v - zmax);
    double worst = 0;
    for (int i = 0; i < n; ++i) worst = std::max(worst, std::fabs(w[i] - std::exp(z[i] - zmax) / norm));
    INFO("n " << n);
    CHECK(worst <= 2e-3);  // α − 1 = 1e-4 plus float rounding of x = (α−1)·z
  }
}

TEST_CASE("entmax solver: the reference-compatible mode runs and lands near the exact threshold") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  double worst_sum = 0, worst_tau = 0;
  int differing = 0, total = 0;
  for (int t = 0; t < 200; ++t) {
    const int n = 1 + static_cast<int>(rng() % 512);
    std::vector<float> x(n);
    for (float& v : x) v = static_cast<float>(0.5 * 4.0 * normal(rng) / std::sqrt(64.0));  // (α−1)·γ·z scale
    const auto approx = dashattn::entmax_threshold(x.data(), n, 1.5, EntmaxSolver::kReference);
    const auto exact = dashattn::entmax_threshold(x.data(), n, 1.5, EntmaxSolver::kExact);
    const std::vector<double> xd(x.begin(), x.end());
    const double m = *std::max_element(xd.begin(), xd.end());
    CHECK(approx.iterations == 3);
    CHECK(approx.tau >= m - 1.0 - 1e-5);
    CHECK(approx.tau <= m + 1e-5);
    worst_sum = std::max(worst_sum, std::fabs(dashattn::ref::entmax_weight_sum(xd, approx.tau, 1.5) - 1.0));
    worst_tau = std::max(worst_tau, std::fabs(approx.tau - exact.tau));
    differing += approx.support != exact.support ? 1 : 0;
    ++total;
  }
  MESSAGE("3-step mode: worst |sum-1| " << worst_sum << ", worst |tau diff| " << worst_tau << ", support differs in "
                                        << differing << "/" << total);
  CHECK(worst_sum <= 0.1);
}

TEST_CASE("entmax solver: given the row maximum, the same threshold bit for bit") {
  // Stage 1's sweep already knows each row's maximum and hands it to the solver instead of scanning for it (and its
  // compaction the first pass); the result must be the scanning solver's, bit for bit, with the maximum of either
  // sign of zero.
  std::mt19937_64 rng(23);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto same = [](const dashattn::EntmaxThreshold& a, const dashattn::EntmaxThreshold& b) {
    return same_bits(a.tau, b.tau) && a.support == b.support && a.iterations == b.iterations;
  };
  int checked = 0;
  for (double alpha : {1.5, 2.0, 1.3}) {
    for (EntmaxSolver solver : {EntmaxSolver::kExact, EntmaxSolver::kReference}) {
      for (int t = 0; t < 300; ++t) {
        const int n = 1 + static_cast<int>(rng() % 48);
        std::vector<float> x(n);
        for (float& v : x) v = static_cast<float>(normal(rng) * (t % 3 == 0 ? 0.2 : 1.0));
        if (t % 5 == 0) x[rng() % n] = *std::max_element(x.begin(), x.end());  // a tied maximum
        const float m = *std::max_element(x.begin(), x.end());
        const auto scanned = dashattn::entmax_threshold(x.data(), n, alpha, solver);
        const auto given = dashattn::entmax_threshold_given_max(dashattn::ArrayValues{x.data()}, n, m, alpha, solver);
        // Stage 1's compaction also forms the exact solve's first pass as it walks the list, entry by entry.
        dashattn::detail::FirstPass first(m, alpha);
        for (float v : x) first.add(v);
        const auto with_first =
            dashattn::entmax_threshold_given_max(dashattn::ArrayValues{x.data()}, n, m, alpha, solver, &first.sums);
        INFO("alpha " << alpha << " n " << n << " t " << t);
        CHECK(same(scanned, given));
        CHECK(same(scanned, with_first));
        ++checked;
      }
      // All zeros: the caller's maximum may be −0 or +0; τ is m plus a root in [−1, 0), so its bits do not depend on
      // the sign.
      for (int n : {1, 2, 7}) {
        const std::vector<float> zeros(n, 0.0f);
        const auto scanned = dashattn::entmax_threshold(zeros.data(), n, alpha, solver);
        for (float m : {0.0f, -0.0f}) {
          CHECK(same(scanned, dashattn::entmax_threshold_given_max(dashattn::ArrayValues{zeros.data()}, n, m, alpha,
                                                                   solver)));
        }
      }
    }
  }
  CHECK(checked == 1800);
}

TEST_CASE("entmax solver: the branch-free pass step has the branching step's bits") {
  // pass_add_plain adds +0 for elements off the support instead of skipping them; that must leave every sum and
  // bracket end exactly as the branching form (written out here) leaves them, whatever the values: ties, zeros of
  // either sign, a trial point on an element, infinities and NaN.
  auto branching = [](dashattn::detail::PassSums& s, double v, double t) {
    const double y = v - t;
    if (y > 0) {
      ++s.k;
      s.s1 += y;
      s.s2 += y * y;
      if (v < s.above) s.above = v;
    } else if (v > s.below) {
      s.below = v;
    }
  };
  std::mt19937_64 rng(41);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double specials[] = {0.0, -0.0, -1.0, 0.5, -INFINITY, INFINITY, NAN};
  int checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<double> v(n);
    for (double& e : v) {
      const int pick = static_cast<int>(rng() % 10);
      e = pick < 7 ? std::min(0.0, static_cast<double>(static_cast<float>(normal(rng) * 0.6)))
                   : specials[rng() % 7];
    }
    const double t = trial % 4 == 0 ? v[rng() % n] : -std::ldexp(static_cast<double>(rng() % 1024), -10);
    dashattn::detail::PassSums a, b;
    for (double e : v) {
      branching(a, e, t);
      dashattn::detail::pass_add_plain(b, e, t);
    }
    INFO("trial " << trial << " n " << n);
    CHECK(a.k == b.k);
    CHECK(same_bits(a.s1, b.s1));
    CHECK(same_bits(a.s2, b.s2));
    CHECK(same_bits(a.below, b.below));
    CHECK(same_bits(a.above, b.above));
    ++checked;
  }
  CHECK(checked == 2000);
}

TEST_CASE("entmax solver: a first pass formed with dropped entries interleaved has the kept entries' bits") {
  // Stage 1's compaction walks every entry of a list and tells FirstPass::add_if which ones it keeps; the sums must
  // be those of add() over the kept entries alone, whatever the dropped ones hold.
  std::mt19937_64 rng(43);
  std::normal_distribution<double> normal(0.0, 1.0);
  int checked = 0;
  for (double alpha : {1.5, 2.0, 1.3}) {
    for (int trial = 0; trial < 500; ++trial) {
      const int n = 1 + static_cast<int>(rng() % 40);
      std::vector<float> x(n);
      std::vector<bool> keep(n);
      for (int i = 0; i < n; ++i) {
        x[i] = static_cast<float>(normal(rng));
        keep[i] = rng() % 3 != 0;
      }
      float m = -INFINITY;
      for (int i = 0; i < n; ++i)
        if (keep[i]) m = std::max(m, x[i]);
      if (m == -INFINITY) continue;
      dashattn::detail::FirstPass kept_only(m, alpha), interleaved(m, alpha);
      for (int i = 0; i < n; ++i) {
        if (keep[i]) kept_only.add(x[i]);
        interleaved.add_if(x[i], keep[i]);
      }
      INFO("alpha " << alpha << " trial " << trial);
      const auto& a = kept_only.sums;
      const auto& b = interleaved.sums;
      CHECK(a.k == b.k);
      CHECK(same_bits(a.s1, b.s1));
      CHECK(same_bits(a.s2, b.s2));
      CHECK(same_bits(a.sp, b.sp));
      CHECK(same_bits(a.spm1, b.spm1));
      CHECK(same_bits(a.below, b.below));
      CHECK(same_bits(a.above, b.above));
      ++checked;
    }
  }
  CHECK(checked > 1400);
}
