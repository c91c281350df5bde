// Decoder: the convenience object for cached decoding on any backend.
//
// It owns, on the backend's device, the K/V cache and the chunk-summary cache of a padded batch of b sequences,
// grows them geometrically (no cap on chunks other than memory), and on each step appends the new keys and values,
// summarizes exactly the chunks they complete, routes the new queries and attends. Engines that own their KV
// cache call forward() with ForwardParams::summaries / summaries_valid instead.
#pragma once

#include <cstdint>

#include "dashattn/backend.h"

namespace dashattn {

struct DecoderConfig {
  int64_t batch = 1;
  int64_t h_q = 0, h_kv = 0, d = 0;
  DType dtype = DType::kBF16;
  int device_index = 0;             // which device of the backend's kind holds the caches (cuda:1 -> 1)
  MethodParams method;
  int64_t initial_capacity = 4096;  // tokens per sequence before the first growth
};

class Decoder {
 public:
  // summary_query: [h_kv, d] on the backend's device (undefined: zeros). Its data must outlive the decoder.
  Decoder(Backend& backend, const DecoderConfig& config, const TensorView& summary_query = {});
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Appends t new tokens to every sequence and computes their attention outputs.
  // q [b, t, h_q, d], k and v [b, t, h_kv, d], o [b, t, h_q, d]; lse (optional) [b, h_q, t]; routing (optional
  // outputs) as in ForwardParams for the t new queries.
  void step(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
            const TensorView& lse = {}, const RoutingView& routing = {});

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t summarized_chunks() const { return summarized_; }
  // Views of the caches ([b, length, h_kv, d] and [b, summarized_chunks, h_kv, d]) on the backend's device.
  TensorView keys() const;
  TensorView values() const;
  TensorView summaries() const;
  Backend& backend() const { return backend_; }
  void* stream = nullptr;

 private:
  void reserve(int64_t tokens);
  TensorView cache_view(void* data, int64_t rows, int64_t cap_rows) const;

  Backend& backend_;
  DecoderConfig config_;
  TensorView summary_query_;
  void* k_ = nullptr;
  void* v_ = nullptr;
  void* s_ = nullptr;
  int64_t length_ = 0, capacity_ = 0, summarized_ = 0;
};

}  // namespace dashattn
