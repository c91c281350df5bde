#include "dashattn/stats.h"

#include "dashattn/error.h"
#include "dashattn/geometry.h"
#include "dashattn/validate.h"

namespace dashattn {

RoutingStats routing_stats(const TensorView& active, const BatchLayout& batch, int64_t n_q, int64_t n_k,
                           int64_t chunk) {
  if (active.device.type != DeviceType::kCpu || active.dtype != DType::kI32 || active.rank != 3) {
    throw InvalidArgument("active_chunks", "a host i32 tensor [b, h_kv, n_q]",
                          std::string(dtype_name(active.dtype)) + " " + active.shape_string() + " on " +
                              device_type_name(active.device.type));
  }
  if (chunk < 1) throw InvalidArgument("chunk", ">= 1", std::to_string(chunk));
  const int64_t h_kv = active.shape[1];
  const int64_t seqs = batch.is_varlen() ? batch.num_seqs : active.shape[0];
  RoutingStats st;
  st.per_kv_head.resize(static_cast<size_t>(h_kv));
  const int32_t* a = active.ptr<const int32_t>();
  double total_active = 0;
  int64_t total_queries = 0, attended = 0, visible = 0;
  for (int64_t h = 0; h < h_kv; ++h) {
    HeadRoutingStats& hs = st.per_kv_head[static_cast<size_t>(h)];
    double sum_active = 0;
    for (int64_t s = 0; s < seqs; ++s) {
      const SequenceSpan sp = sequence_span(batch, s, n_q, n_k);
      for (int64_t i = 0; i < sp.n_q; ++i) {
        const int64_t p = query_position(i, sp.n_q, sp.n_k);
        const int32_t count = a[active.offset(sp.batch_index, h, sp.q_begin + i)];
        ++hs.queries;
        sum_active += count;
        hs.attended_keys += (count > 0 ? count - 1 : 0) * chunk + diagonal_keys(p, chunk);
        hs.visible_keys += visible_keys(p);
      }
    }
    hs.mean_active_chunks = hs.queries ? sum_active / static_cast<double>(hs.queries) : 0.0;
    hs.sparsity = hs.visible_keys ? 1.0 - static_cast<double>(hs.attended_keys) / static_cast<double>(hs.visible_keys) : 0.0;
    total_active += sum_active;
    total_queries += hs.queries;
    attended += hs.attended_keys;
    visible += hs.visible_keys;
  }
  st.mean_active_chunks = total_queries ? total_active / static_cast<double>(total_queries) : 0.0;
  st.sparsity = visible ? 1.0 - static_cast<double>(attended) / static_cast<double>(visible) : 0.0;
  return st;
}

}  // namespace dashattn
