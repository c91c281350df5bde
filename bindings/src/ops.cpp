// The stateless entry points: forward, summarize, route, attend, dense attention and routing statistics.
//
// Each one converts its arrays to views, picks the backend from the device of the first tensor, then releases
// the GIL and calls the validated C++ entry point, which checks everything before any work is launched.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"

namespace dashattn::python {
namespace {

RoutingView routing_outputs(const OutArray& mask, const OutArray& tau, const OutArray& mu, const OutArray& active) {
  RoutingView r;
  r.mask = plain_view(mask, "mask");
  r.tau = plain_view(tau, "tau");
  r.mu = plain_view(mu, "mu");
  r.active_chunks = plain_view(active, "active_chunks");
  return r;
}

RoutingView routing_inputs(const InArray& mask, const InArray& tau, const InArray& mu) {
  RoutingView r;
  r.mask = plain_view(mask, "mask");
  r.tau = plain_view(tau, "tau");
  r.mu = plain_view(mu, "mu");
  return r;
}

// forward() lays its workspace out at 256-byte offsets from the base: the base is aligned as cudaMalloc aligns.
constexpr size_t kWorkspaceAlignment = 256;

// The 256-byte aligned start of an allocator's array of at least need + 255 bytes on `device`, and its usable size.
void* aligned_workspace(const nb::object& array, size_t need, const Device& device, size_t* bytes) {
  const OutArray a = nb::cast<OutArray>(array);
  const Device got = device_of(a.device_type(), a.device_id(), "workspace");
  if (got != device) {
    throw InvalidArgument("workspace.device", std::string(device_type_name(device.type)) + " (q's device)",
                          device_type_name(got.type));
  }
  const size_t size = a.nbytes();
  if (size < need + kWorkspaceAlignment - 1) {
    throw InvalidArgument("workspace", ">= " + std::to_string(need + kWorkspaceAlignment - 1) + " bytes",
                          std::to_string(size) + " bytes");
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(a.data());
  const uintptr_t aligned = (base + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
  *bytes = size - (aligned - base);
  return reinterpret_cast<void*>(aligned);
}

std::string run_forward(const InArray& q, const InArray& k, const InArray& v, const OutArray& o,
                        const InArray& summary_query, const OutArray& lse, const OutArray& mask, const OutArray& tau,
                        const OutArray& mu, const OutArray& active, const OutArray& summaries,
                        int64_t summaries_valid, const PyBatch& batch, const MethodParams& method,
                        const std::string& layout, const std::string& backend, uintptr_t stream, bool u16_is_bf16,
                        const nb::object& workspace_alloc) {
  ViewOptions opt{parse_layout(layout), u16_is_bf16};
  ViewOptions plain{Layout::kBnhd, u16_is_bf16};
  ForwardParams p;
  p.q = attention_view(q, "q", opt);
  p.k = attention_view(k, "k", opt);
  p.v = attention_view(v, "v", opt);
  p.o = attention_view(o, "o", opt);
  p.summary_query = plain_view(summary_query, "summary_query", plain);
  p.lse = plain_view(lse, "lse");
  p.routing = routing_outputs(mask, tau, mu, active);
  p.summaries = plain_view(summaries, "summaries", plain);
  p.summaries_valid = summaries_valid;
  p.batch = batch.layout(p.q.device);
  batch.check_block_table(p.k, p.q.rank == 4 ? p.q.shape[0] : 0);
  p.method = method;
  p.stream = stream_pointer(stream);
  Backend& be = pick_backend(backend, p.q.device);
  // The workspace comes from the caller's framework when it offers an allocator (torch's caching allocator hands
  // it out and takes it back in stream order); without one, forward() takes it from the backend (on CUDA a
  // stream-ordered pool, no wait; on the CPU an allocation per call).
  nb::object workspace;
  if (!workspace_alloc.is_none()) {
    const size_t need = dashattn::workspace_size(be, p);
    if (need > 0) {
      workspace = workspace_alloc(need + kWorkspaceAlignment - 1);
      p.workspace = aligned_workspace(workspace, need, p.q.device, &p.workspace_bytes);
    }
  }
  nb::gil_scoped_release release;
  dashattn::forward(be, p);
  return be.name();
}

std::string run_summarize(const InArray& k, const OutArray& summaries, const InArray& summary_query,
                          int64_t first_chunk, const PyBatch& batch, const MethodParams& method,
                          const std::string& layout, const std::string& backend, uintptr_t stream, bool u16_is_bf16) {
  ViewOptions opt{parse_layout(layout), u16_is_bf16};
  ViewOptions plain{Layout::kBnhd, u16_is_bf16};
  SummarizeParams p;
  p.k = attention_view(k, "k", opt);
  p.summaries = plain_view(summaries, "summaries", plain);
  p.summary_query = plain_view(summary_query, "summary_query", plain);
  p.first_chunk = first_chunk;
  p.batch = batch.layout(p.k.device);
  // A paged Stage 0 counts its sequences on the summary cache.
  batch.check_block_table(p.k, p.summaries.rank == 4 ? p.summaries.shape[0] : 0);
  p.method = method;
  p.stream = stream_pointer(stream);
  Backend& be = pick_backend(backend, p.k.device);
  nb::gil_scoped_release release;
  dashattn::summarize(be, p);
  return be.name();
}

std::string run_route(const InArray& q, const InArray& summaries, const OutArray& mask, const OutArray& tau,
                      const OutArray& mu, const OutArray& active, int64_t n_k, const PyBatch& batch,
                      const MethodParams& method, const std::string& layout, const std::string& backend,
                      uintptr_t stream, bool u16_is_bf16) {
  ViewOptions opt{parse_layout(layout), u16_is_bf16};
  ViewOptions plain{Layout::kBnhd, u16_is_bf16};
  RouteParams p;
  p.q = attention_view(q, "q", opt);
  p.summaries = plain_view(summaries, "summaries", plain);
  p.n_k = n_k;
  p.routing = routing_outputs(mask, tau, mu, active);
  p.batch = batch.layout(p.q.device);
  p.method = method;
  p.stream = stream_pointer(stream);
  Backend& be = pick_backend(backend, p.q.device);
  nb::gil_scoped_release release;
  dashattn::route(be, p);
  return be.name();
}

std::string run_attend(const InArray& q, const InArray& k, const InArray& v, const OutArray& o,
                       const InArray& mask, const InArray& summaries, const InArray& tau, const InArray& mu,
                       const OutArray& lse, const PyBatch& batch, const MethodParams& method,
                       const std::string& layout, const std::string& backend, uintptr_t stream, bool u16_is_bf16) {
  ViewOptions opt{parse_layout(layout), u16_is_bf16};
  ViewOptions plain{Layout::kBnhd, u16_is_bf16};
  AttendParams p;
  p.q = attention_view(q, "q", opt);
  p.k = attention_view(k, "k", opt);
  p.v = attention_view(v, "v", opt);
  p.o = attention_view(o, "o", opt);
  p.summaries = plain_view(summaries, "summaries", plain);
  p.routing = routing_inputs(mask, tau, mu);
  p.lse = plain_view(lse, "lse");
  p.batch = batch.layout(p.q.device);
  batch.check_block_table(p.k, p.q.rank == 4 ? p.q.shape[0] : 0);
  p.method = method;
  p.stream = stream_pointer(stream);
  Backend& be = pick_backend(backend, p.q.device);
  nb::gil_scoped_release release;
  dashattn::attend(be, p);
  return be.name();
}

std::string run_dense(const InArray& q, const InArray& k, const InArray& v, const OutArray& o, const OutArray& lse,
                      const PyBatch& batch, float scale, const std::string& layout, const std::string& backend,
                      uintptr_t stream, bool u16_is_bf16) {
  ViewOptions opt{parse_layout(layout), u16_is_bf16};
  DenseParams p;
  p.q = attention_view(q, "q", opt);
  p.k = attention_view(k, "k", opt);
  p.v = attention_view(v, "v", opt);
  p.o = attention_view(o, "o", opt);
  p.lse = plain_view(lse, "lse");
  p.batch = batch.layout(p.q.device);
  p.scale = scale;
  p.stream = stream_pointer(stream);
  Backend& be = pick_backend(backend, p.q.device);
  nb::gil_scoped_release release;
  dashattn::dense_attention(be, p);
  return be.name();
}

nb::dict run_routing_stats(const InArray& active, const PyBatch& batch, int64_t n_q, int64_t n_k, int64_t chunk) {
  TensorView a = plain_view(active, "active_chunks");
  if (a.defined() && a.rank == 2) {
    // Packed varlen rows [h_kv, total] are the single-batch case [1, h_kv, total].
    a.rank = 3;
    a.shape = {1, a.shape[0], a.shape[1], 0};
    a.stride = {a.shape[1] * a.stride[0], a.stride[0], a.stride[1], 0};
  }
  const BatchLayout layout = batch.layout(Device{DeviceType::kCpu, 0});
  RoutingStats st;
  {
    nb::gil_scoped_release release;
    st = routing_stats(a, layout, n_q, n_k, chunk);
  }
  nb::list heads;
  for (const HeadRoutingStats& h : st.per_kv_head) {
    nb::dict d;
    d["queries"] = h.queries;
    d["mean_active_chunks"] = h.mean_active_chunks;
    d["attended_keys"] = h.attended_keys;
    d["visible_keys"] = h.visible_keys;
    d["sparsity"] = h.sparsity;
    heads.append(d);
  }
  nb::dict out;
  out["sparsity"] = st.sparsity;
  out["mean_active_chunks"] = st.mean_active_chunks;
  out["per_kv_head"] = heads;
  return out;
}

}  // namespace

void bind_ops(nb::module_& m) {
  using namespace nb::literals;
  const auto none_ok = [](const char* name) { return nb::arg(name).none() = nb::none(); };

  m.def("forward", &run_forward, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "o"_a.noconvert(), nb::kw_only(),
        none_ok("summary_query"), none_ok("lse"), none_ok("mask"), none_ok("tau"), none_ok("mu"),
        none_ok("active_chunks"), none_ok("summaries"), "summaries_valid"_a = 0, "batch"_a, "method"_a,
        "layout"_a = "bnhd", "backend"_a = "auto", "stream"_a = 0, "u16_is_bf16"_a = false,
        none_ok("workspace_alloc"),
        "Stage 0 + 1 + 2 into caller-allocated outputs; returns the name of the backend that ran. workspace_alloc: "
        "a callable returning a byte array of the given size on q's device (else the call allocates its own).");
  m.def("summarize", &run_summarize, "k"_a.noconvert(), "summaries"_a.noconvert(), nb::kw_only(),
        none_ok("summary_query"),
        "first_chunk"_a = 0, "batch"_a, "method"_a, "layout"_a = "bnhd", "backend"_a = "auto", "stream"_a = 0,
        "u16_is_bf16"_a = false, "Stage 0: chunk summaries of the complete chunks.");
  m.def("route", &run_route, "q"_a.noconvert(), "summaries"_a.noconvert(), "mask"_a.noconvert(),
        "tau"_a.noconvert(), "mu"_a.noconvert(), nb::kw_only(), none_ok("active_chunks"), "n_k"_a = 0, "batch"_a, "method"_a,
        "layout"_a = "bnhd", "backend"_a = "auto", "stream"_a = 0, "u16_is_bf16"_a = false,
        "Stage 1: entmax routing of every query over the summaries of the chunks before its own.");
  m.def("attend", &run_attend, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "o"_a.noconvert(),
        "mask"_a.noconvert(), nb::kw_only(), none_ok("summaries"), none_ok("tau"), none_ok("mu"), none_ok("lse"), "batch"_a,
        "method"_a, "layout"_a = "bnhd", "backend"_a = "auto", "stream"_a = 0, "u16_is_bf16"_a = false,
        "Stage 2: sparse attention over the routed chunks plus the diagonal chunk.");
  m.def("dense_attention", &run_dense, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "o"_a.noconvert(),
        nb::kw_only(), none_ok("lse"), "batch"_a, "scale"_a = 0.0f, "layout"_a = "bnhd", "backend"_a = "auto", "stream"_a = 0,
        "u16_is_bf16"_a = false, "Dense causal attention (bottom-right aligned), the baseline.");
  m.def("routing_stats", &run_routing_stats, "active_chunks"_a.noconvert(), nb::kw_only(), "batch"_a, "n_q"_a, "n_k"_a, "chunk"_a,
        "Sparsity and active-chunk statistics from host active-chunk counts.");
}

}  // namespace dashattn::python
