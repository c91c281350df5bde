// The α-entmax threshold solver shared by every backend (host and device).
//
// Given scores z over n routable chunks, α-entmax(z)_c = [(α−1)·z_c − τ]_+^{1/(α−1)} with the unique τ making the
// weights sum to one. We work on x = (α−1)·z. τ lies in [max(x) − 1, max(x)): at max−1 the top element alone
// weighs 1, at max nothing does.
//
// The solver is exact, not "a few Halley steps": each pass at a trial t collects, over the elements above t,
// their count k and the sums S1 = Σ(x−t), S2 = Σ(x−t)², plus a = max{x ≤ t} and b = min{x > t}. For α = 1.5
// and α = 2 the weight sum restricted to that support is a polynomial in τ with a closed-form root τq. If
// a ≤ τq < b, the support at τq is exactly the one used, so τq is the exact threshold (a certificate); otherwise
// the bracket shrinks and Newton (clamped into the bracket) proposes the next t. Other α use a safeguarded
// Newton/bisection to 1e-7 relative. All solver arithmetic is in double; x stays float so every backend sees
// the same inputs.
//
// `Values` is any callable `float(int i)`, so a CUDA kernel can run the solver over shared memory and the CPU
// over a plain array without copies.
#pragma once

#include <cmath>
#include <cstdint>

#include "dashattn/dtype.h"  // DASHATTN_HD

namespace dashattn {

enum class EntmaxSolver : uint8_t {
  kExact,      // certified threshold (the library default)
  kReference,  // exactly 3 Halley steps from [max−1, max] as the released reference code does; for A/B only
};

struct EntmaxThreshold {
  double tau = 0;     // threshold on x = (α−1)·z
  int support = 0;    // number of elements with x > tau
  int iterations = 0; // passes over the values (diagnostics)
};

// num / den for den > 0, a zero numerator returned as it is (±0 / den is ±0: the same bits) without dividing. On the
// GPU a zero numerator fails the division's fast-path range check and takes its slow path, and the callers meet
// zeros often: most chunks of a row weigh nothing (group_mean), and a support of one element at the bracket's end
// makes the exact solve's numerator S2 − 1 or S1 − 1 exactly 0 in many prefill rows (perf-log.md, twenty-second
// and twenty-third passes).
template <typename T>
DASHATTN_HD T divide_unless_zero(T num, T den) {
  return num != T(0) ? num / den : num;
}

namespace detail {

// Passes of the exact solve before it gives up (never reached in practice). Every solver, CPU and GPU, stops at the
// same count, so that they agree on τ even there.
constexpr int kMaxCertifiedPasses = 200;

struct PassSums {
  int k = 0;
  double s1 = 0, s2 = 0, sp = 0, spm1 = 0;  // Σy, Σy², Σy^p, Σy^(p−1) over y = x − t > 0
  double below = -INFINITY;                 // a = max{x ≤ t}
  double above = INFINITY;                  // b = min{x > t}
};

// One element's count, S1, S2 and bracket ends (all of a pass for α = 1.5 and 2; general α adds
// pass_add_powers), without branches: an element off the support adds +0 to S1 and S2, which leaves those sums of
// positive terms exactly as they are, and the bracket ends move only under the same conditions, so the sums have
// the branching form's bits. On a GPU thread that walks a list (Stage 1's solve) the branches diverged per element
// and held the next element's load behind them. keep = false: the element is not in the list at all (a compaction
// dropped it), so it leaves every sum and both bracket ends alone.
DASHATTN_HD void pass_add_plain_if(PassSums& s, double v, double t, bool keep) {
  const double y = v - t;
  const bool in = keep && y > 0;
  const double w = in ? y : 0.0;
  s.k += in ? 1 : 0;
  s.s1 += w;
  s.s2 += w * w;
  s.above = in && v < s.above ? v : s.above;
  s.below = keep && !in && v > s.below ? v : s.below;
}
DASHATTN_HD void pass_add_plain(PassSums& s, double v, double t) { pass_add_plain_if(s, v, t, true); }

// The general α's extra sums Σy^(p−1), Σy^p of one element at y = v − t (nothing off the support).
DASHATTN_HD void pass_add_powers(PassSums& s, double y, double p) {
  if (y > 0) {
    const double ypm1 = pow(y, p - 1.0);
    s.spm1 += ypm1;
    s.sp += ypm1 * y;
  }
}

// Adds one element to a pass's sums: v = x − m (the element relative to the row maximum), at trial threshold t.
// The order of the calls fixes the sums' bits. Every α takes the plain step; general α adds its powers.
DASHATTN_HD void pass_add(PassSums& s, double v, double t, double p, bool general) {
  pass_add_plain(s, v, t);
  if (general) pass_add_powers(s, v - t, p);
}

// One pass at trial threshold t, in coordinates shifted by the row maximum m (exact for float inputs): the
// weights depend on x − τ, which stays well resolved even when |x| is large.
template <typename Values>
DASHATTN_HD PassSums pass(const Values& x, int n, double m, double t, double p, bool general) {
  PassSums s;
  // The branch on α outside the loop, so that the plain walk is a straight line the compiler can unroll.
  if (!general) {
    for (int i = 0; i < n; ++i) pass_add_plain(s, static_cast<double>(x(i)) - m, t);
  } else {
    for (int i = 0; i < n; ++i) pass_add(s, static_cast<double>(x(i)) - m, t, p, true);
  }
  return s;
}

// The exact solve's first trial threshold, relative to the row maximum (the bracket's left end), and whether a pass
// forms the general sums Σy^p, Σy^(p−1) (every α but 1.5 and 2).
constexpr double kFirstTrial = -1.0;
DASHATTN_HD bool general_sums(double alpha) { return !(alpha == 1.5 || alpha == 2.0); }

// The exact solve's first pass formed value by value by a caller that walks the values anyway (Stage 1's list
// compaction): add() every value in the order the solve would read them, then hand `sums` to
// entmax_threshold_given_max, which then does not repeat that pass (the same sums, so the same τ bits).
struct FirstPass {
  PassSums sums;
  double m, p;
  bool general;
  DASHATTN_HD FirstPass(double row_max, double alpha)
      : m(row_max), p(1.0 / (alpha - 1.0)), general(general_sums(alpha)) {}
  DASHATTN_HD void add(float x) { pass_add(sums, static_cast<double>(x) - m, kFirstTrial, p, general); }
  // add(x) if keep, else nothing; for α = 1.5 and 2 without a branch on keep (a compaction that walks every entry).
  DASHATTN_HD void add_if(float x, bool keep) {
    const double v = static_cast<double>(x) - m;
    pass_add_plain_if(sums, v, kFirstTrial, keep);
    if (general && keep) pass_add_powers(sums, v - kFirstTrial, p);
  }
};

// One iteration of the exact solve for α = 1.5 or 2, given the pass sums at trial t (relative to the row maximum):
// the closed-form root of the weight sum restricted to the current support, in δ = τ − t. Returns true with
// *root = t + δ when that root lies on the support's own interval; otherwise narrows [lo, hi), moves t, and sets
// *stop once the bracket is exhausted. Shared by every solver so that their τ agree bit for bit.
DASHATTN_HD bool piece_root_step(const PassSums& s, bool is2, double& t, double& lo, double& hi, double* root,
                                 bool* stop) {
  double delta;
  bool ok = true;
  if (is2) {
    delta = divide_unless_zero(s.s1 - 1.0, static_cast<double>(s.k));  // k > 0: the support holds the maximum
  } else {
    const double disc = s.s1 * s.s1 - s.k * (s.s2 - 1.0);
    if (disc < 0) {
      ok = false;
      delta = 0;
    } else {
      const double r = sqrt(disc);
      // Smaller root of k·δ² − 2·S1·δ + (S2 − 1) = 0; the conjugate form avoids cancellation near S2 = 1.
      delta = (s.s1 > 0) ? divide_unless_zero(s.s2 - 1.0, s.s1 + r) : (s.s1 - r) / s.k;
    }
  }
  const double tq = t + delta;
  if (ok && tq >= s.below && tq < s.above) {
    *root = tq;
    return true;
  }
  const double f = is2 ? s.s1 - 1.0 : s.s2 - 1.0;
  if (f > 0) lo = t; else hi = t;
  // From the left the piecewise-polynomial sum is convex and decreasing, so the piece root never overshoots the
  // true τ by much; clamp into the bracket and fall back to bisection if it does not move.
  double next = ok ? tq : 0.5 * (lo + hi);
  if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
  *stop = next == t || hi - lo <= 1e-15 * (1.0 + fabs(hi));
  t = next;
  return false;
}

}  // namespace detail

// Weight of one element given the threshold: [x − τ]_+^{1/(α−1)}, in float like every backend computes it.
DASHATTN_HD float entmax_weight(float x, float tau, float alpha) {
  const float y = x - tau;
  if (!(y > 0.0f)) return 0.0f;
  if (alpha == 1.5f) return y * y;
  if (alpha == 2.0f) return y;
  return powf(y, 1.0f / (alpha - 1.0f));
}

// Exact threshold of x (already multiplied by α−1) over n > 0 values whose largest is m (a caller that has the
// maximum already, such as Stage 1's sweep, skips the scan; the same m gives the same τ bits). first_pass, where
// given, is the exact solve's first pass over the same values (detail::FirstPass, with the same m and α); the
// reference solver ignores it.
template <typename Values>
DASHATTN_HD EntmaxThreshold entmax_threshold_given_max(const Values& x, int n, double m, double alpha,
                                                       EntmaxSolver solver = EntmaxSolver::kExact,
                                                       const detail::PassSums* first_pass = nullptr) {
  EntmaxThreshold r;
  if (n <= 0) return r;
  const bool is15 = alpha == 1.5, is2 = alpha == 2.0, general = detail::general_sums(alpha);
  const double p = 1.0 / (alpha - 1.0);
  // Everything below is in coordinates relative to m; the bracket is [−1, 0): f(lo) >= 0 > f(hi).
  double lo = detail::kFirstTrial, hi = 0.0;
  auto finish = [&](double t) {
    r.tau = m + t;
    int k = 0;
    for (int i = 0; i < n; ++i) k += static_cast<double>(x(i)) - m > t ? 1 : 0;
    r.support = k;
    return r;
  };

  if (solver == EntmaxSolver::kReference) {
    // The released reference's approximation, kept for A/B comparisons: Halley from max − 0.5, bisecting when a
    // step leaves the bracket, exactly three passes. Written for α = 1.5 (its only α); other α use Newton steps.
    double t = -0.5;
    for (int it = 0; it < 3; ++it) {
      const detail::PassSums s = detail::pass(x, n, m, t, p, !is15);
      const double f = is15 ? s.s2 - 1.0 : s.sp - 1.0;
      const double fp = is15 ? -2.0 * s.s1 : -p * s.spm1;
      const double fpp = is15 ? 2.0 * s.k : 0.0;
      if (f > 0) lo = t; else hi = t;
      const double denom = 2.0 * fp * fp - f * fpp;
      double next = denom != 0.0 ? t - 2.0 * f * fp / denom : 0.5 * (lo + hi);
      if (!(next >= lo - 1e-5 && next <= hi + 1e-5)) next = 0.5 * (lo + hi);
      t = next;
      r.iterations = it + 1;
    }
    return finish(t);
  }

  double t = lo;  // start at the left end: the support there is a superset of the true one
  for (int it = 0; it < detail::kMaxCertifiedPasses; ++it) {
    const detail::PassSums s =
        it == 0 && first_pass != nullptr ? *first_pass : detail::pass(x, n, m, t, p, general);
    r.iterations = it + 1;
    if (is15 || is2) {
      double root;
      bool stop = false;
      if (detail::piece_root_step(s, is2, t, lo, hi, &root, &stop)) {
        r.tau = m + root;
        r.support = s.k;
        return r;
      }
      if (stop) break;
    } else {
      const double f = s.sp - 1.0;
      if (fabs(f) <= 1e-12) break;  // t itself is the root to double precision
      if (f > 0) lo = t; else hi = t;
      // Stop only at double resolution: the bracket starts 1 wide whatever |τ| is, and at |x| ~ 1e6 a bracket
      // relative to |τ| would leave the weight sum visibly off 1.
      if (hi - lo <= 4.0 * 2.220446049250313e-16 * fmax(1.0, fabs(t))) {
        t = 0.5 * (lo + hi);
        break;
      }
      // Safeguarded Newton: the weight sum is convex and decreasing, so a step that leaves the bracket bisects.
      const double fp = -p * s.spm1;
      double next = fp != 0.0 ? t - f / fp : 0.5 * (lo + hi);
      if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
      t = next;
    }
  }
  return finish(t);
}

// Exact threshold of x (already multiplied by α−1) over n > 0 values.
template <typename Values>
DASHATTN_HD EntmaxThreshold entmax_threshold(const Values& x, int n, double alpha,
                                             EntmaxSolver solver = EntmaxSolver::kExact) {
  if (n <= 0) return EntmaxThreshold{};
  double m = x(0);
  for (int i = 1; i < n; ++i) m = x(i) > m ? static_cast<double>(x(i)) : m;
  return entmax_threshold_given_max(x, n, m, alpha, solver);
}

// Convenience overload over a plain float array.
struct ArrayValues {
  const float* p;
  DASHATTN_HD float operator()(int i) const { return p[i]; }
};
DASHATTN_HD EntmaxThreshold entmax_threshold(const float* x, int n, double alpha,
                                             EntmaxSolver solver = EntmaxSolver::kExact) {
  return entmax_threshold(ArrayValues{x}, n, alpha, solver);
}
DASHATTN_HD EntmaxThreshold entmax_threshold(float* x, int n, double alpha,
                                             EntmaxSolver solver = EntmaxSolver::kExact) {
  return entmax_threshold(ArrayValues{x}, n, alpha, solver);
}

}  // namespace dashattn
