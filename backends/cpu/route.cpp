// Stage 1: score every query head against the summaries of its routable chunks, solve the exact entmax
// threshold per head, and keep the chunks whose group weight is positive.
#include <tbb/enumerable_thread_specific.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_stages.h"
#include "backends/cpu/simd_kernels.h"
#include "dashattn/entmax.h"
#include "dashattn/geometry.h"
#include "dashattn/prior.h"

namespace dashattn {
namespace cpu {
namespace {

// Rows (query × group head) scored per work item, and the cap on the item's score block in floats.
constexpr int64_t kRouteRowsTarget = 128;
constexpr int64_t kRouteScoreFloats = int64_t{1} << 20;

// Candidates strictly above max − 1 are all the exact solver can ever put in the support (τ ≥ max − 1); the
// margin also covers the reference solver, whose trial points may dip 1e-5 below max − 1.
constexpr double kCandidateMargin = 1.0 + 1e-3;

struct RouteScratch {
  Scratch<float> q, scores, x, cand;
  Scratch<const float*> a_rows;
  Scratch<float> tau;
  Scratch<uint32_t> cand_bits;
};

struct Item {
  int64_t seq, kv_head, first_query, count;
};

// Summaries of one (sequence, KV head) transposed to [d][cols], f32, zero-padded columns.
struct SummaryTable {
  int64_t cols = 0;
  int64_t offset = 0;
};

}  // namespace

void route(const RouteParams& params) {
  const RouteParams p = normalize_route(params);
  const ProblemShape shape = route_shape(p);
  const int64_t g = shape.group, d = shape.d, h_kv = shape.h_kv, C = shape.chunk;
  const int64_t dp = pad_floats(d);
  Sequences seqs;
  seqs.batch = p.batch;
  seqs.count = shape.batch;
  seqs.padded_n_q = shape.n_q;
  seqs.padded_n_k = shape.n_k;
  seqs.rows_q = shape.rows_q;
  std::vector<SequenceSpan> spans(static_cast<size_t>(seqs.count));
  for (int64_t s = 0; s < seqs.count; ++s) spans[s] = seqs.span(s);

  // Transposed f32 summaries, [h_kv][seq] tables of [d][cols].
  std::vector<SummaryTable> tables(static_cast<size_t>(seqs.count * h_kv));
  int64_t total = 0;
  for (int64_t s = 0; s < seqs.count; ++s) {
    for (int64_t r = 0; r < h_kv; ++r) {
      SummaryTable& t = tables[s * h_kv + r];
      t.cols = pad_floats(std::max<int64_t>(1, num_complete_chunks(spans[s].n_k, C)));
      t.offset = total;
      total += d * t.cols;
    }
  }
  static thread_local Scratch<float> table_storage;
  float* table_data = table_storage.reserve(static_cast<size_t>(std::max<int64_t>(total, 1)));
  // Per-thread scratch kept across calls (grow-only), so repeated calls do not fault in fresh pages. A TBB thread
  // runs one of these task bodies at a time (they start no nested parallel work), so sharing it is safe.
  static tbb::enumerable_thread_specific<Scratch<float>> row_tls;
  parallel_items(seqs.count * h_kv, [&](int64_t flat) {
    const int64_t s = flat / h_kv, r = flat % h_kv;
    const SummaryTable& t = tables[flat];
    const int64_t n = num_complete_chunks(spans[s].n_k, C);
    float* row = row_tls.local().reserve(static_cast<size_t>(dp));
    float* dst = table_data + t.offset;
    std::fill(dst, dst + d * t.cols, 0.0f);
    for (int64_t c = 0; c < n; ++c) {
      load_row(element(p.summaries, s, c, r), p.summaries.dtype, d, row);
      for (int64_t k = 0; k < d; ++k) dst[k * t.cols + c] = row[k];
    }
  });

  const RoutingScore score = make_routing_score(p.method, d);
  const float alpha = p.method.alpha;
  const RoutingView& out = p.routing;
  const int64_t words = out.mask.shape[3];

  std::vector<Item> items;
  for (int64_t r = 0; r < h_kv; ++r) {
    for (int64_t s = 0; s < seqs.count; ++s) {
      const int64_t cols = tables[s * h_kv + r].cols;
      const int64_t per_item =
          std::clamp<int64_t>(std::min(kRouteRowsTarget / g, kRouteScoreFloats / (g * cols)), 1, 1024);
      for (int64_t i = 0; i < spans[s].n_q; i += per_item) {
        items.push_back({s, r, i, std::min(per_item, spans[s].n_q - i)});
      }
    }
  }

  static tbb::enumerable_thread_specific<RouteScratch> scratch;
  parallel_items(static_cast<int64_t>(items.size()), [&](int64_t k) {
    const Item& item = items[k];
    const SequenceSpan& sp = spans[item.seq];
    const int64_t r = item.kv_head;
    const SummaryTable& table = tables[item.seq * h_kv + r];
    RouteScratch& ws = scratch.local();
    const int64_t rows = item.count * g;
    const int64_t last_diag = diagonal_chunk(query_position(item.first_query + item.count - 1, sp.n_q, sp.n_k), C);
    const int64_t cols = pad_floats(std::max<int64_t>(last_diag, 1));

    float* q = ws.q.reserve(rows * dp);
    const float** a_rows = ws.a_rows.reserve(rows);
    for (int64_t qi = 0; qi < item.count; ++qi) {
      const int64_t row = sp.q_begin + item.first_query + qi;
      for (int64_t h = 0; h < g; ++h) {
        float* dst = q + (qi * g + h) * dp;
        load_row(element(p.q, sp.batch_index, row, r * g + h), p.q.dtype, d, dst);
        a_rows[qi * g + h] = dst;
      }
    }
    float* scores = ws.scores.reserve(rows * cols);
    if (last_diag > 0) {
      matmul_bt(a_rows, static_cast<int>(rows), static_cast<int>(d), table_data + table.offset, table.cols,
                static_cast<int>(cols), scores, cols);
    }
    float* x = ws.x.reserve(g * cols);
    float* cand = ws.cand.reserve(cols);
    float* tau = ws.tau.reserve(g);
    uint32_t* cand_bits = ws.cand_bits.reserve(words);

    for (int64_t qi = 0; qi < item.count; ++qi) {
      const int64_t i = item.first_query + qi;
      const int64_t row = sp.q_begin + i;
      const int64_t diag = diagonal_chunk(query_position(i, sp.n_q, sp.n_k), C);
      uint32_t* mask = static_cast<uint32_t*>(mutable_element(out.mask, sp.batch_index, r, row));
      std::memset(mask, 0, static_cast<size_t>(words) * sizeof(uint32_t));
      std::memset(cand_bits, 0, static_cast<size_t>(words) * sizeof(uint32_t));
      for (int64_t h = 0; h < g; ++h) {
        const float* srow = scores + (qi * g + h) * cols;
        float* xh = x + h * cols;
        double m = -INFINITY;
        for (int64_t c = 0; c < diag; ++c) {
          xh[c] = score(srow[c]);
          m = std::max(m, static_cast<double>(xh[c]));
        }
        float t = 0.0f;
        if (diag > 0) {
          int n = 0;
          for (int64_t c = 0; c < diag; ++c) {
            if (static_cast<double>(xh[c]) > m - kCandidateMargin) cand[n++] = xh[c];
          }
          t = static_cast<float>(entmax_threshold(cand, n, static_cast<double>(alpha), p.method.solver).tau);
          for (int64_t c = 0; c < diag; ++c) {
            if (xh[c] > t) cand_bits[c >> 5] |= 1u << (c & 31);
          }
        }
        tau[h] = t;
        *static_cast<float*>(mutable_element(out.tau, sp.batch_index, r * g + h, row)) = t;
      }
      // Only chunks above some head's threshold can weigh anything; group_weight decides whether they do.
      double log_sum = 0.0;
      int64_t routed = 0;
      for (int64_t w = 0; w * 32 < diag; ++w) {
        uint32_t bits = cand_bits[w];
        while (bits) {
          const int64_t c = w * 32 + __builtin_ctz(bits);
          bits &= bits - 1;
          const float weight = group_weight([&](int h) { return x[h * cols + c]; }, [&](int h) { return tau[h]; },
                                            static_cast<int>(g), alpha);
          if (weight > 0.0f) {
            set_mask_bit(mask, c);
            log_sum += static_cast<double>(std::log(weight));
            ++routed;
          }
        }
      }
      set_mask_bit(mask, diag);
      *static_cast<float*>(mutable_element(out.mu, sp.batch_index, r, row)) =
          routed > 0 ? static_cast<float>(log_sum / static_cast<double>(routed)) : 0.0f;
      if (out.active_chunks.defined()) {
        *static_cast<int32_t*>(mutable_element(out.active_chunks, sp.batch_index, r, row)) =
            static_cast<int32_t>(routed + 1);
      }
    }
  });

  // Padding rows of a padded batch: nothing routed, not even a diagonal.
  if (!p.batch.is_varlen()) {
    for (int64_t s = 0; s < seqs.count; ++s) {
      for (int64_t i = spans[s].n_q; i < seqs.padded_n_q; ++i) {
        for (int64_t r = 0; r < h_kv; ++r) {
          std::memset(mutable_element(out.mask, s, r, i), 0, static_cast<size_t>(words) * sizeof(uint32_t));
          *static_cast<float*>(mutable_element(out.mu, s, r, i)) = 0.0f;
          if (out.active_chunks.defined()) *static_cast<int32_t*>(mutable_element(out.active_chunks, s, r, i)) = 0;
          for (int64_t h = 0; h < g; ++h) *static_cast<float*>(mutable_element(out.tau, s, r * g + h, i)) = 0.0f;
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace dashattn
