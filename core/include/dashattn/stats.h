// Routing statistics computed on the host from Stage 1's active-chunk counts.
#pragma once

#include <cstdint>
#include <vector>

#include "dashattn/params.h"

namespace dashattn {

struct HeadRoutingStats {
  int64_t queries = 0;           // real (non-padding) queries
  double mean_active_chunks = 0; // routed chunks + the diagonal, averaged over queries
  int64_t attended_keys = 0;     // Σ over queries of routed·C + diagonal keys
  int64_t visible_keys = 0;      // Σ over queries of causally visible keys
  double sparsity = 0;           // 1 − attended / visible
};

struct RoutingStats {
  std::vector<HeadRoutingStats> per_kv_head;
  double sparsity = 0;           // over all KV heads (a layer's figure)
  double mean_active_chunks = 0;
};

// active_chunks: host i32 view [b, h_kv, n_q] as written by route(). n_k is the padded key length.
RoutingStats routing_stats(const TensorView& active_chunks, const BatchLayout& batch, int64_t n_q, int64_t n_k,
                           int64_t chunk);

}  // namespace dashattn
