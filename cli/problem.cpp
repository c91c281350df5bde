#include "problem.h"

#include <chrono>
#include <cmath>

#include "device_tensor.h"

namespace dashattn::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct DeviceInputs {
  DeviceTensor q, k, v, summary_query;
  DeviceTensor seqlens_k, cu_seqlens_q, cu_seqlens_k, block_table;
  BatchLayout layout;  // the host layout's sizes, pointing at the device copies of its arrays
};

// A device copy of a host int32 array; empty stays empty (a null pointer in the layout).
DeviceTensor upload_ints(Backend& backend, const std::vector<int32_t>& host) {
  if (host.empty()) return {};
  return DeviceTensor::from_host(backend, DType::kI32, {static_cast<int64_t>(host.size())}, host.data());
}

DeviceInputs upload(Backend& backend, const HostProblem& p) {
  DeviceInputs d;
  d.q = DeviceTensor::from_host(backend, p.q.dtype(), p.q.shape(), p.q.data());
  d.k = DeviceTensor::from_host(backend, p.k.dtype(), p.k.shape(), p.k.data());
  d.v = DeviceTensor::from_host(backend, p.v.dtype(), p.v.shape(), p.v.data());
  if (p.has_summary_query()) {
    d.summary_query = DeviceTensor::from_host(backend, p.summary_query.dtype(), p.summary_query.shape(),
                                              p.summary_query.data());
  }
  d.seqlens_k = upload_ints(backend, p.layout.seqlens_k);
  d.cu_seqlens_q = upload_ints(backend, p.layout.cu_seqlens_q);
  d.cu_seqlens_k = upload_ints(backend, p.layout.cu_seqlens_k);
  d.block_table = upload_ints(backend, p.layout.block_table);
  d.layout = p.layout.view();
  d.layout.seqlens_k = static_cast<const int32_t*>(d.seqlens_k.data());
  d.layout.cu_seqlens_q = static_cast<const int32_t*>(d.cu_seqlens_q.data());
  d.layout.cu_seqlens_k = static_cast<const int32_t*>(d.cu_seqlens_k.data());
  d.layout.block_table = static_cast<const int32_t*>(d.block_table.data());
  return d;
}

// The library reads a BatchLayout's arrays only where they are host-visible (the CPU backend); on a GPU a bad
// length or block-table entry would go unnoticed. Validating the host copies first gives every backend the
// library's own checks and messages. o aliases q: validation reads its shape only, nothing is written.
void validate_on_host(const HostProblem& p, const MethodParams& method) {
  ForwardParams fp;
  fp.q = p.q.view();
  fp.k = p.k.view();
  fp.v = p.v.view();
  if (p.has_summary_query()) fp.summary_query = p.summary_query.view();
  fp.o = fp.q;
  fp.batch = p.layout.view();
  fp.method = method;
  normalize_forward(fp);
}

io::Tensor download(const std::string& name, const DeviceTensor& t) {
  io::Tensor out(name, t.dtype(), t.shape());
  t.download(out.data());
  return out;
}

}  // namespace

BatchLayout HostBatch::view() const {
  auto data_or_null = [](const std::vector<int32_t>& v) { return v.empty() ? nullptr : v.data(); };
  BatchLayout b;
  b.seqlens_k = data_or_null(seqlens_k);
  b.cu_seqlens_q = data_or_null(cu_seqlens_q);
  b.cu_seqlens_k = data_or_null(cu_seqlens_k);
  b.block_table = data_or_null(block_table);
  b.block_table_stride = block_table_stride;
  b.num_seqs = packed() ? static_cast<int>(cu_seqlens_k.size()) - 1 : 0;
  b.max_seqlen_q = static_cast<int>(max_seqlen_q);
  b.max_seqlen_k = static_cast<int>(max_seqlen_k);
  return b;
}

std::string HostProblem::describe() const {
  std::string s =
      layout.packed() ? std::to_string(sequences()) + " packed sequences " : "b=" + std::to_string(batch()) + " ";
  s += n_q() == n_k() ? "n=" + std::to_string(n_q()) : "n_q=" + std::to_string(n_q()) + " n_k=" + std::to_string(n_k());
  if (layout.packed() || !layout.seqlens_k.empty()) s += " (longest)";
  s += " h_q=" + std::to_string(h_q()) + " h_kv=" + std::to_string(h_kv()) + " d=" + std::to_string(d()) + " " +
       dtype_name(dtype());
  if (layout.paged()) {
    s += ", paged: " + std::to_string(page_size()) + "-key pages, " + std::to_string(k.shape()[0]) + " pages";
  }
  return s;
}

synthetic::Problem generate_synthetic(const synthetic::Config& config) {
  try {
    return synthetic::generate(config);
  } catch (const Error& e) {
    static const std::pair<const char*, const char*> kFlags[] = {
        {"batch", "--batch"}, {"n", "--n"},         {"h_q", "--hq"},           {"h_kv", "--hkv"},
        {"d", "--d"},         {"chunk", "--chunk"}, {"num_needles", "--needles"}, {"needle_queries", "--needle-queries"}};
    for (const auto& [field, flag] : kFlags) {
      if (e.argument() == field) throw Error(e.code(), flag, std::string(e.what()) + " (flag " + flag + ")");
    }
    throw;
  }
}

HostProblem host_problem(const synthetic::Problem& p, DType dtype, int64_t n_q) {
  const synthetic::Config& c = p.config;
  if (n_q <= 0 || n_q > c.n) n_q = c.n;
  HostProblem h;
  std::vector<float> q_tail;
  const std::vector<float>* q_src = &p.q;
  if (n_q < c.n) {
    const int64_t row = c.h_q * c.d;
    q_tail.reserve(static_cast<size_t>(c.batch * n_q * row));
    for (int64_t s = 0; s < c.batch; ++s) {
      const auto first = p.q.begin() + static_cast<std::ptrdiff_t>((s * c.n + c.n - n_q) * row);
      q_tail.insert(q_tail.end(), first, first + static_cast<std::ptrdiff_t>(n_q * row));
    }
    q_src = &q_tail;
  }
  h.q = io::Tensor("q", dtype, {c.batch, n_q, c.h_q, c.d}, synthetic::convert(*q_src, dtype));
  h.k = io::Tensor("k", dtype, {c.batch, c.n, c.h_kv, c.d}, synthetic::convert(p.k, dtype));
  h.v = io::Tensor("v", dtype, {c.batch, c.n, c.h_kv, c.d}, synthetic::convert(p.v, dtype));
  h.summary_query =
      io::Tensor("summary_query", DType::kF32, {c.h_kv, c.d}, synthetic::convert(p.summary_query, DType::kF32));
  return h;
}

ForwardOutputs run_forward(Backend& backend, const HostProblem& p, const MethodParams& method) {
  // Outputs have q's b axis and rows (a packed batch: [1, total_q, ...]); summaries one row per sequence.
  const int64_t b = p.batch(), nq = p.rows_q(), nk = p.n_k(), hq = p.h_q(), hkv = p.h_kv(), d = p.d();
  const int64_t words = mask_words(nk, method.chunk_size);
  const int64_t chunks = num_complete_chunks(nk, method.chunk_size);
  if (p.layout.any()) validate_on_host(p, method);
  DeviceInputs in = upload(backend, p);
  DeviceTensor o(backend, p.dtype(), {b, nq, hq, d});
  DeviceTensor lse(backend, DType::kF32, {b, hq, nq});
  DeviceTensor mask(backend, DType::kU32, {b, hkv, nq, words});
  DeviceTensor active(backend, DType::kI32, {b, hkv, nq});
  DeviceTensor tau(backend, DType::kF32, {b, hq, nq});
  DeviceTensor mu(backend, DType::kF32, {b, hkv, nq});
  // A zero-chunk summary cache would be a null view; then the workspace holds the (empty) summaries instead.
  DeviceTensor summaries;
  if (chunks > 0) summaries = DeviceTensor(backend, p.k.dtype(), {p.sequences(), chunks, hkv, d});

  ForwardParams fp;
  fp.q = in.q.view();
  fp.k = in.k.view();
  fp.v = in.v.view();
  if (p.has_summary_query()) fp.summary_query = in.summary_query.view();
  if (chunks > 0) fp.summaries = summaries.view();
  fp.o = o.view();
  fp.lse = lse.view();
  fp.routing.mask = mask.view();
  fp.routing.tau = tau.view();
  fp.routing.mu = mu.view();
  fp.routing.active_chunks = active.view();
  fp.batch = in.layout;
  fp.method = method;

  backend.synchronize(nullptr);
  const auto start = std::chrono::steady_clock::now();
  forward(backend, fp);
  backend.synchronize(nullptr);
  ForwardOutputs out;
  out.seconds = seconds_since(start);

  out.o = download("o", o);
  out.lse = download("lse", lse);
  out.mask = download("mask", mask);
  out.active = download("active_chunks", active);
  out.tau = download("tau", tau);
  out.mu = download("mu", mu);
  out.summaries = chunks > 0 ? download("summaries", summaries)
                             : io::Tensor("summaries", p.k.dtype(), {p.sequences(), 0, hkv, d});
  return out;
}

DenseOutputs run_dense(Backend& backend, const HostProblem& p, float scale) {
  // Only the synthetic problems of demo and bench come here: contiguous batches of equal lengths.
  DeviceInputs in = upload(backend, p);
  DeviceTensor o(backend, p.dtype(), {p.batch(), p.n_q(), p.h_q(), p.d()});
  DeviceTensor lse(backend, DType::kF32, {p.batch(), p.h_q(), p.n_q()});
  DenseParams dp;
  dp.q = in.q.view();
  dp.k = in.k.view();
  dp.v = in.v.view();
  dp.o = o.view();
  dp.lse = lse.view();
  dp.scale = scale;
  backend.synchronize(nullptr);
  const auto start = std::chrono::steady_clock::now();
  dense_attention(backend, dp);
  backend.synchronize(nullptr);
  DenseOutputs out;
  out.seconds = seconds_since(start);
  out.o = download("o", o);
  out.lse = download("lse", lse);
  return out;
}

RoutingStats stats_of(const ForwardOutputs& out, const HostProblem& p, const MethodParams& method) {
  return routing_stats(out.active.view(), p.layout.view(), p.n_q(), p.n_k(), method.chunk_size);
}

std::vector<float> to_float(const io::Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  const size_t width = static_cast<size_t>(dtype_size(t.dtype()));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* e = t.data() + i * width;
    switch (t.dtype()) {
      case DType::kI32: out[i] = static_cast<float>(*reinterpret_cast<const int32_t*>(e)); break;
      case DType::kU32: out[i] = static_cast<float>(*reinterpret_cast<const uint32_t*>(e)); break;
      case DType::kU8: out[i] = static_cast<float>(*e); break;
      default: out[i] = load_as_float(e, t.dtype()); break;
    }
  }
  return out;
}

io::Tensor from_float(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                      const std::vector<float>& values) {
  return io::Tensor(name, dtype, shape, synthetic::convert(values, dtype));
}

Difference compare(const io::Tensor& a, const io::Tensor& reference) {
  const std::vector<float> x = to_float(a), y = to_float(reference);
  Difference d;
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double ref = y[i];
    if (std::isfinite(ref)) {
      den += ref * ref;
      d.max_abs_reference = std::max(d.max_abs_reference, std::fabs(ref));
    }
    // Padding rows carry lse = -inf on both sides: equal, not a NaN difference.
    if (x[i] == y[i]) continue;
    const double diff = std::fabs(static_cast<double>(x[i]) - ref);
    if (!std::isfinite(diff)) {
      d.max_abs = INFINITY;
      continue;
    }
    d.max_abs = std::max(d.max_abs, diff);
    num += diff * diff;
  }
  d.relative = den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
  if (std::isinf(d.max_abs)) d.relative = INFINITY;
  return d;
}

}  // namespace dashattn::cli
