// Validated entry points: normalize and check the arguments, check the backend supports them, then run.
#include "dashattn/dashattn.h"

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
  ForwardParams f;
  f.q = n.k;  // the support check looks at dtype, device and head dim, which q and k share
  f.k = n.k;
  f.v = n.k;
  f.batch = n.batch;
  f.method = n.method;
  require_supported(backend, f);
  backend.summarize(n);
}

void route(Backend& backend, const RouteParams& p) {
  const RouteParams n = normalize_route(p);
  require_backend_device(backend, n.q);
  ForwardParams f;
  f.q = n.q;
  f.k = n.summaries;
  f.v = n.summaries;
  f.batch = n.batch;
  f.method = n.method;
  require_supported(backend, f);
  backend.route(n);
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
