#include "report.h"

namespace dashattn::cli {

nlohmann::json method_json(const MethodParams& m) {
  return {{"chunk", m.chunk_size},
          {"alpha", m.alpha},
          {"gamma", m.gamma},
          {"sigma", m.sigma},
          {"scale", m.scale},
          {"prior", prior_mode_name(m.prior)},
          {"solver", m.solver == EntmaxSolver::kReference ? "reference" : "exact"}};
}

nlohmann::json problem_json(const HostProblem& p) {
  nlohmann::json j = {{"batch", p.batch()}, {"n_q", p.n_q()}, {"n_k", p.n_k()},          {"h_q", p.h_q()},
                      {"h_kv", p.h_kv()},   {"d", p.d()},     {"dtype", dtype_name(p.dtype())}};
  if (p.layout.packed()) j["packed_sequences"] = p.sequences();
  if (!p.layout.seqlens_k.empty()) j["seqlens_k"] = p.layout.seqlens_k;
  if (p.layout.paged()) {
    j["paged"] = {{"page_size", p.page_size()},
                  {"pages", p.k.shape()[0]},
                  {"block_table_width", p.layout.block_table_stride}};
  }
  return j;
}

nlohmann::json stats_json(const RoutingStats& s) {
  nlohmann::json heads = nlohmann::json::array();
  for (size_t r = 0; r < s.per_kv_head.size(); ++r) {
    const HeadRoutingStats& h = s.per_kv_head[r];
    heads.push_back({{"kv_head", r},
                     {"queries", h.queries},
                     {"mean_active_chunks", h.mean_active_chunks},
                     {"mean_routed_chunks", h.mean_active_chunks - 1.0},
                     {"attended_keys", h.attended_keys},
                     {"visible_keys", h.visible_keys},
                     {"sparsity", h.sparsity}});
  }
  return {{"sparsity", s.sparsity}, {"mean_active_chunks", s.mean_active_chunks}, {"per_kv_head", heads}};
}

}  // namespace dashattn::cli
