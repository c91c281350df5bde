#include "options.h"

#include "dashattn/error.h"
#include "dashattn/validate.h"

namespace dashattn::cli {

Backend& CommonOptions::select_backend() const { return Registry::instance().select(requested_backend()); }

std::string CommonOptions::requested_backend() const {
  return backend_flag != nullptr && backend_flag->count() > 0 ? backend : std::string();
}

MethodParams MethodOptions::params() const {
  MethodParams m;
  m.chunk_size = chunk;
  m.alpha = alpha;
  m.gamma = gamma;
  m.sigma = sigma;
  m.scale = scale;
  if (!parse_prior_mode(prior.c_str(), &m.prior)) {
    throw InvalidArgument("--prior", "estimate_diagonal, raw or none", prior);
  }
  m.solver = solver == "reference" ? EntmaxSolver::kReference : EntmaxSolver::kExact;
  // Range checks (alpha > 1, sigma > 0, chunk sizes) belong to the library; we only rename its field names to the
  // flags a user typed.
  try {
    validate_method(m);
  } catch (const Error& e) {
    const std::string field = e.argument() == "chunk_size" ? "chunk" : e.argument();
    throw Error(e.code(), "--" + field, std::string(e.what()) + " (flag --" + field + ")");
  }
  return m;
}

void add_common_options(CLI::App& app, CommonOptions& options) {
  options.backend_flag =
      app.add_option("--backend", options.backend,
                     "Backend: cpu, cuda, hip or auto (the best available). Without the flag, DASHATTN_BACKEND "
                     "is read, then auto")
          ->check(CLI::IsMember({"cpu", "cuda", "hip", "auto"}));
  app.add_flag("--json", options.json, "Machine-readable JSON on stdout instead of text");
}

void add_method_options(CLI::App& app, MethodOptions& options) {
  const std::string group = "Method";
  app.add_option("--chunk", options.chunk, "Chunk size C (16, 32, 64 or 128)")->group(group);
  app.add_option("--alpha", options.alpha, "Entmax alpha (> 1)")->group(group);
  app.add_option("--gamma", options.gamma, "Routing temperature gamma")->group(group);
  app.add_option("--sigma", options.sigma, "Prior strength sigma (> 0), used by --prior estimate_diagonal")
      ->group(group);
  app.add_option("--prior", options.prior, "Prior bias of Stage 2")
      ->check(CLI::IsMember({"estimate_diagonal", "raw", "none"}))
      ->group(group);
  app.add_option("--scale", options.scale, "Softmax scale; 0 selects 1/sqrt(d)")->group(group);
  app.add_option("--solver", options.solver,
                 "Entmax threshold solver: exact, or reference (the released code's 3 Halley steps, for A/B "
                 "comparison)")
      ->check(CLI::IsMember({"exact", "reference"}))
      ->group(group);
}

CLI::Option* add_dtype_option(CLI::App& app, std::string& dtype, const std::string& description) {
  return app.add_option("--dtype", dtype, description)->check(CLI::IsMember({"f32", "f16", "bf16"}));
}

DType ShapeOptions::element_type() const { return parse_dtype_or_throw(dtype, "--dtype"); }

void ShapeOptions::apply(synthetic::Config* config) const {
  config->batch = batch;
  config->n = n;
  config->h_q = h_q;
  config->h_kv = h_kv;
  config->d = d;
}

void add_shape_options(CLI::App& app, ShapeOptions& shape) {
  const std::string group = "Problem";
  app.add_option("--batch", shape.batch, "Sequences")->group(group);
  app.add_option("--n", shape.n, "Tokens per sequence")->group(group);
  app.add_option("--hq", shape.h_q, "Query heads")->group(group);
  app.add_option("--hkv", shape.h_kv, "Key/value heads")->group(group);
  app.add_option("--d", shape.d, "Head dimension")->group(group);
  add_dtype_option(app, shape.dtype, "Element type of q, k, v")->group(group);
}

DType parse_dtype_or_throw(const std::string& name, const char* argument) {
  DType t;
  if (!parse_dtype(name, &t) || !is_attention_dtype(t)) throw InvalidArgument(argument, "f32, f16 or bf16", name);
  return t;
}

}  // namespace dashattn::cli
