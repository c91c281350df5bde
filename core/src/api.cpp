// Validated entry points: normalize and check the arguments, check the backend supports them, then run.
#include "dashattn/dashattn.h"

#include <string>

namespace dashattn {
namespace {

void require_backend_device(const Backend& be, const TensorView& q) {
  if (q.device.type != be.device_type()) {
    throw InvalidArgument("q.device", std::string(device_type_name(be.device_type())) + " memory for backend '" +
                                          be.name() + "'",
                          device_type_name(q.device.type));
  }
}

void require_supported(const Backend& be, const ForwardParams& p) {
  const std::string reason = be.unsupported_reason(p);
  if (!reason.empty()) throw Unsupported(be.name(), "", reason);
}

// Support check of a single-stage entry, whose inputs are q and one key-side tensor (Stage 0: k for both, as q and k
// share dtype, device and head dim; Stage 1: q and the summaries).
void require_stage_supported(const Backend& be, const TensorView& q, const TensorView& keys, const BatchLayout& batch,
                             const MethodParams& method) {
  ForwardParams f;
  f.q = q;
  f.k = keys;
  f.v = keys;
  f.batch = batch;
  f.method = method;
  require_supported(be, f);
}

}  // namespace

void forward(Backend& backend, const ForwardParams& p) {
  const ForwardParams n = normalize_forward(p);
  require_backend_device(backend, n.q);
  require_supported(backend, n);
  backend.forward(n);
}

size_t workspace_size(Backend& backend, const ForwardParams& p) {
  const ForwardParams n = normalize_forward(p);
  require_backend_device(backend, n.q);
  return backend.workspace_size(n);
}

void summarize(Backend& backend, const SummarizeParams& p) {
  const SummarizeParams n = normalize_summarize(p);
  require_backend_device(backend, n.k);
  require_stage_supported(backend, n.k, n.k, n.batch, n.method);
  backend.summarize(n);
}

void route(Backend& backend, const RouteParams& p) {
  const RouteParams n = normalize_route(p);
  require_backend_device(backend, n.q);
  require_stage_supported(backend, n.q, n.summaries, n.batch, n.method);
  backend.route(n);
}

void summarize_and_route(Backend& backend, const SummarizeParams& sp, const RouteParams& rp) {
  const SummarizeParams ns = normalize_summarize(sp);
  const RouteParams nr = normalize_route(rp);
  require_backend_device(backend, ns.k);
  require_backend_device(backend, nr.q);
  if (ns.method.chunk_size != nr.method.chunk_size) {
    throw InvalidArgument("sp.method.chunk_size", "rp.method.chunk_size = " + std::to_string(nr.method.chunk_size),
                          std::to_string(ns.method.chunk_size));
  }
  if (ns.stream != nr.stream) {
    throw InvalidArgument("sp.stream", "rp.stream (the step's two stages run on one stream)", "another stream");
  }
  const int64_t last_chunk = last_query_chunk(route_shape(nr));
  if (ns.first_chunk < last_chunk) {
    throw InvalidArgument("sp.first_chunk",
                          ">= " + std::to_string(last_chunk) +
                              " (the last query's own chunk: routing must not read a summary this Stage 0 writes)",
                          std::to_string(ns.first_chunk));
  }
  require_stage_supported(backend, ns.k, ns.k, ns.batch, ns.method);
  require_stage_supported(backend, nr.q, nr.summaries, nr.batch, nr.method);
  backend.summarize_and_route(ns, nr);
}

void attend(Backend& backend, const AttendParams& p) {
  const AttendParams n = normalize_attend(p);
  require_backend_device(backend, n.q);
  ForwardParams f;
  f.q = n.q;
  f.k = n.k;
  f.v = n.v;
  f.o = n.o;
  f.batch = n.batch;
  f.method = n.method;
  require_supported(backend, f);
  backend.attend(n);
}

void dense_attention(Backend& backend, const DenseParams& p) {
  const DenseParams n = normalize_dense(p);
  require_backend_device(backend, n.q);
  ForwardParams f;
  f.q = n.q;
  f.k = n.k;
  f.v = n.v;
  f.o = n.o;
  f.batch = n.batch;
  f.method.scale = n.scale;
  require_supported(backend, f);
  backend.dense_attention(n);
}

}  // namespace dashattn
