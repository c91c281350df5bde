// Random host problems in the library's layouts and the reading of one sequence out of library tensors.
#include <algorithm>
#include <stdexcept>

#include "reference/reference.h"

namespace dashattn::ref {

namespace {

TensorView host_view(void* data, DType dtype, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& stride) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = Device{DeviceType::kCpu, 0};
  t.rank = static_cast<int>(shape.size());
  for (size_t a = 0; a < shape.size(); ++a) {
    t.shape[a] = shape[a];
    t.stride[a] = stride[a];
  }
  return t;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<int32_t> prefix_sums(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  for (size_t s = 0; s < lengths.size(); ++s) cu[s + 1] = cu[s] + lengths[s];
  return cu;
}

// Fills every element of a host tensor (padding included) with N(0, std²) values stored in its dtype.
void fill_normal(HostTensor& t, double stddev, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, stddev);
  const int64_t n = static_cast<int64_t>(t.bytes.size()) / dtype_size(t.view.dtype);
  for (int64_t e = 0; e < n; ++e)
    store_from_float(t.bytes.data() + e * dtype_size(t.view.dtype), t.view.dtype, static_cast<float>(normal(rng)));
}

}  // namespace

HostTensor make_host_tensor(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.bytes.assign(static_cast<size_t>(product(shape) * dtype_size(dtype)), 0);
  std::vector<int64_t> stride(shape.size(), 1);
  for (int a = static_cast<int>(shape.size()) - 2; a >= 0; --a) stride[a] = stride[a + 1] * shape[a + 1];
  t.view = host_view(t.bytes.data(), dtype, shape, stride);
  return t;
}

HostTensor make_host_tensor_bhnd(DType dtype, int64_t b, int64_t n, int64_t h, int64_t d) {
  HostTensor t;
  t.bytes.assign(static_cast<size_t>(b * h * n * d * dtype_size(dtype)), 0);
  t.view = host_view(t.bytes.data(), dtype, {b, n, h, d}, {h * n * d, d, n * d, 1});
  return t;
}

int64_t Problem::num_sequences() const {
  return varlen() ? static_cast<int64_t>(cu_seqlens_q.size()) - 1 : spec.batch;
}

int64_t Problem::padded_n_q() const {
  if (!varlen()) return spec.n_q;
  return *std::max_element(spec.varlen_q.begin(), spec.varlen_q.end());
}

int64_t Problem::padded_n_k() const {
  if (!varlen()) return spec.n_k;
  return *std::max_element(spec.varlen_k.begin(), spec.varlen_k.end());
}

int64_t Problem::rows_q() const { return varlen() ? cu_seqlens_q.back() : spec.n_q; }

BatchLayout Problem::layout() const {
  BatchLayout l;
  if (varlen()) {
    l.cu_seqlens_q = cu_seqlens_q.data();
    l.cu_seqlens_k = cu_seqlens_k.data();
    l.num_seqs = static_cast<int>(num_sequences());
    l.max_seqlen_q = static_cast<int>(padded_n_q());
    l.max_seqlen_k = static_cast<int>(padded_n_k());
  }
  if (!seqlens_q.empty()) l.seqlens_q = seqlens_q.data();
  if (!seqlens_k.empty()) l.seqlens_k = seqlens_k.data();
  return l;
}

Span Problem::span(int64_t s) const {
  Span sp;
  if (varlen()) {
    sp.q_begin = cu_seqlens_q[s];
    sp.n_q = cu_seqlens_q[s + 1] - cu_seqlens_q[s];
    sp.k_begin = cu_seqlens_k[s];
    sp.n_k = cu_seqlens_k[s + 1] - cu_seqlens_k[s];
    return sp;
  }
  sp.batch_index = s;
  sp.n_q = seqlens_q.empty() ? spec.n_q : seqlens_q[s];
  sp.n_k = seqlens_k.empty() ? spec.n_k : seqlens_k[s];
  return sp;
}

Sequence Problem::sequence(int64_t s) const { return load_sequence(q.view, k.view, v.view, summary_query.view, span(s)); }

Problem make_problem(const ProblemSpec& spec) {
  if (spec.h_kv <= 0 || spec.h_q % spec.h_kv != 0) throw std::invalid_argument("make_problem: h_q % h_kv != 0");
  Problem pr;
  pr.spec = spec;
  const bool varlen = !spec.varlen_q.empty();
  if (varlen) {
    if (spec.varlen_k.size() != spec.varlen_q.size()) throw std::invalid_argument("make_problem: varlen sizes");
    pr.cu_seqlens_q = prefix_sums(spec.varlen_q);
    pr.cu_seqlens_k = prefix_sums(spec.varlen_k);
  }
  pr.seqlens_q = spec.seqlens_q;
  pr.seqlens_k = spec.seqlens_k;

  auto tensor = [&](int64_t rows, int64_t heads) {
    if (varlen) {
      if (spec.layout == Layout::kBNHD) return make_host_tensor(spec.dtype, {rows, heads, spec.d});
      // [h, total, d] storage seen as [total, h, d].
      HostTensor t;
      t.bytes.assign(static_cast<size_t>(heads * rows * spec.d * dtype_size(spec.dtype)), 0);
      t.view = host_view(t.bytes.data(), spec.dtype, {rows, heads, spec.d}, {spec.d, rows * spec.d, 1});
      return t;
    }
    return spec.layout == Layout::kBNHD ? make_host_tensor(spec.dtype, {spec.batch, rows, heads, spec.d})
                                        : make_host_tensor_bhnd(spec.dtype, spec.batch, rows, heads, spec.d);
  };
  const int64_t rows_q = varlen ? pr.cu_seqlens_q.back() : spec.n_q;
  const int64_t rows_k = varlen ? pr.cu_seqlens_k.back() : spec.n_k;
  pr.q = tensor(rows_q, spec.h_q);
  pr.k = tensor(rows_k, spec.h_kv);
  pr.v = tensor(rows_k, spec.h_kv);

  std::mt19937_64 rng(spec.seed);
  fill_normal(pr.q, spec.q_std, rng);
  fill_normal(pr.k, spec.k_std, rng);
  fill_normal(pr.v, spec.v_std, rng);
  if (!spec.zero_summary_query) {
    pr.summary_query = make_host_tensor(spec.dtype, {spec.h_kv, spec.d});
    fill_normal(pr.summary_query, spec.summary_query_std, rng);
  }
  return pr;
}

double load_element(const TensorView& t, int64_t b, int64_t n, int64_t h, int64_t e) {
  const int64_t off = t.rank == 3 ? n * t.stride[0] + h * t.stride[1] + e * t.stride[2] : t.offset(b, n, h, e);
  return load_as_float(static_cast<const unsigned char*>(t.data) + off * dtype_size(t.dtype), t.dtype);
}

Sequence load_sequence(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& summary_query, const Span& span) {
  const int head_axis = q.rank == 3 ? 1 : 2;
  Sequence s;
  s.n_q = span.n_q;
  s.n_k = span.n_k;
  s.h_q = q.shape[head_axis];
  s.h_kv = k.shape[head_axis];
  s.d = q.shape[head_axis + 1];
  s.key_dtype = k.dtype;
  s.q.resize(s.n_q * s.h_q * s.d);
  s.k.resize(s.n_k * s.h_kv * s.d);
  s.v.resize(s.n_k * s.h_kv * s.d);
  for (int64_t i = 0; i < s.n_q; ++i)
    for (int64_t h = 0; h < s.h_q; ++h)
      for (int64_t e = 0; e < s.d; ++e)
        s.q[(i * s.h_q + h) * s.d + e] = load_element(q, span.batch_index, span.q_begin + i, h, e);
  for (int64_t j = 0; j < s.n_k; ++j)
    for (int64_t r = 0; r < s.h_kv; ++r)
      for (int64_t e = 0; e < s.d; ++e) {
        s.k[(j * s.h_kv + r) * s.d + e] = load_element(k, span.batch_index, span.k_begin + j, r, e);
        s.v[(j * s.h_kv + r) * s.d + e] = load_element(v, span.batch_index, span.k_begin + j, r, e);
      }
  s.summary_query.assign(s.h_kv * s.d, 0.0);
  if (summary_query.defined())
    for (int64_t r = 0; r < s.h_kv; ++r)
      for (int64_t e = 0; e < s.d; ++e)
        s.summary_query[r * s.d + e] = load_as_float(
            static_cast<const unsigned char*>(summary_query.data) +
                (r * summary_query.stride[0] + e * summary_query.stride[1]) * dtype_size(summary_query.dtype),
            summary_query.dtype);
  return s;
}

}  // namespace dashattn::ref
