// The bias budget of the conformance check (reference.h, BiasBudget): it must be negligible where log w is well
// conditioned, and it must contain what float kernels that sum x in other orders actually compute.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dashattn/dashattn.h"
#include "reference/checks.h"

using namespace dashattn;

namespace {

struct Case {
  int64_t n = 1000, h_q = 8, h_kv = 2, d = 64;
  int chunk = 16;
  DType dtype = DType::kBF16;
  float gamma = 1.0f, alpha = 1.5f, sigma = 1e8f;
  PriorMode prior = PriorMode::kRaw;
  uint64_t seed = 1;

  ref::ProblemSpec spec() const {
    ref::ProblemSpec s;
    s.n_q = s.n_k = n;
    s.h_q = h_q;
    s.h_kv = h_kv;
    s.d = d;
    s.dtype = dtype;
    s.seed = seed;
    return s;
  }
  MethodParams method() const {
    MethodParams m;
    m.chunk_size = chunk;
    m.gamma = gamma;
    m.alpha = alpha;
    m.sigma = sigma;
    m.prior = prior;
    return m;
  }
};

struct Routed {
  ref::Sequence seq;
  ref::Method m;
  std::vector<double> summaries;
  ref::Routing rt;
  ref::BiasBudget budget;
};

Routed route_case(const Case& c) {
  Routed r;
  r.seq = ref::make_problem(c.spec()).sequence(0);
  r.m = ref::Method::from(c.method());
  r.summaries = ref::summarize(r.seq, r.m);
  r.rt = ref::route(r.seq, r.summaries, r.m);
  r.budget = ref::bias_budget(r.rt, r.m, r.seq.d);
  return r;
}

bool same_routed_set(const ref::Routing& a, const ref::Routing& b, int64_t i, int64_t r) {
  for (int64_t c = 0; c < a.diagonal[i]; ++c)
    if (a.routed(i, r, c) != b.routed(i, r, c)) return false;
  return true;
}

// Whether a routed chunk of the row may vanish in a float kernel (its weight interval reaches 0).
bool vanishing_chunk(const Routed& r, int64_t i, int64_t kv) {
  for (int64_t ch = 0; ch < r.rt.diagonal[i]; ++ch)
    if (r.rt.routed(i, kv, ch) && r.budget.log_ratio_lo[r.budget.at(i, kv, ch)] <= -ref::BiasBudget::kLogCap)
      return true;
  return false;
}

const ref::FloatSum kOrders[] = {ref::FloatSum::kSequential, ref::FloatSum::kReverse, ref::FloatSum::kLanes8,
                                 ref::FloatSum::kPairwise, ref::FloatSum::kFmaPrescaled};

}  // namespace

// Δ of a row (the largest bias move of its routed chunks) is ~ s/(x − τ) for its chunk nearest the threshold
// (s: the float rounding of x), so at γ = 1, where supports are wide, most rows hold a chunk just above the
// threshold and Δ is not small, while at γ = 1e4 most rows route one or two chunks far from it. What widens the
// check is the allowance: a near-threshold chunk carries softmax mass ~w, so lse and o barely move. The
// allowance is what must stay small; Δ is printed for the record.
TEST_CASE("the bias allowance stays small at ordinary routing temperatures") {
  for (DType dtype : {DType::kBF16, DType::kF32})
    for (int64_t d : {64, 256})
      for (int chunk : {16, 64}) {
        Case c;
        c.dtype = dtype;
        c.d = d;
        c.chunk = chunk;
        c.gamma = 1.0f;
        c.prior = PriorMode::kRaw;
        const Routed raw = route_case(c);
        const std::string what =
            std::string(dtype_name(dtype)) + " d " + std::to_string(d) + " C " + std::to_string(chunk);
        INFO(what);
        std::vector<double> deltas = raw.budget.row;
        std::sort(deltas.begin(), deltas.end());
        const int64_t rows = static_cast<int64_t>(deltas.size());
        const int64_t near_threshold = deltas.end() - std::lower_bound(deltas.begin(), deltas.end(), 1e-3);
        int64_t vanishing = 0;
        for (int64_t i = 0; i < raw.rt.n_q; ++i)
          for (int64_t kv = 0; kv < raw.rt.h_kv; ++kv) vanishing += vanishing_chunk(raw, i, kv);
        const ref::Allowance allow = ref::bias_allowance(raw.seq, raw.rt, raw.m, raw.budget);
        const double max_lse = *std::max_element(allow.lse.begin(), allow.lse.end());
        const double max_o = *std::max_element(allow.o.begin(), allow.o.end());
        MESSAGE("gamma 1 raw, " << what << ": budget median " << deltas[rows / 2] << ", 99th percentile "
                                << deltas[rows * 99 / 100] << ", max " << deltas.back() << "; " << near_threshold
                                << " of " << rows << " rows at >= 1e-3 (" << vanishing
                                << " with a chunk that may vanish); allowance max lse " << max_lse << ", o " << max_o);
        CHECK(max_lse < 1e-3);
        CHECK(max_o < 1e-3);

        c.prior = PriorMode::kEstimateDiagonal;  // the paper's setting, σ = 1e8: nothing moves
        const Routed paper = route_case(c);
        const ref::Allowance paper_allow = ref::bias_allowance(paper.seq, paper.rt, paper.m, paper.budget);
        CHECK(paper.budget.max_delta() < 1e-6);
        CHECK(*std::max_element(paper_allow.lse.begin(), paper_allow.lse.end()) < 1e-7);
        CHECK(*std::max_element(paper_allow.o.begin(), paper_allow.o.end()) < 1e-7);
        c.prior = PriorMode::kNone;
        CHECK(route_case(c).budget.max_delta() == 0.0);
      }
}

TEST_CASE("a head routed to a single chunk gets a budget of the order of its x rounding, not more") {
  // Stage 1 sets τ = x − 1 from its own x; a backend's Stage 2 may recompute x with other rounding, so ŵ = 1 holds
  // only up to (1 ± δx)^p: the budget must be that small, not the cap, even at gamma 1e4.
  Case c;
  c.h_q = c.h_kv = 2;
  c.gamma = 1e4f;
  c.alpha = 1.5f;
  const Routed r = route_case(c);
  int64_t single = 0;
  double largest = 0.0;
  for (int64_t i = 0; i < r.rt.n_q; ++i)
    for (int64_t kv = 0; kv < r.rt.h_kv; ++kv) {
      int64_t routed = 0;
      for (int64_t ch = 0; ch < r.rt.diagonal[i]; ++ch) routed += r.rt.routed(i, kv, ch);
      if (routed != 1) continue;
      ++single;
      largest = std::max(largest, r.budget.delta(i, kv));
    }
  MESSAGE(single << " single-chunk rows at gamma 1e4, largest budget " << largest);
  CHECK(single > 100);
  // p·2δx with δx the float dot-product bound at |x| ~ 1e3..1e4: well below 1, far from the cap of 50.
  CHECK(largest < 1.0);
}

TEST_CASE("float routings that sum x in any order stay inside the bias budget") {
  std::vector<double> deltas[2];  // row budgets at γ = 1 and γ = 1e4
  for (float gamma : {1.0f, 1e4f})
    for (PriorMode prior : {PriorMode::kRaw, PriorMode::kEstimateDiagonal})
      for (float alpha : {1.5f, 2.0f, 1.25f})
        for (DType dtype : {DType::kBF16, DType::kF32}) {
          const uint64_t seed = dtype == DType::kBF16 ? 3 : 4;
          Case c;
          c.n = 600;
          c.gamma = gamma;
          c.prior = prior;
          c.alpha = alpha;
          c.sigma = 1.0f;
          c.dtype = dtype;
          c.seed = seed;
          c.d = seed == 3 ? 128 : 64;
          c.h_q = 16;
          const Routed r = route_case(c);
          deltas[gamma > 1.0f].insert(deltas[gamma > 1.0f].end(), r.budget.row.begin(), r.budget.row.end());
          int64_t rows = 0, outside = 0;
          double largest_move = 0.0;
          for (ref::FloatSum order : kOrders) {
            const ref::Routing f = ref::route_same_precision(r.seq, r.summaries, r.m, 0, order);
            for (int64_t i = 0; i < f.n_q; ++i)
              for (int64_t kv = 0; kv < f.h_kv; ++kv) {
                if (!same_routed_set(r.rt, f, i, kv)) continue;  // a mask flip: the check excludes the row
                ++rows;
                for (int64_t ch = 0; ch < f.diagonal[i]; ++ch) {
                  if (!r.rt.routed(i, kv, ch)) continue;
                  const size_t at = r.budget.at(i, kv, ch);
                  const double log_ratio = std::log(f.w(i, kv, ch) / r.rt.w(i, kv, ch));
                  const double move = ref::prior_bias_of(f, r.m, i, kv, ch) - ref::prior_bias_of(r.rt, r.m, i, kv, ch);
                  largest_move = std::max(largest_move, std::fabs(move));
                  const double slack = 1e-12 * (1.0 + std::fabs(ref::prior_bias_of(r.rt, r.m, i, kv, ch)));
                  const bool inside = log_ratio >= r.budget.log_ratio_lo[at] - slack &&
                                      log_ratio <= r.budget.log_ratio_hi[at] + slack &&
                                      move >= r.budget.lo[at] - slack && move <= r.budget.hi[at] + slack;
                  if (!inside && ++outside <= 3)
                    MESSAGE("outside: query " << i << " kv " << kv << " chunk " << ch << " log(w'/w) " << log_ratio
                                              << " in [" << r.budget.log_ratio_lo[at] << ", "
                                              << r.budget.log_ratio_hi[at] << "], bias move " << move << " in ["
                                              << r.budget.lo[at] << ", " << r.budget.hi[at] << "]");
                }
              }
          }
          INFO("gamma " << gamma << " prior " << std::string(prior_mode_name(prior)) << " alpha " << alpha << " "
                        << std::string(dtype_name(dtype)) << " seed " << seed);
          CHECK(outside == 0);
          CHECK(rows > 0);
          if (gamma > 1.0f && dtype == DType::kBF16)
            MESSAGE("gamma 1e4 " << std::string(prior_mode_name(prior)) << " alpha " << alpha
                                 << ": largest bias move of "
                                 << "another summation order " << largest_move << ", budget " << r.budget.max_delta());
        }
  for (int k = 0; k < 2; ++k) {
    std::sort(deltas[k].begin(), deltas[k].end());
    const size_t n = deltas[k].size();
    MESSAGE("row budgets at gamma " << std::string(k ? "1e4" : "1")
                                    << " (raw and estimate_diagonal with sigma 1): median " << deltas[k][n / 2]
                                    << ", 90th percentile " << deltas[k][n * 9 / 10] << ", 99th "
                                    << deltas[k][n * 99 / 100] << ", max " << deltas[k].back());
  }
}

// Kernels that are exact except for their x: one that sums x in lanes, one whose x errs by up to 0.9 of the
// float error bound with random signs. The check must pass both; the second shows the budget is needed (the
// strict rule alone would fail it), which is what a GPU whose dot products round differently runs into.
TEST_CASE("the check passes outputs whose routing x rounds differently") {
  // f32 problems: they need the CPU backend (the GPU backends take bf16/f16 only).
  Backend* cpu = Registry::instance().find("cpu");
  if (!cpu || !cpu->probe().available) {
    MESSAGE("skipped: the checker's f32 self-test needs the cpu backend, which this build lacks");
    return;
  }
  Backend& be = *cpu;
  int64_t needed_by_bound = 0;
  for (PriorMode prior : {PriorMode::kRaw, PriorMode::kEstimateDiagonal})
    for (uint64_t seed : {7u, 8u}) {
      Case c;
      c.n = 600;
      c.gamma = 1e4f;
      c.sigma = 1.0f;
      c.prior = prior;
      c.seed = seed;
      c.h_q = 16;
      c.d = seed == 7 ? 64 : 128;
      c.dtype = DType::kF32;
      const ref::Problem pr = ref::make_problem(c.spec());
      const MethodParams method = c.method();
      ref::RunOptions opt;
      opt.out_dtype = DType::kF32;
      const ref::RunResult run = ref::run_forward(be, pr, method, opt);
      REQUIRE_FALSE(run.unsupported);
      REQUIRE(ref::check_forward(pr, method, run.out).pass());

      const ref::Sequence seq = pr.sequence(0);
      const ref::Method m = ref::Method::from(method);
      const std::vector<double> summaries = ref::checked_summaries(pr, method, run.out, 0);
      const int64_t words = run.out.mask.view.shape[3];
      const ref::Routing exact = ref::route(seq, summaries, m, words);

      std::vector<double> x = exact.x;
      std::mt19937_64 rng(seed);
      const int64_t nc = exact.num_complete;
      for (int64_t i = 0; i < exact.n_q; ++i)
        for (int64_t h = 0; h < exact.h_q; ++h)
          for (int64_t ch = 0; ch < exact.diagonal[i]; ++ch)
            x[(i * exact.h_q + h) * nc + ch] += (rng() % 2 ? 0.9 : -0.9) * exact.float_x_error(i, h, seq.d);
      const ref::Routing kernels[] = {ref::route_same_precision(seq, summaries, m, words, ref::FloatSum::kLanes8),
                                      ref::reroute(exact, x, m)};
      const char* names[] = {"x summed in lanes", "x off by 0.9 of the bound"};

      for (int k = 0; k < 2; ++k) {
        const ref::Attention a = ref::attend(seq, kernels[k], m);
        ref::ForwardOutputs emulated = run.out;
        int64_t replaced = 0;
        for (int64_t i = 0; i < seq.n_q; ++i)
          for (int64_t h = 0; h < seq.h_q; ++h) {
            if (!same_routed_set(exact, kernels[k], i, h / seq.group())) continue;  // a flip: the backend's row
            ++replaced;
            static_cast<float*>(emulated.lse.view.data)[emulated.lse.view.offset(0, h, i)] =
                static_cast<float>(a.lse[i * seq.h_q + h]);
            for (int64_t e = 0; e < seq.d; ++e)
              static_cast<float*>(emulated.o.view.data)[emulated.o.view.offset(0, i, h, e)] =
                  static_cast<float>(a.o[(i * seq.h_q + h) * seq.d + e]);
          }
        const ref::CheckReport rep = ref::check_forward(pr, method, emulated);
        const std::string what = std::string(prior_mode_name(prior)) + " seed " + std::to_string(seed) + ", " +
                                 names[k] + ": " + std::to_string(replaced) + " head rows emulated";
        INFO(what);
        CHECK_MESSAGE(rep.pass(), rep.summary());
        MESSAGE(what << "; " << rep.summary());
        if (k == 1) needed_by_bound += rep.budget_needed_rows;
      }
    }
  CHECK(needed_by_bound > 0);
}
