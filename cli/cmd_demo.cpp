// dashattn demo: a synthetic problem with planted needles, routed and attended on the selected backend, compared
// with dense attention on the same backend.
#include <iostream>
#include <memory>

#include "commands.h"
#include "dashattn/synthetic.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"
#include "plot_png.h"
#include "problem.h"

namespace dashattn::cli {
namespace {

struct DemoOptions {
  CommonOptions common;
  MethodOptions method;
  ShapeOptions shape;  // n 4096, h_q 8, h_kv 2, d 64, bf16
  uint64_t seed = 0;
  int needles = 4;
  int64_t needle_queries = 32;
  std::string plot;
};

struct NeedleReport {
  synthetic::Needle needle;
  std::vector<double> routed_by_window;  // per KV head: fraction of the window's queries routing the needle chunk
  double routed_by_others = 0;           // same, over the other queries that could route it (all KV heads)
};

bool routed(const ForwardOutputs& out, const HostProblem& p, int64_t s, int64_t r, int64_t i, int64_t chunk) {
  const uint32_t* row = reinterpret_cast<const uint32_t*>(out.mask.data()) +
                        ((s * p.h_kv() + r) * p.n_q() + i) * out.words();
  return mask_bit(row, chunk);
}

std::vector<NeedleReport> needle_reports(const synthetic::Problem& sp, const HostProblem& p,
                                         const ForwardOutputs& out, int64_t chunk) {
  std::vector<NeedleReport> reports;
  for (const synthetic::Needle& nd : sp.needles) {
    NeedleReport rep;
    rep.needle = nd;
    int64_t other_hits = 0, other_total = 0;
    for (int64_t r = 0; r < p.h_kv(); ++r) {
      int64_t hits = 0;
      for (int64_t i = nd.query_begin; i < nd.query_end; ++i) hits += routed(out, p, nd.batch_index, r, i, nd.chunk);
      rep.routed_by_window.push_back(static_cast<double>(hits) / static_cast<double>(nd.query_end - nd.query_begin));
      // Every other query whose routable chunks include the needle chunk.
      for (int64_t i = (nd.chunk + 1) * chunk; i < p.n_q(); ++i) {
        if (i >= nd.query_begin && i < nd.query_end) continue;
        ++other_total;
        other_hits += routed(out, p, nd.batch_index, r, i, nd.chunk);
      }
    }
    rep.routed_by_others = other_total ? static_cast<double>(other_hits) / static_cast<double>(other_total) : 0.0;
    reports.push_back(rep);
  }
  return reports;
}

int run_demo(const DemoOptions& opt) {
  const MethodParams method = opt.method.params();
  const DType dtype = opt.shape.element_type();
  Backend& backend = opt.common.select_backend();

  synthetic::Config cfg;
  opt.shape.apply(&cfg);
  cfg.chunk = method.chunk_size;
  cfg.num_needles = opt.needles;
  cfg.needle_queries = opt.needle_queries;
  cfg.seed = opt.seed;
  const synthetic::Problem sp = generate_synthetic(cfg);
  const HostProblem problem = host_problem(sp, dtype);

  const ForwardOutputs out = run_forward(backend, problem, method);
  const DenseOutputs dense = run_dense(backend, problem, method.scale);
  const RoutingStats stats = stats_of(out, problem, method);
  const std::vector<NeedleReport> needles = needle_reports(sp, problem, out, method.chunk_size);
  const Difference err = compare(out.o, dense.o);

  if (!opt.plot.empty()) {
    RoutingPlot plot;
    plot.mask = reinterpret_cast<const uint32_t*>(out.mask.data());  // sequence 0
    plot.h_kv = problem.h_kv();
    plot.n_q = problem.n_q();
    plot.n_k = problem.n_k();
    plot.chunk = method.chunk_size;
    plot.words = out.words();
    for (const synthetic::Needle& nd : sp.needles) {
      if (nd.batch_index == 0) plot.needles.push_back({nd.chunk, nd.query_begin, nd.query_end});
    }
    plot.title = "DASHATTENTION ROUTING, N=" + std::to_string(problem.n_k()) + ", " + backend.name() +
                 ", SPARSITY " + format_percent(stats.sparsity);
    write_routing_plot(opt.plot, plot);
  }

  if (opt.common.json) {
    nlohmann::json j;
    j["backend"] = backend.name();
    j["problem"] = {{"batch", problem.batch()}, {"n", problem.n_k()},     {"h_q", problem.h_q()},
                    {"h_kv", problem.h_kv()},   {"d", problem.d()},       {"dtype", dtype_name(dtype)},
                    {"seed", opt.seed},         {"needles", opt.needles}, {"needle_queries", opt.needle_queries}};
    j["method"] = {{"chunk", method.chunk_size}, {"alpha", method.alpha}, {"gamma", method.gamma},
                   {"sigma", method.sigma},      {"scale", method.scale}, {"prior", prior_mode_name(method.prior)},
                   {"solver", opt.method.solver}};
    j["kv_heads"] = nlohmann::json::array();
    for (size_t r = 0; r < stats.per_kv_head.size(); ++r) {
      const HeadRoutingStats& h = stats.per_kv_head[r];
      j["kv_heads"].push_back({{"kv_head", r},
                               {"mean_routed_chunks", h.mean_active_chunks - 1.0},
                               {"mean_active_chunks", h.mean_active_chunks},
                               {"sparsity", h.sparsity}});
    }
    j["sparsity"] = stats.sparsity;
    j["mean_active_chunks"] = stats.mean_active_chunks;
    j["needles"] = nlohmann::json::array();
    for (const NeedleReport& rep : needles) {
      j["needles"].push_back({{"batch_index", rep.needle.batch_index},
                              {"chunk", rep.needle.chunk},
                              {"query_begin", rep.needle.query_begin},
                              {"query_end", rep.needle.query_end},
                              {"routed_fraction_per_kv_head", rep.routed_by_window},
                              {"routed_fraction_other_queries", rep.routed_by_others}});
    }
    j["error_vs_dense"] = {{"max_abs", err.max_abs}, {"relative", err.relative}};
    j["seconds"] = {{"forward", out.seconds}, {"dense", dense.seconds}};
    if (!opt.plot.empty()) j["plot"] = opt.plot;
    print_json(j);
    return kExitOk;
  }

  std::cout << "dashattn demo on backend " << backend.name() << " (" << backend.probe().reason << ")\n"
            << "problem: " << problem.describe() << ", " << opt.needles << " needles, seed " << opt.seed << "\n"
            << "method:  chunk " << method.chunk_size << ", alpha " << format_general(method.alpha) << ", gamma "
            << format_general(method.gamma) << ", prior " << prior_mode_name(method.prior);
  if (method.prior == PriorMode::kEstimateDiagonal) std::cout << " (sigma " << format_general(method.sigma) << ")";
  std::cout << ", solver " << opt.method.solver << "\n\nrouting per KV head (active = routed + diagonal chunk):\n";
  Table heads({"kv head", "routed chunks/query", "active chunks/query", "sparsity"});
  for (size_t r = 0; r < stats.per_kv_head.size(); ++r) {
    const HeadRoutingStats& h = stats.per_kv_head[r];
    heads.add_row({std::to_string(r), format_fixed(h.mean_active_chunks - 1.0, 2),
                   format_fixed(h.mean_active_chunks, 2), format_percent(h.sparsity)});
  }
  heads.add_row({"all", format_fixed(stats.mean_active_chunks - 1.0, 2), format_fixed(stats.mean_active_chunks, 2),
                 format_percent(stats.sparsity)});
  heads.print(std::cout);

  if (!needles.empty()) {
    std::cout << "\nneedles: share of the planted queries that routed the needle chunk, per KV head, and of all\n"
                 "other queries that could have (for comparison):\n";
    std::vector<std::string> header = {"seq", "chunk", "queries"};
    for (int64_t r = 0; r < problem.h_kv(); ++r) header.push_back("kv " + std::to_string(r));
    header.push_back("other queries");
    Table t(header);
    for (const NeedleReport& rep : needles) {
      std::vector<std::string> row = {std::to_string(rep.needle.batch_index), std::to_string(rep.needle.chunk),
                                      std::to_string(rep.needle.query_begin) + "-" +
                                          std::to_string(rep.needle.query_end - 1)};
      for (double f : rep.routed_by_window) row.push_back(format_percent(f));
      row.push_back(format_percent(rep.routed_by_others));
      t.add_row(row);
    }
    t.print(std::cout);
  }

  std::cout << "\nerror against dense attention (" << backend.name() << " dense_attention): max abs "
            << format_general(err.max_abs) << ", relative (L2) " << format_general(err.relative) << "\n"
            << "time: forward " << format_fixed(out.seconds * 1e3, 2) << " ms, dense "
            << format_fixed(dense.seconds * 1e3, 2) << " ms\n";
  if (!opt.plot.empty()) std::cout << "plot: " << opt.plot << "\n";
  return kExitOk;
}

}  // namespace

Command add_demo_command(CLI::App& parent) {
  auto opt = std::make_shared<DemoOptions>();
  CLI::App* app = parent.add_subcommand(
      "demo", "Route and attend a synthetic problem with planted needles; report routing, needles and error");
  add_common_options(*app, opt->common);
  add_method_options(*app, opt->method);
  const std::string group = "Problem";
  add_shape_options(*app, opt->shape);
  app->add_option("--seed", opt->seed, "Seed of the synthetic problem")->group(group);
  app->add_option("--needles", opt->needles, "Planted needle chunks per sequence")->group(group);
  app->add_option("--needle-queries", opt->needle_queries, "Queries that should retrieve each needle")->group(group);
  app->add_option("--plot", opt->plot, "Write a PNG heat map of the routing mask (first sequence)");
  return {app, [opt] { return run_demo(*opt); }};
}

}  // namespace dashattn::cli
