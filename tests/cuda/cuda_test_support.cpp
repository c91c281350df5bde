// Device copies for the CUDA tests, and the test main: skips (exit code 77) where no CUDA device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "cuda_test_support.h"

#include <cstdio>

namespace dashattn::cuda_test {

Backend& cuda_backend() {
  Backend* be = Registry::instance().find("cuda");
  if (!be) throw std::runtime_error("the CUDA backend is not compiled in");
  return *be;
}

ref::ProblemSpec spec(int64_t b, int64_t n_q, int64_t n_k, int64_t h_q, int64_t h_kv, int64_t d, DType dt,
                      double q_std, uint64_t seed) {
  ref::ProblemSpec s;
  s.batch = b;
  s.n_q = n_q;
  s.n_k = n_k;
  s.h_q = h_q;
  s.h_kv = h_kv;
  s.d = d;
  s.dtype = dt;
  s.q_std = q_std;
  s.seed = seed;
  return s;
}

bool compiled(int64_t d) {
  ForwardParams f;
  f.q.dtype = DType::kBF16;
  f.q.rank = 4;
  f.q.shape = {1, 1, 1, d};
  f.q.device = Device{DeviceType::kCuda, 0};
  return cuda_backend().unsupported_reason(f).find("head dim") == std::string::npos;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : ptr_(cuda_backend().allocate(bytes)), bytes_(bytes) {}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cuda_backend().deallocate(ptr_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cuda_backend().deallocate(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
  }
  return *this;
}

namespace {

// Bytes spanned by a strided view (max offset + 1 element).
size_t span_bytes(const TensorView& v) {
  int64_t last = 0;
  for (int i = 0; i < v.rank; ++i) last += (v.shape[i] - 1) * v.stride[i];
  return static_cast<size_t>((last + 1) * dtype_size(v.dtype));
}

DeviceBuffer copy_ints(const std::vector<int32_t>& h) {
  if (h.empty()) return {};
  DeviceBuffer b(h.size() * 4);
  cuda_backend().copy(b.get(), h.data(), h.size() * 4, CopyKind::kHostToDevice, nullptr);
  return b;
}

}  // namespace

DeviceTensor to_device(const TensorView& host) {
  DeviceTensor t;
  t.view = host;
  if (!host.defined()) return t;
  const size_t bytes = span_bytes(host);
  t.buffer = DeviceBuffer(bytes);
  cuda_backend().copy(t.buffer.get(), host.data, bytes, CopyKind::kHostToDevice, nullptr);
  t.view.data = t.buffer.get();
  t.view.device = Device{DeviceType::kCuda, 0};
  return t;
}

DeviceTensor device_filled(DType dtype, std::vector<int64_t> shape, unsigned char byte) {
  DeviceTensor t;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  t.buffer = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(n, 1) * dtype_size(dtype)));
  std::vector<unsigned char> fill(t.buffer.bytes(), byte);
  cuda_backend().copy(t.buffer.get(), fill.data(), fill.size(), CopyKind::kHostToDevice, nullptr);
  cuda_backend().synchronize(nullptr);
  t.view.data = t.buffer.get();
  t.view.dtype = dtype;
  t.view.device = Device{DeviceType::kCuda, 0};
  t.view.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = t.view.rank - 1; i >= 0; --i) {
    t.view.shape[i] = shape[i];
    t.view.stride[i] = stride;
    stride *= shape[i];
  }
  return t;
}

DeviceProblem to_device(const ref::Problem& pr) {
  DeviceProblem d;
  d.q = to_device(pr.q.view);
  d.k = to_device(pr.k.view);
  d.v = to_device(pr.v.view);
  d.summary_query = to_device(pr.summary_query.view);
  d.cu_q = copy_ints(pr.cu_seqlens_q);
  d.cu_k = copy_ints(pr.cu_seqlens_k);
  d.seqlens_q = copy_ints(pr.seqlens_q);
  d.seqlens_k = copy_ints(pr.seqlens_k);
  d.batch = pr.layout();
  d.batch.cu_seqlens_q = static_cast<const int32_t*>(d.cu_q.get());
  d.batch.cu_seqlens_k = static_cast<const int32_t*>(d.cu_k.get());
  d.batch.seqlens_q = static_cast<const int32_t*>(d.seqlens_q.get());
  d.batch.seqlens_k = static_cast<const int32_t*>(d.seqlens_k.get());
  cuda_backend().synchronize(nullptr);
  return d;
}

std::vector<double> to_host_double(const TensorView& dev) {
  std::vector<uint16_t> raw = to_host<uint16_t>(dev);
  std::vector<double> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    out[i] = dev.dtype == DType::kBF16 ? bf16_to_float(raw[i]) : f16_to_float(raw[i]);
  }
  return out;
}

}  // namespace dashattn::cuda_test

int main(int argc, char** argv) {
  using namespace dashattn;
  Backend* be = Registry::instance().find("cuda");
  if (!be) {
    std::printf("SKIPPED: the CUDA backend is not compiled in\n");
    return 77;
  }
  const Probe probe = be->probe();
  if (!probe.available) {
    std::printf("SKIPPED: %s\n", probe.reason.c_str());
    return 77;
  }
  std::printf("CUDA device: %s\n", probe.reason.c_str());
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
