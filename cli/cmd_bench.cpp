// dashattn bench: times Stage 0, Stage 1 (real routing of a synthetic problem), Stage 2 on random masks at the
// target chunk sparsities (the paper's protocol: each routable chunk kept with probability 1 - s, the diagonal
// always, prior none) and dense attention, on one backend; medians of repeats after warm-up.
#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>

#include "commands.h"
#include "device_tensor.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"
#include "problem.h"
#include "report.h"

namespace dashattn::cli {
namespace {

struct BenchOptions {
  CommonOptions common;
  MethodOptions method;
  ShapeOptions shape{1, 8192, 16, 2, 128, "bf16"};
  std::vector<double> sparsity = {0.75, 0.875, 0.9375};
  int repeats = 5;
  int warmup = 1;
  uint64_t seed = 0;
};

struct Timing {
  double median_ms = 0, min_ms = 0;
};

Timing time_it(Backend& backend, int warmup, int repeats, ProgressBar& progress, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) {
    fn();
    backend.synchronize(nullptr);
    progress.advance();
  }
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    backend.synchronize(nullptr);
    const auto start = std::chrono::steady_clock::now();
    fn();
    backend.synchronize(nullptr);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    progress.advance();
  }
  std::sort(ms.begin(), ms.end());
  const size_t m = ms.size();
  return {m % 2 ? ms[m / 2] : 0.5 * (ms[m / 2 - 1] + ms[m / 2]), ms.front()};
}

// Random routing mask at chunk sparsity s (fraction of routable chunks not routed), diagonal bit always set; also
// returns the key-level sparsity it amounts to (the figure routing_stats reports).
std::vector<uint32_t> random_mask(const HostProblem& p, int64_t chunk, double s, uint64_t seed, double* key_sparsity) {
  const int64_t words = mask_words(p.n_k(), chunk);
  std::vector<uint32_t> mask(static_cast<size_t>(p.batch() * p.h_kv() * p.n_q() * words), 0u);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int64_t attended = 0, visible = 0;
  for (int64_t row = 0; row < p.batch() * p.h_kv() * p.n_q(); ++row) {
    const int64_t pos = query_position(row % p.n_q(), p.n_q(), p.n_k());
    const int64_t diag = diagonal_chunk(pos, chunk);
    uint32_t* bits = &mask[static_cast<size_t>(row * words)];
    for (int64_t c = 0; c < diag; ++c) {
      if (u(rng) >= s) {
        set_mask_bit(bits, c);
        attended += chunk;
      }
    }
    set_mask_bit(bits, diag);
    attended += diagonal_keys(pos, chunk);
    visible += visible_keys(pos);
  }
  *key_sparsity = 1.0 - static_cast<double>(attended) / static_cast<double>(visible);
  return mask;
}

int run_bench(const BenchOptions& opt) {
  MethodParams method = opt.method.params();
  const DType dtype = opt.shape.element_type();
  if (opt.repeats < 1) throw InvalidArgument("--repeats", ">= 1", std::to_string(opt.repeats));
  if (opt.warmup < 0) throw InvalidArgument("--warmup", ">= 0", std::to_string(opt.warmup));
  for (double s : opt.sparsity) {
    if (!(s >= 0.0 && s < 1.0)) throw InvalidArgument("--sparsity", "fractions in [0, 1)", format_general(s));
  }
  Backend& backend = opt.common.select_backend();

  synthetic::Config cfg;
  opt.shape.apply(&cfg);
  cfg.chunk = method.chunk_size;
  cfg.seed = opt.seed;
  cfg.num_needles = static_cast<int>(std::min<int64_t>(4, std::max<int64_t>(0, (opt.shape.n - 32) / method.chunk_size)));
  const HostProblem p = host_problem(generate_synthetic(cfg), dtype);
  const int64_t b = p.batch(), n = p.n_k(), hq = p.h_q(), hkv = p.h_kv(), d = p.d();
  const int64_t chunks = std::max<int64_t>(num_complete_chunks(n, method.chunk_size), 1);
  const int64_t words = mask_words(n, method.chunk_size);

  DeviceTensor q = DeviceTensor::from_host(backend, dtype, p.q.shape(), p.q.data());
  DeviceTensor k = DeviceTensor::from_host(backend, dtype, p.k.shape(), p.k.data());
  DeviceTensor v = DeviceTensor::from_host(backend, dtype, p.v.shape(), p.v.data());
  DeviceTensor sq = DeviceTensor::from_host(backend, DType::kF32, p.summary_query.shape(), p.summary_query.data());
  DeviceTensor summaries(backend, dtype, {b, chunks, hkv, d});
  DeviceTensor mask(backend, DType::kU32, {b, hkv, n, words});
  DeviceTensor tau(backend, DType::kF32, {b, hq, n});
  DeviceTensor mu(backend, DType::kF32, {b, hkv, n});
  DeviceTensor active(backend, DType::kI32, {b, hkv, n});
  DeviceTensor o(backend, dtype, {b, n, hq, d});

  SummarizeParams sp;
  sp.k = k.view();
  sp.summary_query = sq.view();
  sp.summaries = summaries.view();
  sp.method = method;
  RouteParams rp;
  rp.q = q.view();
  rp.summaries = summaries.view();
  rp.n_k = n;
  rp.method = method;
  rp.routing.mask = mask.view();
  rp.routing.tau = tau.view();
  rp.routing.mu = mu.view();
  rp.routing.active_chunks = active.view();
  DenseParams dp;
  dp.q = q.view();
  dp.k = k.view();
  dp.v = v.view();
  dp.o = o.view();
  dp.scale = method.scale;

  const int per = opt.warmup + opt.repeats;
  ProgressBar progress("bench", per * static_cast<int64_t>(3 + opt.sparsity.size()));
  const Timing t0 = time_it(backend, opt.warmup, opt.repeats, progress, [&] { summarize(backend, sp); });
  const Timing t1 = time_it(backend, opt.warmup, opt.repeats, progress, [&] { route(backend, rp); });
  io::Tensor active_host("active_chunks", DType::kI32, {b, hkv, n});
  active.download(active_host.data());
  const RoutingStats real = routing_stats(active_host.view(), BatchLayout{}, n, n, method.chunk_size);
  const Timing dense = time_it(backend, opt.warmup, opt.repeats, progress, [&] { dense_attention(backend, dp); });

  struct Row {
    double target, key_sparsity;
    Timing stage2;
  };
  std::vector<Row> rows;
  MethodParams stage2_method = method;
  stage2_method.prior = PriorMode::kNone;
  for (size_t i = 0; i < opt.sparsity.size(); ++i) {
    double key_sparsity = 0;
    const std::vector<uint32_t> host_mask =
        random_mask(p, method.chunk_size, opt.sparsity[i], opt.seed + 1000 + i, &key_sparsity);
    mask.upload(host_mask.data());
    AttendParams ap;
    ap.q = q.view();
    ap.k = k.view();
    ap.v = v.view();
    ap.summaries = summaries.view();
    ap.routing.mask = mask.view();
    ap.o = o.view();
    ap.method = stage2_method;
    rows.push_back({opt.sparsity[i], key_sparsity,
                    time_it(backend, opt.warmup, opt.repeats, progress, [&] { attend(backend, ap); })});
  }
  progress.finish();

  const double stage01 = t0.median_ms + t1.median_ms;
  if (opt.common.json) {
    nlohmann::json j;
    j["backend"] = backend.name();
    j["device"] = backend.probe().reason;
    j["problem"] = problem_json(p);
    j["method"] = method_json(method);
    j["repeats"] = opt.repeats;
    j["warmup"] = opt.warmup;
    j["ms"] = {{"stage0", t0.median_ms}, {"stage1", t1.median_ms}, {"dense", dense.median_ms}};
    j["real_routing"] = {{"sparsity", real.sparsity}, {"mean_active_chunks", real.mean_active_chunks}};
    j["stage2"] = nlohmann::json::array();
    for (const Row& r : rows) {
      const double total = stage01 + r.stage2.median_ms;
      j["stage2"].push_back({{"chunk_sparsity", r.target},
                             {"key_sparsity", r.key_sparsity},
                             {"stage2_ms", r.stage2.median_ms},
                             {"total_ms", total},
                             {"speedup_vs_dense", dense.median_ms / total}});
    }
    print_json(j);
    return kExitOk;
  }

  std::cout << "bench on " << backend.name() << " (" << backend.probe().reason << "): " << p.describe()
            << ", chunk " << method.chunk_size << "; median of " << opt.repeats << " after " << opt.warmup
            << " warm-up\n";
  Table fixed({"stage", "median ms", "min ms"});
  fixed.add_row({"stage 0 (summaries)", format_fixed(t0.median_ms, 3), format_fixed(t0.min_ms, 3)});
  fixed.add_row({"stage 1 (routing)", format_fixed(t1.median_ms, 3), format_fixed(t1.min_ms, 3)});
  fixed.add_row({"dense attention", format_fixed(dense.median_ms, 3), format_fixed(dense.min_ms, 3)});
  fixed.print(std::cout);
  std::cout << "real routing of this problem: sparsity " << format_percent(real.sparsity) << ", "
            << format_fixed(real.mean_active_chunks, 2) << " active chunks per query\n\n"
            << "stage 2 on random masks (prior none), totals include stages 0 and 1:\n";
  Table t({"chunk sparsity", "key sparsity", "stage 2 ms", "total ms", "speedup vs dense"});
  for (const Row& r : rows) {
    const double total = stage01 + r.stage2.median_ms;
    t.add_row({format_percent(r.target, 2), format_percent(r.key_sparsity, 2), format_fixed(r.stage2.median_ms, 3),
               format_fixed(total, 3), format_fixed(dense.median_ms / total, 2) + "x"});
  }
  t.print(std::cout);
  return kExitOk;
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* app = parent.add_subcommand(
      "bench", "Time Stage 0, Stage 1, Stage 2 at target sparsities and dense attention on one backend");
  add_common_options(*app, opt->common);
  add_method_options(*app, opt->method);
  const std::string group = "Problem";
  add_shape_options(*app, opt->shape);
  app->add_option("--sparsity", opt->sparsity, "Chunk sparsities of the Stage-2 random masks")
      ->delimiter(',')
      ->group(group);
  app->add_option("--seed", opt->seed, "Seed of the problem and of the random masks")->group(group);
  app->add_option("--repeats", opt->repeats, "Timed repeats (the median is reported)");
  app->add_option("--warmup", opt->warmup, "Untimed runs before the repeats");
  return {app, [opt] { return run_bench(*opt); }};
}

}  // namespace dashattn::cli
