#include "decode/decode_rows.h"

#include <algorithm>
#include <cstring>

namespace dashattn::decode_test {

ref::ProblemSpec sparse_problem_spec(int64_t b, int64_t n, int64_t h_q, int64_t h_kv, int64_t d, DType dtype,
                                     uint64_t seed) {
  ref::ProblemSpec spec;
  spec.batch = b;
  spec.n_q = spec.n_k = n;
  spec.h_q = h_q;
  spec.h_kv = h_kv;
  spec.d = d;
  spec.dtype = dtype;
  spec.q_std = 3.0;
  spec.seed = seed;
  return spec;
}

DecoderConfig decoder_config(int64_t batch, int64_t h_q, int64_t h_kv, int64_t d, DType dtype, int chunk,
                             int64_t page_size, int64_t initial_capacity) {
  DecoderConfig c;
  c.batch = batch;
  c.h_q = h_q;
  c.h_kv = h_kv;
  c.d = d;
  c.dtype = dtype;
  c.method.chunk_size = chunk;
  c.method.gamma = 4.0f;
  c.page_size = page_size;
  c.initial_capacity = initial_capacity;
  return c;
}

ref::HostTensor slice_rows(const ref::HostTensor& t, int64_t begin, int64_t count) {
  const TensorView& v = t.view;
  ref::HostTensor out = ref::make_host_tensor(v.dtype, {v.shape[0], count, v.shape[2], v.shape[3]});
  const int64_t es = dtype_size(v.dtype);
  for (int64_t b = 0; b < v.shape[0]; ++b)
    for (int64_t i = 0; i < count; ++i)
      for (int64_t h = 0; h < v.shape[2]; ++h)
        std::memcpy(out.bytes.data() + out.view.offset(b, i, h, 0) * es,
                    t.bytes.data() + v.offset(b, begin + i, h, 0) * es, static_cast<size_t>(v.shape[3] * es));
  return out;
}

ref::ForwardOutputs step_outputs(Backend& be, Decoder& dec, const ref::DeviceTensor& q, const ref::DeviceTensor& k,
                                 const ref::DeviceTensor& v, int64_t words, const int32_t* new_tokens,
                                 unsigned char fill) {
  const int64_t b = q.view.shape[0], t = q.view.shape[1], h_q = q.view.shape[2], d = q.view.shape[3];
  const int64_t h_kv = k.view.shape[2];
  ref::ForwardOutputs out;
  out.out_dtype = q.view.dtype;
  out.o = ref::make_host_tensor(q.view.dtype, {b, t, h_q, d});
  out.lse = ref::make_host_tensor(DType::kF32, {b, h_q, t});
  out.mask = ref::make_host_tensor(DType::kU32, {b, h_kv, t, words});
  out.tau = ref::make_host_tensor(DType::kF32, {b, h_q, t});
  out.mu = ref::make_host_tensor(DType::kF32, {b, h_kv, t});
  out.active = ref::make_host_tensor(DType::kI32, {b, h_kv, t});
  if (fill != 0) {
    for (ref::HostTensor* h : {&out.o, &out.lse, &out.mask, &out.tau, &out.mu, &out.active}) {
      std::fill(h->bytes.begin(), h->bytes.end(), fill);
    }
  }
  ref::DeviceTensor o = ref::upload(be, out.o), lse = ref::upload(be, out.lse), mask = ref::upload(be, out.mask),
                    tau = ref::upload(be, out.tau), mu = ref::upload(be, out.mu), active = ref::upload(be, out.active);
  RoutingView routing;
  routing.mask = mask.view;
  routing.tau = tau.view;
  routing.mu = mu.view;
  routing.active_chunks = active.view;
  dec.step(q.view, k.view, v.view, o.view, lse.view, routing, new_tokens);
  ref::download(be, o, out.o);
  ref::download(be, lse, out.lse);
  ref::download(be, mask, out.mask);
  ref::download(be, tau, out.tau);
  ref::download(be, mu, out.mu);
  ref::download(be, active, out.active);
  return out;
}

}  // namespace dashattn::decode_test
