#include "reference/backend_io.h"

#include <utility>

namespace dashattn::ref {

DeviceBuffer::DeviceBuffer(Backend& backend, size_t bytes) : backend_(&backend), bytes_(bytes) {
  // Zero-byte tensors still need a non-null pointer: validation treats null data as "undefined".
  ptr_ = backend.allocate(bytes > 0 ? bytes : 16);
  backend.memset_zero(ptr_, bytes > 0 ? bytes : 16, nullptr);
}

DeviceBuffer::~DeviceBuffer() {
  if (backend_ && ptr_) backend_->deallocate(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : backend_(std::exchange(o.backend_, nullptr)), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (backend_ && ptr_) backend_->deallocate(ptr_);
    backend_ = std::exchange(o.backend_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

Device device_of(const Backend& backend) { return Device{backend.device_type(), 0}; }

DeviceTensor upload(Backend& backend, const HostTensor& host) {
  DeviceTensor d;
  if (!host.view.defined()) return d;
  d.buffer = DeviceBuffer(backend, host.bytes.size());
  if (!host.bytes.empty())
    backend.copy(d.buffer.data(), host.bytes.data(), host.bytes.size(), CopyKind::kHostToDevice, nullptr);
  d.view = host.view;
  d.view.data = d.buffer.data();
  d.view.device = device_of(backend);
  return d;
}

void download(Backend& backend, const DeviceTensor& dev, HostTensor& host) {
  backend.synchronize(nullptr);
  if (!host.bytes.empty())
    backend.copy(host.bytes.data(), dev.buffer.data(), host.bytes.size(), CopyKind::kDeviceToHost, nullptr);
}

DeviceBuffer upload_ints(Backend& backend, const std::vector<int32_t>& values) {
  if (values.empty()) return DeviceBuffer();
  DeviceBuffer b(backend, values.size() * sizeof(int32_t));
  backend.copy(b.data(), values.data(), values.size() * sizeof(int32_t), CopyKind::kHostToDevice, nullptr);
  return b;
}

DeviceProblem upload_problem(Backend& backend, const Problem& pr) {
  DeviceProblem d;
  d.q = upload(backend, pr.q);
  d.k = upload(backend, pr.k);
  d.v = upload(backend, pr.v);
  d.summary_query = upload(backend, pr.summary_query);
  d.cu_q = upload_ints(backend, pr.cu_seqlens_q);
  d.cu_k = upload_ints(backend, pr.cu_seqlens_k);
  d.seqlens_q = upload_ints(backend, pr.seqlens_q);
  d.seqlens_k = upload_ints(backend, pr.seqlens_k);
  d.layout = pr.layout();
  auto ints = [](const DeviceBuffer& b) { return static_cast<const int32_t*>(b.data()); };
  if (pr.varlen()) {
    d.layout.cu_seqlens_q = ints(d.cu_q);
    d.layout.cu_seqlens_k = ints(d.cu_k);
  }
  d.layout.seqlens_q = pr.seqlens_q.empty() ? nullptr : ints(d.seqlens_q);
  d.layout.seqlens_k = pr.seqlens_k.empty() ? nullptr : ints(d.seqlens_k);
  return d;
}

namespace {
// forward()'s inputs from a problem's tensors (host or device: both hold .view) and batch layout.
template <class P>
ForwardParams forward_inputs_of(const P& pr, const BatchLayout& layout, const MethodParams& method) {
  ForwardParams p;
  p.q = pr.q.view;
  p.k = pr.k.view;
  p.v = pr.v.view;
  p.summary_query = pr.summary_query.view;
  p.batch = layout;
  p.method = method;
  return p;
}
}  // namespace

ForwardParams forward_inputs(const DeviceProblem& dev, const MethodParams& method) {
  return forward_inputs_of(dev, dev.layout, method);
}

ForwardParams forward_inputs(const Problem& problem, const MethodParams& method) {
  return forward_inputs_of(problem, problem.layout(), method);
}

std::vector<Backend*> available_backends(std::vector<std::string>* unavailable_reasons) {
  std::vector<Backend*> out;
  for (Backend* be : Registry::instance().all()) {
    const Probe pr = be->probe();
    if (pr.available) out.push_back(be);
    else if (unavailable_reasons) unavailable_reasons->push_back(std::string(be->name()) + ": " + pr.reason);
  }
  return out;
}

}  // namespace dashattn::ref
