#include "dashattn/decoder.h"

#include <algorithm>

#include "dashattn/dashattn.h"

namespace dashattn {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// New keys/values are appended with one copy per sequence, so each sequence's [t, h, d] block must be dense.
void require_row_dense(const std::string& name, const TensorView& t, int64_t b, int64_t steps, int64_t h, int64_t d,
                       DType dtype, const Device& dev) {
  if (!t.defined()) throw InvalidArgument(name, "a tensor with non-null data", "null data");
  if (t.rank != 4 || t.shape[0] != b || t.shape[1] != steps || t.shape[2] != h || t.shape[3] != d) {
    throw InvalidArgument(name + ".shape", "[" + str(b) + ", " + str(steps) + ", " + str(h) + ", " + str(d) + "]",
                          t.shape_string());
  }
  if (t.dtype != dtype) throw InvalidArgument(name + ".dtype", dtype_name(dtype), dtype_name(t.dtype));
  if (t.device != dev) throw InvalidArgument(name + ".device", "the decoder's device", device_type_name(t.device.type));
  if (t.stride[3] != 1 || t.stride[2] != d || (steps > 1 && t.stride[1] != h * d)) {
    throw InvalidArgument(name + ".stride", "dense [t, h, d] rows per sequence (strides [*, h*d, d, 1])",
                          "[" + str(t.stride[0]) + ", " + str(t.stride[1]) + ", " + str(t.stride[2]) + ", " +
                              str(t.stride[3]) + "]");
  }
}

}  // namespace

Decoder::Decoder(Backend& backend, const DecoderConfig& config, const TensorView& summary_query)
    : backend_(backend), config_(config), summary_query_(summary_query) {
  validate_method(config.method);
  if (config.batch < 1) throw InvalidArgument("batch", ">= 1", str(config.batch));
  if (config.h_kv < 1 || config.h_q < 1 || config.h_q % config.h_kv != 0) {
    throw InvalidArgument("h_kv", "a divisor of h_q = " + str(config.h_q), str(config.h_kv));
  }
  if (config.d < 1) throw InvalidArgument("d", ">= 1", str(config.d));
  if (!is_attention_dtype(config.dtype)) throw InvalidArgument("dtype", "f32, f16 or bf16", dtype_name(config.dtype));
  const Probe probe = Registry::instance().probe(backend);
  if (!probe.available) throw BackendUnavailable(backend.name(), probe.reason);
  reserve(std::max<int64_t>(config.initial_capacity, config.method.chunk_size));
}

Decoder::~Decoder() {
  try {
    backend_.synchronize(stream);
  } catch (...) {
  }
  backend_.deallocate(k_);
  backend_.deallocate(v_);
  backend_.deallocate(s_);
}

TensorView Decoder::cache_view(void* data, int64_t rows, int64_t cap_rows) const {
  TensorView t = make_view(data, config_.dtype, {config_.batch, rows, config_.h_kv, config_.d},
                           Device{backend_.device_type(), config_.device_index});
  t.stride[0] = cap_rows * config_.h_kv * config_.d;
  return t;
}

TensorView Decoder::keys() const { return cache_view(k_, length_, capacity_); }
TensorView Decoder::values() const { return cache_view(v_, length_, capacity_); }
TensorView Decoder::summaries() const {
  return cache_view(s_, summarized_, capacity_ / config_.method.chunk_size);
}

void Decoder::reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  const int64_t chunk = config_.method.chunk_size;
  // Geometric growth keeps appends amortized O(1); capacity stays a multiple of the chunk size.
  int64_t cap = std::max<int64_t>(tokens, capacity_ * 2);
  cap = (cap + chunk - 1) / chunk * chunk;
  const int64_t row = config_.h_kv * config_.d * dtype_size(config_.dtype);  // bytes per token per sequence
  const int64_t b = config_.batch;
  void* nk = backend_.allocate(static_cast<size_t>(b * cap * row));
  void* nv = backend_.allocate(static_cast<size_t>(b * cap * row));
  void* ns = backend_.allocate(static_cast<size_t>(b * (cap / chunk) * row));
  for (int64_t i = 0; i < b && length_ > 0; ++i) {
    backend_.copy(static_cast<char*>(nk) + i * cap * row, static_cast<char*>(k_) + i * capacity_ * row,
                  static_cast<size_t>(length_ * row), CopyKind::kDeviceToDevice, stream);
    backend_.copy(static_cast<char*>(nv) + i * cap * row, static_cast<char*>(v_) + i * capacity_ * row,
                  static_cast<size_t>(length_ * row), CopyKind::kDeviceToDevice, stream);
    if (summarized_ > 0) {
      backend_.copy(static_cast<char*>(ns) + i * (cap / chunk) * row,
                    static_cast<char*>(s_) + i * (capacity_ / chunk) * row, static_cast<size_t>(summarized_ * row),
                    CopyKind::kDeviceToDevice, stream);
    }
  }
  backend_.synchronize(stream);
  backend_.deallocate(k_);
  backend_.deallocate(v_);
  backend_.deallocate(s_);
  k_ = nk;
  v_ = nv;
  s_ = ns;
  capacity_ = cap;
}

void Decoder::step(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                   const TensorView& lse, const RoutingView& routing) {
  const Device dev{backend_.device_type(), config_.device_index};
  if (!q.defined() || q.rank != 4) throw InvalidArgument("q", "rank 4 [b, t, h_q, d]", q.shape_string());
  const int64_t steps = q.shape[1];
  if (steps < 1) throw InvalidArgument("q.shape[1]", ">= 1 new token", str(steps));
  require_row_dense("k", k, config_.batch, steps, config_.h_kv, config_.d, config_.dtype, dev);
  require_row_dense("v", v, config_.batch, steps, config_.h_kv, config_.d, config_.dtype, dev);

  reserve(length_ + steps);
  const int64_t row = config_.h_kv * config_.d * dtype_size(config_.dtype);
  const int64_t es = dtype_size(config_.dtype);
  for (int64_t i = 0; i < config_.batch; ++i) {
    backend_.copy(static_cast<char*>(k_) + (i * capacity_ + length_) * row,
                  static_cast<const char*>(k.data) + i * k.stride[0] * es, static_cast<size_t>(steps * row),
                  CopyKind::kDeviceToDevice, stream);
    backend_.copy(static_cast<char*>(v_) + (i * capacity_ + length_) * row,
                  static_cast<const char*>(v.data) + i * v.stride[0] * es, static_cast<size_t>(steps * row),
                  CopyKind::kDeviceToDevice, stream);
  }

  ForwardParams p;
  p.q = q;
  p.k = cache_view(k_, length_ + steps, capacity_);
  p.v = cache_view(v_, length_ + steps, capacity_);
  p.summary_query = summary_query_;
  p.summaries = cache_view(s_, capacity_ / config_.method.chunk_size, capacity_ / config_.method.chunk_size);
  p.summaries_valid = summarized_;
  p.o = o;
  p.lse = lse;
  p.routing = routing;
  p.method = config_.method;
  p.stream = stream;
  // If forward throws (bad q or o), length_ is not advanced: the appended rows are not committed and the caller
  // can retry with corrected arguments.
  forward(backend_, p);
  length_ += steps;
  summarized_ = num_complete_chunks(length_, config_.method.chunk_size);
}

}  // namespace dashattn
