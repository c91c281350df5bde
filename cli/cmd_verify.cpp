// dashattn verify: every available backend against the float64 reference of verify_reference.cpp, over a grid of
// shapes, dtypes and method settings (or over the tensors of a given file).
//
// What is checked, stage by stage:
//  - Stage 0: each summary within one unit in the last place of the key dtype (plus float32 accumulation) of the
//    float64 summary rounded the same way.
//  - Stage 1: routing recomputed in float64 from the backend's own summaries, so a Stage-0 rounding difference
//    cannot masquerade as a routing error; every mask bit must agree except ties (chunks within float32 rounding
//    of the threshold), which are counted separately, and active_chunks must match the mask.
//  - Stage 2: o and lse against float64, with a tolerance of twice the error of the same computation done
//    naively in float32 (o rounded to the dtype) plus one unit of the dtype, FlashAttention's habit. Rows whose
//    mask differs by a tie are left out of the error figures (they attend a different key set by contract).
// A file with a batch layout (lengths, packed sequences, a paged cache) runs as one batch and is compared sequence
// by sequence, each on its own contiguous keys (sequences.h), since the reference knows equal-length batches only.
#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <iostream>
#include <memory>

#include "commands.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"
#include "report.h"
#include "sequences.h"
#include "tensor_input.h"
#include "verify_reference.h"

namespace dashattn::cli {
namespace {

struct VerifyOptions {
  std::string backend = "all";
  CLI::Option* backend_flag = nullptr;
  bool json = false;
  MethodOptions method;
  InputOptions input;
  uint64_t seed = 1;
};

struct Case {
  std::string name;
  synthetic::Config config;
  int64_t n_q = 0;  // 0: all queries
  DType dtype = DType::kF32;
  int chunk = 64;
  float alpha = 1.5f;
  PriorMode prior = PriorMode::kEstimateDiagonal;
  float sigma = 1e8f;
};

Case make_case(int64_t b, int64_t n, int64_t n_q, int64_t hq, int64_t hkv, int64_t d, int chunk, DType dtype,
               float alpha, PriorMode prior, float sigma) {
  Case c;
  c.config.batch = b;
  c.config.n = n;
  c.config.h_q = hq;
  c.config.h_kv = hkv;
  c.config.d = d;
  c.config.chunk = chunk;
  c.config.num_needles = 2;
  c.config.needle_queries = 16;
  c.n_q = n_q;
  c.dtype = dtype;
  c.chunk = chunk;
  c.alpha = alpha;
  c.prior = prior;
  c.sigma = sigma;
  c.name = "b" + std::to_string(b) + " n" + (n_q > 0 ? std::to_string(n_q) + "/" : "") + std::to_string(n) + " h" +
           std::to_string(hq) + "/" + std::to_string(hkv) + " d" + std::to_string(d) + " C" + std::to_string(chunk) +
           " " + dtype_name(dtype) + " a" + format_general(alpha, 3) + " " +
           (prior == PriorMode::kEstimateDiagonal ? "est s" + format_general(sigma, 2) : prior_mode_name(prior));
  return c;
}

// Head dims 64/128/256, chunk sizes 16-128, every dtype and prior mode, GQA groups 1-4, partial last chunks,
// batches, and a decode-shaped problem (few queries over a long cache).
std::vector<Case> default_grid() {
  using P = PriorMode;
  return {
      make_case(1, 512, 0, 4, 2, 64, 64, DType::kF32, 1.5f, P::kEstimateDiagonal, 1e8f),
      make_case(2, 300, 0, 4, 1, 128, 32, DType::kBF16, 1.5f, P::kRaw, 1e8f),
      make_case(1, 256, 0, 2, 2, 64, 16, DType::kF16, 2.0f, P::kEstimateDiagonal, 1.0f),
      make_case(1, 700, 5, 8, 2, 128, 64, DType::kBF16, 1.5f, P::kEstimateDiagonal, 1e8f),
      make_case(1, 384, 0, 6, 3, 256, 128, DType::kF32, 1.7f, P::kNone, 1e8f),
      make_case(1, 1000, 0, 4, 2, 64, 32, DType::kBF16, 1.5f, P::kEstimateDiagonal, 0.5f),
      make_case(1, 200, 0, 4, 4, 64, 16, DType::kF32, 1.5f, P::kRaw, 1e8f),
  };
}

struct Result {
  std::string backend, name;
  bool skipped = false;
  std::string skip_reason;
  double summary_max_err = 0;
  int64_t summary_violations = 0;
  int64_t mask_errors = 0, tie_flips = 0, active_errors = 0, rows_excluded = 0, rows_over_tolerance = 0;
  double o_max = 0, o_mean = 0, o_tol = 0, lse_max = 0, lse_tol = 0;
  double o_sum = 0;  // of the errors behind o_mean
  int64_t o_count = 0;
  bool passed = true;
};

double dtype_unit(DType t) { return t == DType::kBF16 ? 0x1.0p-8 : t == DType::kF16 ? 0x1.0p-11 : 0x1.0p-23; }

reference::Problem reference_problem(const HostProblem& h, const MethodParams& method) {
  reference::Problem p;
  p.batch = h.batch();
  p.n_q = h.n_q();
  p.n_k = h.n_k();
  p.h_q = h.h_q();
  p.h_kv = h.h_kv();
  p.d = h.d();
  p.dtype = h.dtype();
  p.method = method;
  auto widen = [](const io::Tensor& t) {
    const std::vector<float> f = to_float(t);
    return std::vector<double>(f.begin(), f.end());
  };
  p.q = widen(h.q);
  p.k = widen(h.k);
  p.v = widen(h.v);
  p.summary_query = h.has_summary_query() ? widen(h.summary_query)
                                          : std::vector<double>(static_cast<size_t>(p.h_kv * p.d), 0.0);
  return p;
}

// Adds one contiguous problem's comparison with the float64 reference to res (errors and tolerances take the
// maximum, counts add up).
void compare_with_reference(Result& res, const HostProblem& host, const ForwardOutputs& out,
                            const MethodParams& method) {
  const reference::Problem ref = reference_problem(host, method);
  const int64_t C = method.chunk_size, nc = ref.complete_chunks(), g = ref.h_q / ref.h_kv;

  // Stage 0.
  const std::vector<double> ref_sum = reference::summaries(ref);
  const std::vector<float> be_sum = to_float(out.summaries);
  double max_key = 0;
  for (double v : ref.k) max_key = std::max(max_key, std::fabs(v));
  for (size_t i = 0; i < ref_sum.size(); ++i) {
    const double err = std::fabs(static_cast<double>(be_sum[i]) - ref_sum[i]);
    const double tol = 2.0 * dtype_unit(ref.dtype) * std::fabs(ref_sum[i]) + 1e-5 * max_key;
    res.summary_max_err = std::max(res.summary_max_err, std::isnan(err) ? INFINITY : err);
    if (!(err <= tol)) ++res.summary_violations;
  }

  // Stage 1 from the backend's summaries.
  const std::vector<double> be_sum_wide(be_sum.begin(), be_sum.end());
  const reference::Routing routing = reference::route<double>(ref, be_sum_wide);
  const uint32_t* be_mask = reinterpret_cast<const uint32_t*>(out.mask.data());
  const int32_t* be_active = reinterpret_cast<const int32_t*>(out.active.data());
  const int64_t words = out.words();
  std::vector<char> excluded(static_cast<size_t>(ref.batch * ref.h_kv * ref.n_q), 0);
  for (int64_t row = 0; row < ref.batch * ref.h_kv * ref.n_q; ++row) {
    const int64_t i = row % ref.n_q;
    const int64_t diag = (ref.n_k - ref.n_q + i) / C;
    const uint32_t* mine = be_mask + row * words;
    const uint32_t* want = &routing.mask[static_cast<size_t>(row * routing.words)];
    int64_t bits = 0;
    for (int64_t c = 0; c < words * 32; ++c) {
      const bool got = mask_bit(mine, c), expected = c < routing.words * 32 && mask_bit(want, c);
      bits += got;
      if (got == expected) continue;
      if (c < diag && c < nc && routing.tie[static_cast<size_t>(row * nc + c)]) {
        ++res.tie_flips;
        excluded[static_cast<size_t>(row)] = 1;
      } else {
        ++res.mask_errors;
      }
    }
    if (be_active[row] != bits) ++res.active_errors;
  }

  // Stage 2. The global tolerance covers the arithmetic; a row whose prior bias is ill-conditioned (a chunk
  // barely inside the support) gets its bias sensitivity on top, and is left out when the bias is unconstrained.
  const reference::Attention exact = reference::attend<double>(ref, routing);
  const reference::Attention naive = reference::attend<float>(
      ref, reference::with_weights_of(routing, reference::route<float>(ref, be_sum_wide), nc));
  const std::vector<float> o = to_float(out.o), lse = to_float(out.lse);
  double naive_o = 0, naive_lse = 0, max_o = 0, max_lse = 0, max_v = 0;
  for (double x : ref.v) max_v = std::max(max_v, std::fabs(x));
  auto o_at = [&](int64_t s, int64_t i, int64_t h, int64_t e) {
    return static_cast<size_t>(((s * ref.n_q + i) * ref.h_q + h) * ref.d + e);
  };
  auto lse_at = [&](int64_t s, int64_t i, int64_t h) { return static_cast<size_t>((s * ref.h_q + h) * ref.n_q + i); };
  for (int64_t s = 0; s < ref.batch; ++s) {
    for (int64_t i = 0; i < ref.n_q; ++i) {
      for (int64_t h = 0; h < ref.h_q; ++h) {
        for (int64_t e = 0; e < ref.d; ++e) {
          const size_t at = o_at(s, i, h, e);
          naive_o = std::max(naive_o, std::fabs(naive.o[at] - exact.o[at]));
          max_o = std::max(max_o, std::fabs(exact.o[at]));
        }
        naive_lse = std::max(naive_lse, std::fabs(naive.lse[lse_at(s, i, h)] - exact.lse[lse_at(s, i, h)]));
        max_lse = std::max(max_lse, std::fabs(exact.lse[lse_at(s, i, h)]));
      }
    }
  }
  const double o_tol = 2.0 * naive_o + dtype_unit(ref.dtype) * std::max(max_o, 1e-3);
  const double lse_tol = 2.0 * naive_lse + 1e-5 * std::max(1.0, max_lse);
  res.o_tol = std::max(res.o_tol, o_tol);
  res.lse_tol = std::max(res.lse_tol, lse_tol);
  for (int64_t s = 0; s < ref.batch; ++s) {
    for (int64_t i = 0; i < ref.n_q; ++i) {
      for (int64_t h = 0; h < ref.h_q; ++h) {
        const size_t row = static_cast<size_t>((s * ref.h_kv + h / g) * ref.n_q + i);
        const double sensitivity = routing.bias_sensitivity[row];
        if (excluded[row] || sensitivity >= 1.0) {
          ++res.rows_excluded;
          continue;
        }
        double row_o = 0;
        for (int64_t e = 0; e < ref.d; ++e) {
          const size_t at = o_at(s, i, h, e);
          const double err = std::fabs(o[at] - exact.o[at]);
          row_o = std::max(row_o, std::isnan(err) ? INFINITY : err);
          res.o_sum += err;
          ++res.o_count;
        }
        const size_t at = lse_at(s, i, h);
        double row_lse = std::fabs(lse[at] - exact.lse[at]);
        if (std::isnan(row_lse)) row_lse = INFINITY;
        res.o_max = std::max(res.o_max, row_o);
        res.lse_max = std::max(res.lse_max, row_lse);
        // Moving every bias by up to delta moves lse by up to delta and o by up to 2 * delta * max|v| (first order).
        if (!(row_o <= o_tol + 2.0 * sensitivity * max_v) || !(row_lse <= lse_tol + sensitivity)) {
          ++res.rows_over_tolerance;
        }
      }
    }
  }
}

Result check(Backend& backend, const std::string& name, const HostProblem& host, const MethodParams& method) {
  Result res;
  res.backend = backend.name();
  res.name = name;
  ForwardOutputs out;
  try {
    out = run_forward(backend, host, method);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    res.skipped = true;
    res.skip_reason = e.what();
    return res;
  }
  if (!host.layout.any()) {
    compare_with_reference(res, host, out, method);
  } else {
    // Sequences of their own lengths, packed or paged: each against the reference on its own contiguous keys.
    for (int64_t s = 0; s < host.sequences(); ++s) {
      if (span_of(host, s).n_q == 0) continue;
      compare_with_reference(res, sequence_problem(host, s), sequence_outputs(host, out, s, method.chunk_size),
                             method);
    }
  }
  res.o_mean = res.o_count ? res.o_sum / static_cast<double>(res.o_count) : 0.0;
  res.passed = res.summary_violations == 0 && res.mask_errors == 0 && res.active_errors == 0 &&
               res.rows_over_tolerance == 0;
  return res;
}

std::vector<Backend*> backends_to_check(const VerifyOptions& opt) {
  const bool given = opt.backend_flag != nullptr && opt.backend_flag->count() > 0;
  std::string name = opt.backend;
  if (!given) {
    const char* env = std::getenv("DASHATTN_BACKEND");
    name = (env && *env) ? env : "all";
  }
  if (name != "all") return {&Registry::instance().select(name)};
  std::vector<Backend*> out;
  for (Backend* b : Registry::instance().all()) {
    if (b->probe().available) out.push_back(b);
  }
  if (out.empty()) throw BackendUnavailable("all", "no backend is available in this build");
  return out;
}

int run_verify(const VerifyOptions& opt) {
  const std::vector<Backend*> backends = backends_to_check(opt);
  std::vector<Result> results;
  if (!opt.input.path.empty()) {
    const MethodParams method = opt.method.params();
    const HostProblem host = load_problem(opt.input);
    ProgressBar progress("verify", static_cast<int64_t>(backends.size()));
    for (Backend* b : backends) {
      results.push_back(check(*b, opt.input.path, host, method));
      progress.advance();
    }
  } else {
    const MethodParams base = opt.method.params();
    const std::vector<Case> grid = default_grid();
    ProgressBar progress("verify", static_cast<int64_t>(grid.size() * backends.size()));
    for (Backend* b : backends) {
      uint64_t seed = opt.seed;
      for (const Case& c : grid) {
        synthetic::Config cfg = c.config;
        cfg.seed = seed++;
        const HostProblem host = host_problem(synthetic::generate(cfg), c.dtype, c.n_q);
        MethodParams m = base;
        m.chunk_size = c.chunk;
        m.alpha = c.alpha;
        m.prior = c.prior;
        m.sigma = c.sigma;
        results.push_back(check(*b, c.name, host, m));
        progress.advance();
      }
    }
  }

  bool all_passed = true;
  int64_t checked = 0;
  for (const Result& r : results) {
    if (!r.skipped) ++checked;
    all_passed = all_passed && (r.skipped || r.passed);
  }

  if (opt.json) {
    nlohmann::json j;
    j["passed"] = all_passed && checked > 0;
    j["results"] = nlohmann::json::array();
    for (const Result& r : results) {
      nlohmann::json e = {{"backend", r.backend}, {"case", r.name}, {"skipped", r.skipped}};
      if (r.skipped) {
        e["reason"] = r.skip_reason;
      } else {
        e.update({{"passed", r.passed},
                  {"summary_max_error", r.summary_max_err},
                  {"summary_violations", r.summary_violations},
                  {"mask_errors", r.mask_errors},
                  {"tie_flips", r.tie_flips},
                  {"active_chunks_errors", r.active_errors},
                  {"rows_excluded", r.rows_excluded},
                  {"rows_over_tolerance", r.rows_over_tolerance},
                  {"o_max_error", r.o_max},
                  {"o_mean_error", r.o_mean},
                  {"o_tolerance", r.o_tol},
                  {"lse_max_error", r.lse_max},
                  {"lse_tolerance", r.lse_tol}});
      }
      j["results"].push_back(e);
    }
    print_json(j);
  } else {
    Table t({"backend", "case", "o max err", "o tol", "o mean err", "lse max err", "lse tol", "mask errors",
             "ties", "stage-0 err", "result"});
    for (const Result& r : results) {
      if (r.skipped) {
        t.add_row({r.backend, r.name, "", "", "", "", "", "", "", "", "skipped"});
        continue;
      }
      std::string verdict = r.passed ? "ok" : "FAIL";
      if (r.summary_violations) verdict += " (stage 0: " + std::to_string(r.summary_violations) + ")";
      if (r.active_errors) verdict += " (active_chunks: " + std::to_string(r.active_errors) + ")";
      if (r.rows_over_tolerance) verdict += " (rows over tolerance: " + std::to_string(r.rows_over_tolerance) + ")";
      t.add_row({r.backend, r.name, format_general(r.o_max, 3), format_general(r.o_tol, 3),
                 format_general(r.o_mean, 3), format_general(r.lse_max, 3), format_general(r.lse_tol, 3),
                 std::to_string(r.mask_errors), std::to_string(r.tie_flips), format_general(r.summary_max_err, 3),
                 verdict});
    }
    t.print(std::cout);
    for (const Result& r : results) {
      if (r.skipped) std::cout << "skipped " << r.backend << " / " << r.name << ": " << r.skip_reason << "\n";
    }
    std::cout << (all_passed ? "all checked cases agree with the float64 reference"
                             : "some cases disagree with the float64 reference")
              << " (" << checked << " checked, " << results.size() - static_cast<size_t>(checked)
              << " skipped)\n";
  }
  if (!all_passed) return kExitVerificationFailed;
  if (checked == 0) {
    std::cerr << "error: no case could be checked (every backend skipped every case)\n";
    return kExitVerificationFailed;
  }
  return kExitOk;
}

}  // namespace

Command add_verify_command(CLI::App& parent) {
  auto opt = std::make_shared<VerifyOptions>();
  CLI::App* app = parent.add_subcommand(
      "verify", "Check every available backend against a float64 reference on a grid of shapes (or given tensors)");
  opt->backend_flag =
      app->add_option("--backend", opt->backend,
                      "Backend to check: cpu, cuda, hip, auto or all (every available one). Without the flag, "
                      "DASHATTN_BACKEND is read, then all")
          ->check(CLI::IsMember({"cpu", "cuda", "hip", "auto", "all"}));
  app->add_flag("--json", opt->json, "Machine-readable JSON on stdout instead of text");
  add_method_options(*app, opt->method);
  add_input_options(*app, opt->input, false);
  app->add_option("--seed", opt->seed, "First seed of the grid's random problems");
  app->footer(
      "Without --input, the built-in grid sets chunk, alpha, prior and sigma per case; --gamma, --scale and "
      "--solver apply to every case. With --input, all method flags apply.");
  return {app, [opt] { return run_verify(*opt); }};
}

}  // namespace dashattn::cli
