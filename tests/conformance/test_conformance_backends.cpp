// Every available backend against the float64 reference on a fixed, seeded sample of the parameter grid.
//
// The full grid (lengths × decode shapes × chunk sizes × GQA × head dims × dtypes × priors × layouts × γ × α …)
// has millions of points; ~150 are drawn so that every value of every axis appears at least once and the
// scalar float64 reference stays within a minute on two cores. Unavailable backends are reported, not counted.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "dashattn/dashattn.h"
#include "reference/checks.h"

using namespace dashattn;

namespace {

const std::vector<int64_t> kLengths = {1, 63, 64, 65, 200, 1000};
enum class QueryShape { kPrefill, kOne, kThree };
const std::vector<QueryShape> kQueryShapes = {QueryShape::kPrefill, QueryShape::kOne, QueryShape::kThree};
const std::vector<int> kChunks = {16, 32, 64, 128};
const std::vector<int64_t> kGroups = {1, 4, 8, 16};
const std::vector<int64_t> kKvHeads = {1, 2};
const std::vector<int64_t> kHeadDims = {64, 128, 256};
const std::vector<DType> kDtypes = {DType::kF32, DType::kBF16, DType::kF16};
const std::vector<PriorMode> kPriors = {PriorMode::kEstimateDiagonal, PriorMode::kRaw, PriorMode::kNone};
const std::vector<ref::Layout> kLayouts = {ref::Layout::kBNHD, ref::Layout::kBHND};
const std::vector<float> kGammas = {0.0f, 1.0f, 12.0f, 1e4f};  // 0 routes everything; 1e4 routes ~one chunk
const std::vector<float> kAlphas = {1.5f, 2.0f, 1.25f};
const std::vector<float> kSigmas = {1e8f, 1.0f};
const std::vector<int64_t> kBatches = {1, 2};
const std::vector<bool> kBools = {false, true};
const std::vector<float> kScales = {0.0f, 0.3f};  // 0 selects 1/sqrt(d); Stage 0/1 always use 1/sqrt(d)

constexpr int kAxes = 16;
const size_t kAxisSizes[kAxes] = {kLengths.size(), kQueryShapes.size(), kChunks.size(), kGroups.size(),
                                  kKvHeads.size(), kHeadDims.size(), kDtypes.size(), kPriors.size(),
                                  kLayouts.size(), kGammas.size(), kAlphas.size(), kSigmas.size(),
                                  kBatches.size(), kBools.size() /*f32 output*/, kBools.size() /*mean pooling*/,
                                  kScales.size()};

struct Combo {
  size_t pick[kAxes];
  int64_t n() const { return kLengths[pick[0]]; }
  int64_t n_q() const {
    switch (kQueryShapes[pick[1]]) {
      case QueryShape::kOne: return 1;
      case QueryShape::kThree: return std::min<int64_t>(3, n());
      default: return n();
    }
  }
  int chunk() const { return kChunks[pick[2]]; }
  int64_t h_kv() const { return kKvHeads[pick[4]]; }
  int64_t h_q() const { return kGroups[pick[3]] * h_kv(); }
  int64_t d() const { return kHeadDims[pick[5]]; }
  DType dtype() const { return kDtypes[pick[6]]; }
  PriorMode prior() const { return kPriors[pick[7]]; }
  ref::Layout layout() const { return kLayouts[pick[8]]; }
  float gamma() const { return kGammas[pick[9]]; }
  float alpha() const { return kAlphas[pick[10]]; }
  float sigma() const { return kSigmas[pick[11]]; }
  int64_t batch() const { return kBatches[pick[12]]; }
  bool f32_out() const { return kBools[pick[13]]; }
  bool mean_pooling() const { return kBools[pick[14]]; }
  float scale() const { return kScales[pick[15]]; }

  // Work of the scalar reference: attended keys × heads × head dim, over the batch.
  double cost() const { return double(batch()) * n_q() * (n() - n_q() / 2.0) * h_q() * d(); }

  std::string describe() const {
    std::ostringstream os;
    os << "b " << batch() << " n_q " << n_q() << " n_k " << n() << " C " << chunk() << " h_q " << h_q() << " h_kv "
       << h_kv() << " d " << d() << " " << dtype_name(dtype()) << (f32_out() ? "->f32" : "") << " prior "
       << prior_mode_name(prior()) << " sigma " << sigma() << " gamma " << gamma() << " alpha " << alpha()
       << (layout() == ref::Layout::kBHND ? " bhnd" : " bnhd") << (mean_pooling() ? " mean-pooling" : "")
       << " scale " << scale();
    return os.str();
  }
};

constexpr double kCostBudget = 1e8;

// Every value of every axis once (the other axes drawn at random within the budget), then random combos.
std::vector<Combo> sample_grid(size_t total, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto draw = [&](Combo& c, int fixed_axis) {
    for (int a = 0; a < kAxes; ++a)
      if (a != fixed_axis) c.pick[a] = rng() % kAxisSizes[a];
  };
  std::vector<Combo> out;
  for (int a = 0; a < kAxes; ++a) {
    for (size_t v = 0; v < kAxisSizes[a]; ++v) {
      Combo c{};
      c.pick[a] = v;
      do draw(c, a); while (c.cost() > kCostBudget);
      out.push_back(c);
    }
  }
  while (out.size() < total) {
    Combo c{};
    do draw(c, -1); while (c.cost() > kCostBudget);
    out.push_back(c);
  }
  return out;
}

ref::Problem make_problem_for(const Combo& c, uint64_t seed) {
  ref::ProblemSpec spec;
  spec.batch = c.batch();
  spec.n_q = c.n_q();
  spec.n_k = c.n();
  spec.h_q = c.h_q();
  spec.h_kv = c.h_kv();
  spec.d = c.d();
  spec.dtype = c.dtype();
  spec.layout = c.layout();
  spec.zero_summary_query = c.mean_pooling();
  spec.seed = seed;
  return ref::make_problem(spec);
}

MethodParams method_for(const Combo& c) {
  MethodParams m;
  m.chunk_size = c.chunk();
  m.alpha = c.alpha();
  m.gamma = c.gamma();
  m.sigma = c.sigma();
  m.prior = c.prior();
  m.scale = c.scale();
  return m;
}

}  // namespace

TEST_CASE("the grid sample covers every value of every axis") {
  const std::vector<Combo> grid = sample_grid(150, 20240611);
  CHECK(grid.size() == 150);
  for (int a = 0; a < kAxes; ++a)
    for (size_t v = 0; v < kAxisSizes[a]; ++v) {
      bool seen = false;
      for (const Combo& c : grid) seen = seen || c.pick[a] == v;
      INFO("axis " << a << " value " << v);
      CHECK(seen);
    }
}

TEST_CASE("every available backend matches the float64 reference") {
  std::vector<std::string> unavailable;
  const std::vector<Backend*> backends = ref::available_backends(&unavailable);
  for (const std::string& line : unavailable) MESSAGE("backend unavailable, skipped (not counted): " << line);
  REQUIRE_MESSAGE(!backends.empty(), "no backend is available");

  const std::vector<Combo> grid = sample_grid(150, 20240611);
  for (Backend* be : backends) {
    int passed = 0, failed = 0, unsupported = 0;
    int64_t tie_flips = 0, near_tie_flips = 0, ties_seen = 0;
    // Bias budget per γ value: largest Δ, largest lse allowance, rows widened and rows that needed it.
    double gamma_delta[4] = {}, gamma_lse_allowance[4] = {};
    int64_t gamma_widened[4] = {}, gamma_needed[4] = {}, gamma_rows[4] = {};
    const std::string name = be->name();
    for (size_t idx = 0; idx < grid.size(); ++idx) {
      const Combo& c = grid[idx];
      const ref::Problem pr = make_problem_for(c, 1000 + idx);
      const MethodParams method = method_for(c);
      ref::RunOptions opt;
      opt.out_dtype = c.f32_out() ? DType::kF32 : c.dtype();
      const ref::RunResult run = ref::run_forward(*be, pr, method, opt);
      INFO(name << " combo " << idx << ": " << c.describe());
      if (run.unsupported) {
        ++unsupported;
        MESSAGE(name << " unsupported, skipped (not counted): combo " << idx << ": " << run.reason);
        // The CPU backend is the baseline: it must run every point of the contract's grid.
        CHECK(be->device_type() != DeviceType::kCpu);
        continue;
      }
      ref::CheckOptions copt;
      copt.dense_too = c.gamma() == 0.0f && c.prior() == PriorMode::kNone;
      const ref::CheckReport rep = ref::check_forward(pr, method, run.out, copt);
      tie_flips += rep.tie_flips;
      near_tie_flips += rep.near_tie_flips;
      ties_seen += rep.ties_seen;
      const size_t gi = c.pick[9];
      gamma_delta[gi] = std::max(gamma_delta[gi], rep.max_budget);
      gamma_lse_allowance[gi] = std::max(gamma_lse_allowance[gi], rep.lse.max_allowance);
      gamma_widened[gi] += rep.widened_rows;
      gamma_needed[gi] += rep.budget_needed_rows;
      gamma_rows[gi] += rep.rows;
      for (const std::string& t : rep.tie_lines) MESSAGE(name << " combo " << idx << " flip, excluded: " << t);
      std::string failures;
      for (const std::string& f : rep.failures) failures += "\n  " + f;
      CHECK_MESSAGE(rep.pass(), rep.summary() << failures);
      rep.pass() ? ++passed : ++failed;

      // Every fifth point again with summaries and routing left to the workspace: same outputs.
      if (idx % 5 == 0) {
        ref::RunOptions lean = opt;
        lean.caller_summaries = false;
        lean.routing_outputs = false;
        const ref::RunResult again = ref::run_forward(*be, pr, method, lean);
        REQUIRE_FALSE(again.unsupported);
        int64_t disagree = 0, not_bitwise = 0;
        const TensorView& a = run.out.o.view;
        for (int64_t b = 0; b < a.shape[0]; ++b)
          for (int64_t i = 0; i < a.shape[1]; ++i)
            for (int64_t h = 0; h < a.shape[2]; ++h)
              for (int64_t e = 0; e < a.shape[3]; ++e) {
                const double x = ref::load_element(a, b, i, h, e), y = ref::load_element(again.out.o.view, b, i, h, e);
                disagree += ref::agree_across_paths(x, y, opt.out_dtype) ? 0 : 1;
                not_bitwise += x != y;
              }
        CHECK_MESSAGE(disagree == 0, "workspace-only run differs in " << disagree << " elements");
        if (not_bitwise > 0) MESSAGE(name << " combo " << idx << ": workspace-only run not bitwise in " << not_bitwise);
      }
    }
    MESSAGE(name << ": " << passed << " passed, " << failed << " failed, " << unsupported << " unsupported (skipped); "
                 << tie_flips << " tie flips of " << ties_seen << " ties, " << near_tie_flips
                 << " flips within float rounding of x");
    for (size_t gi = 0; gi < kGammas.size(); ++gi)
      MESSAGE(name << " gamma " << kGammas[gi] << ": bias budget Δ up to " << gamma_delta[gi]
                   << ", lse allowance up to " << gamma_lse_allowance[gi] << ", " << gamma_widened[gi] << " of "
                   << gamma_rows[gi] << " rows widened, " << gamma_needed[gi] << " rows needed it");
    CHECK(passed > 0);
  }
}

// The checker itself must fail on wrong outputs, or the conformance above proves nothing.
TEST_CASE("the conformance check rejects wrong outputs") {
  const std::vector<Backend*> backends = ref::available_backends();
  REQUIRE(!backends.empty());
  Backend& be = *backends.front();
  ref::ProblemSpec spec;
  spec.n_q = spec.n_k = 300;
  spec.h_q = 8;
  spec.h_kv = 2;
  spec.d = 64;
  spec.dtype = DType::kBF16;
  spec.seed = 42;
  const ref::Problem pr = ref::make_problem(spec);
  MethodParams method;
  method.chunk_size = 16;
  method.gamma = 12.0f;
  method.sigma = 1.0f;
  ref::RunOptions opt;
  opt.out_dtype = DType::kBF16;
  const ref::RunResult run = ref::run_forward(be, pr, method, opt);
  REQUIRE_FALSE(run.unsupported);
  REQUIRE(ref::check_forward(pr, method, run.out).pass());

  SUBCASE("a different prior strength") {
    MethodParams other = method;
    other.sigma = 1e8f;
    CHECK_FALSE(ref::check_forward(pr, other, run.out).pass());
  }
  SUBCASE("a different prior mode") {
    MethodParams other = method;
    other.prior = PriorMode::kRaw;
    CHECK_FALSE(ref::check_forward(pr, other, run.out).pass());
  }
  SUBCASE("one mask bit flipped") {
    ref::ForwardOutputs bad = run.out;
    // Query 299 of KV head 1 has 18 routable chunks; flip chunk 3 of its row.
    uint32_t* word = static_cast<uint32_t*>(bad.mask.view.data) + bad.mask.view.offset(0, 1, 299, 0);
    *word ^= 1u << 3;
    const ref::CheckReport rep = ref::check_forward(pr, method, bad);
    CHECK_FALSE(rep.pass());
  }
  SUBCASE("one output element off by a few bf16 ulps") {
    ref::ForwardOutputs bad = run.out;
    const int64_t at = bad.o.view.offset(0, 200, 5, 17);
    const float v = ref::load_element(bad.o.view, 0, 200, 5, 17);
    store_from_float(bad.o.bytes.data() + at * 2, DType::kBF16, v + 0.05f);
    CHECK_FALSE(ref::check_forward(pr, method, bad).pass());
  }
  SUBCASE("one summary element off by 0.02") {
    ref::ForwardOutputs bad = run.out;
    const int64_t at = bad.summaries.view.offset(0, 7, 1, 33);
    const float v = ref::load_element(bad.summaries.view, 0, 7, 1, 33);
    store_from_float(bad.summaries.bytes.data() + at * 2, DType::kBF16, v + 0.02f);
    CHECK_FALSE(ref::check_forward(pr, method, bad).pass());
  }
  SUBCASE("an lse off by 1e-3 beyond its bias budget") {
    // σ = 1 couples every routed chunk's bias to μ, so this row's lse may legitimately move by its allowance
    // (about 1e-3 here); rows without budget are shown to catch a bare 1e-3 in the test below.
    const ref::Sequence seq = pr.sequence(0);
    const ref::Method m = ref::Method::from(method);
    const ref::Routing rt = ref::route(seq, ref::checked_summaries(pr, method, run.out, 0), m,
                                       run.out.mask.view.shape[3]);
    const ref::Allowance allow = ref::bias_allowance(seq, rt, m, ref::bias_budget(rt, m, seq.d));
    ref::ForwardOutputs bad = run.out;
    float* lse = static_cast<float*>(bad.lse.view.data);
    lse[bad.lse.view.offset(0, 3, 250)] += static_cast<float>(1e-3 + allow.lse[250 * seq.h_q + 3]);
    CHECK_FALSE(ref::check_forward(pr, method, bad).pass());
  }
}

// Where the bias budget widens the check (γ = 1e4, raw prior: log w near the threshold), it still rejects a
// wrong bias and any error beyond an element's own allowance, and rows without budget stay as strict as before.
TEST_CASE("the conformance check rejects wrong outputs where the bias budget applies") {
  // An f32 problem: it needs the CPU backend (the GPU backends take bf16/f16 only). CI always builds it; a
  // GPU-only build reports the skip instead of passing silently.
  Backend* cpu = Registry::instance().find("cpu");
  if (!cpu || !cpu->probe().available) {
    MESSAGE("skipped: the checker's f32 self-test needs the cpu backend, which this build lacks");
    return;
  }
  Backend& be = *cpu;
  ref::ProblemSpec spec;
  spec.n_q = spec.n_k = 400;
  spec.h_q = 16;
  spec.h_kv = 2;
  spec.d = 64;
  spec.dtype = DType::kF32;
  spec.seed = 7;
  const ref::Problem pr = ref::make_problem(spec);
  MethodParams method;
  method.chunk_size = 16;
  method.gamma = 1e4f;
  method.prior = PriorMode::kRaw;
  ref::RunOptions opt;
  opt.out_dtype = DType::kF32;
  const ref::RunResult run = ref::run_forward(be, pr, method, opt);
  REQUIRE_FALSE(run.unsupported);
  const ref::CheckReport good = ref::check_forward(pr, method, run.out);
  REQUIRE_MESSAGE(good.pass(), good.summary());
  MESSAGE(good.summary());

  // The allowances the check grants, element by element.
  const ref::Sequence seq = pr.sequence(0);
  const ref::Method m = ref::Method::from(method);
  const int64_t words = run.out.mask.view.shape[3];
  const ref::Routing rt = ref::route(seq, ref::checked_summaries(pr, method, run.out, 0), m, words);
  const ref::BiasBudget budget = ref::bias_budget(rt, m, seq.d);
  const ref::Allowance allow = ref::bias_allowance(seq, rt, m, budget);
  REQUIRE(budget.max_delta() > 1e-3);  // the budget is in play here, or this case proves nothing
  size_t widest = 0, narrowest = 0;
  for (size_t k = 0; k < allow.lse.size(); ++k) {
    if (allow.lse[k] > allow.lse[widest]) widest = k;
    if (rt.diagonal[k / seq.h_q] > 1 && allow.lse[k] < allow.lse[narrowest]) narrowest = k;
  }
  REQUIRE(allow.lse[widest] > 1e-4);
  REQUIRE(allow.lse[narrowest] < 1e-5);
  auto lse_at = [](ref::ForwardOutputs& o, size_t k, int64_t h_q) -> float& {
    return static_cast<float*>(o.lse.view.data)[o.lse.view.offset(0, static_cast<int64_t>(k) % h_q,
                                                                  static_cast<int64_t>(k) / h_q)];
  };
  // A shift that adds to the element's existing error, so the error grows by all of it.
  const ref::Attention want = ref::attend(seq, rt, m);
  auto away = [](double got, double reference, double shift) { return got >= reference ? shift : -shift; };

  SUBCASE("the bias with the wrong sign") {
    ref::Routing flipped = rt;  // raw bias log w becomes −log w
    for (double& w : flipped.weight)
      if (w > 0.0) w = 1.0 / w;
    const ref::Attention a = ref::attend(seq, flipped, m);
    ref::ForwardOutputs bad = run.out;
    for (int64_t i = 0; i < seq.n_q; ++i)
      for (int64_t h = 0; h < seq.h_q; ++h) {
        lse_at(bad, i * seq.h_q + h, seq.h_q) = static_cast<float>(a.lse[i * seq.h_q + h]);
        for (int64_t e = 0; e < seq.d; ++e)
          static_cast<float*>(bad.o.view.data)[bad.o.view.offset(0, i, h, e)] =
              static_cast<float>(a.o[(i * seq.h_q + h) * seq.d + e]);
      }
    CHECK_FALSE(ref::check_forward(pr, method, bad).pass());
  }
  SUBCASE("the most widened lse off by twice its allowance plus the strict bound") {
    ref::ForwardOutputs bad = run.out;
    const double shift = 2.0 * allow.lse[widest] + good.lse.strict_bound();
    float& l = lse_at(bad, widest, seq.h_q);
    l += static_cast<float>(away(l, want.lse[widest], shift));
    CHECK_FALSE(ref::check_forward(pr, method, bad).pass());
  }
  SUBCASE("an lse without budget off by 1e-3") {
    ref::ForwardOutputs bad = run.out;
    float& l = lse_at(bad, narrowest, seq.h_q);
    l += static_cast<float>(away(l, want.lse[narrowest], 1e-3));
    CHECK_FALSE(ref::check_forward(pr, method, bad).pass());
  }
  SUBCASE("an o element of the most widened row off by twice its allowance plus the strict bound") {
    ref::ForwardOutputs bad = run.out;
    const int64_t i = static_cast<int64_t>(widest) / seq.h_q, h = static_cast<int64_t>(widest) % seq.h_q;
    const double shift = 2.0 * allow.o[widest * seq.d + 5] + good.o.strict_bound();
    float& o = static_cast<float*>(bad.o.view.data)[bad.o.view.offset(0, i, h, 5)];
    o += static_cast<float>(away(o, want.o[widest * seq.d + 5], shift));
    CHECK_FALSE(ref::check_forward(pr, method, bad).pass());
  }
}

// The reference-compatible solver (3 Halley steps) is for A/B comparisons: it may move a few routing decisions
// near the threshold, but the outputs stay finite and close to the exact routing's.
TEST_CASE("the reference-compatible entmax solver runs on every backend and stays close to exact routing") {
  ref::ProblemSpec spec;
  spec.n_q = spec.n_k = 400;
  spec.h_q = 16;
  spec.h_kv = 1;
  spec.d = 128;
  spec.dtype = DType::kBF16;
  spec.seed = 5;
  const ref::Problem pr = ref::make_problem(spec);
  MethodParams method;
  method.chunk_size = 16;
  method.gamma = 12.0f;
  method.solver = EntmaxSolver::kReference;
  for (Backend* be : ref::available_backends()) {
    const std::string name = be->name();
    ref::RunOptions opt;
    opt.out_dtype = DType::kBF16;
    const ref::RunResult run = ref::run_forward(*be, pr, method, opt);
    if (run.unsupported) {
      MESSAGE(name << " unsupported, skipped (not counted): " << run.reason);
      continue;
    }
    const ref::CheckReport rep = ref::check_forward(pr, method, run.out);
    // Mask flips against the exact routing are allowed here; they are listed for the A/B record.
    int64_t mask_lines = 0;
    for (const std::string& f : rep.failures) mask_lines += f.rfind("mask", 0) == 0 ? 1 : 0;
    MESSAGE(name << ": 3-step solver, " << mask_lines << " mask differences listed (at most 12); " << rep.summary());
    CHECK(rep.o.got.nonfinite == 0);
    CHECK(rep.o.got.max_abs <= 0.1);
  }
}
