#include "paged_pool.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace dashattn::paged_test {
namespace {

constexpr unsigned char kSentinel = 0x5a;

}  // namespace

Outputs::Outputs(const ref::Problem& pr, int64_t chunk) {
  const int64_t b = pr.spec.batch, n_q = pr.spec.n_q, n_k = pr.spec.n_k;
  const int64_t h_q = pr.spec.h_q, h_kv = pr.spec.h_kv, d = pr.spec.d;
  o = ref::make_host_tensor(pr.q.view.dtype, {b, n_q, h_q, d});
  lse = ref::make_host_tensor(DType::kF32, {b, h_q, n_q});
  mask = ref::make_host_tensor(DType::kU32, {b, h_kv, n_q, mask_words(n_k, chunk)});
  tau = ref::make_host_tensor(DType::kF32, {b, h_q, n_q});
  mu = ref::make_host_tensor(DType::kF32, {b, h_kv, n_q});
  active = ref::make_host_tensor(DType::kI32, {b, h_kv, n_q});
  summaries = ref::make_host_tensor(pr.k.view.dtype, {b, std::max<int64_t>(1, n_k / chunk), h_kv, d});
  for (ref::HostTensor* t : {&o, &lse, &mask, &tau, &mu, &active, &summaries})
    std::memset(t->bytes.data(), kSentinel, t->bytes.size());
}

void Outputs::attach(ForwardParams* p) {
  p->o = o.view;
  p->lse = lse.view;
  p->routing.mask = mask.view;
  p->routing.tau = tau.view;
  p->routing.mu = mu.view;
  p->routing.active_chunks = active.view;
  p->summaries = summaries.view;
}

void check_same_bytes(const ref::HostTensor& got, const ref::HostTensor& want, const std::string& what) {
  const std::string diff = ref::byte_difference(got, want);
  CHECK_MESSAGE(diff.empty(), what << ": " << diff);
}

void check_same_outputs(const ref::ForwardOutputs& got, const ref::ForwardOutputs& want) {
  for (const std::string& diff : ref::byte_differences(got, want)) FAIL_CHECK(diff);
}

bool has_nan(const ref::HostTensor& t) {
  const int64_t n = t.view.numel(), es = dtype_size(t.view.dtype);
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(load_as_float(t.bytes.data() + i * es, t.view.dtype))) return true;
  return false;
}

Backend* cpu_backend() {
  Registry& reg = Registry::instance();
  Backend* be = reg.find("cpu");
  return be != nullptr && reg.probe(*be).available ? be : nullptr;
}

}  // namespace dashattn::paged_test
