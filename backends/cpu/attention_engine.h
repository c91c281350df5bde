// The tiled attention loop shared by Stage 2 (routed chunks + diagonal) and dense causal attention (every chunk).
//
// A work item is (sequence, KV head, tile of T adjacent queries). The tile walks the union of its queries' chunks
// in ascending order; for each chunk it gathers the rows (query × group head) of the queries that attend to it,
// so the chunk's K/V block is read once per tile and no FLOP is spent on a query that did not select the chunk.
// Dense attention is the same walk with every chunk selected, which keeps the speed comparison honest.
#pragma once

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/kv_pack.h"

namespace dashattn {
namespace cpu {

struct AttentionJob {
  TensorView q, o, lse;  // normalized; lse optional
  const PackedKv* kv = nullptr;
  Sequences seqs;
  int64_t h_q = 0, h_kv = 0, group = 0, d = 0, chunk = 0;
  float scale = 0;

  // Sparse attention: mask defined. Dense attention: mask undefined (every chunk up to the diagonal).
  TensorView mask;
  // Prior bias (sparse only, prior != kNone): w is rebuilt from tau and the summaries.
  PriorMode prior = PriorMode::kNone;
  TensorView tau, mu, summaries;
  MethodParams method;
};

void run_attention(const AttentionJob& job);

}  // namespace cpu
}  // namespace dashattn
