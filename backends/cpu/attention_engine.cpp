#include "backends/cpu/attention_engine.h"

#include <tbb/enumerable_thread_specific.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/simd_kernels.h"
#include "dashattn/geometry.h"
#include "dashattn/prior.h"

namespace dashattn {
namespace cpu {
namespace {

// Rows (query × group head) a tile aims for: enough that a chunk's K/V block, read once per tile, serves many
// rows even when each query keeps only a few percent of its chunks (128 queries of a random 93.75 % mask keep
// 8 each, on average, of any chunk they can see), small enough that the tile's q and accumulators (1 MiB at
// d = 128) stay in a 2 MiB L2. Measured at n = 8192, h_q = 16, h_kv = 2: 1024 rows beat 512 by ~5-10 % at
// 93.75 % sparsity and tie on dense.
// 2048 and 4096 rows (256 and 512 queries) measured within noise of 1024 at 93.75 %.
constexpr int64_t kTileRowsTarget = 1024;
constexpr int64_t kMaxTileQueries = 128;

int64_t queries_per_tile(int64_t group) { return std::clamp<int64_t>(kTileRowsTarget / group, 1, kMaxTileQueries); }

// Starts the next chunk's K or V block: the first two lines of each 4 KiB page, enough for the hardware streamer
// to fetch the rest of the page. Prefetching every line (1024 per chunk) stalls on full fill buffers instead.
void prefetch_block(const float* p, int64_t floats) {
  const char* bytes = reinterpret_cast<const char*>(p);
  const int64_t n = floats * static_cast<int64_t>(sizeof(float));
  for (int64_t off = 0; off < n; off += 4096) {
    __builtin_prefetch(bytes + off, 0, 2);
    if (off + 64 < n) __builtin_prefetch(bytes + off + 64, 0, 2);
  }
}

// How many queries ahead the q rows are fetched (and the o rows fetched for writing). A query's rows of one KV
// head (g·d elements) are a short run in a fresh page, too short for the hardware prefetcher to catch before
// the widening loop moves on; widening q and writing o are ~15 % of a diagonal-only Stage 2 (s = 100 %).
constexpr int64_t kRowPrefetchDistance = 4;

template <bool kWrite>
void prefetch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, kWrite ? 1 : 0, 3);
  __builtin_prefetch(c + bytes - 1, kWrite ? 1 : 0, 3);
}

struct TileScratch {
  Scratch<float> q, o, s, row_max, row_sum;
  Scratch<float> gathered_max, gathered_sum, gathered_rescale, gathered_bias;
  Scratch<int> gathered_valid, gathered_row;
  Scratch<int> bucket_begin, bucket_fill, entry_query, entry_valid;
  Scratch<float> entry_bias;
  Scratch<int64_t> walk_chunks;
  Scratch<const float*> a_rows, p_rows, q_rows;
  Scratch<float*> o_rows;
  Scratch<int64_t> list_chunk;
  Scratch<float> list_bias;
  Scratch<float> summary_rows, summary_t, scores, taus;
};

struct TileQuery {
  int64_t row = 0;   // row in q / o / per-row outputs
  int64_t pos = 0;   // absolute key position
  int64_t diag = 0;  // diagonal chunk
  int64_t len = 0;
};

struct Item {
  int64_t seq, kv_head, first_query;
};

class TileRunner {
 public:
  TileRunner(const AttentionJob& job, const std::vector<SequenceSpan>& spans)
      : job_(job), spans_(spans), kv_(*job.kv), tile_(queries_per_tile(job.group)),
        sparse_(job.mask.defined()), biased_(sparse_ && job.prior != PriorMode::kNone),
        score_(make_routing_score(job.method, job.d)), inv_sigma_(1.0f / job.method.sigma) {}

  int64_t tile() const { return tile_; }

  void run(const Item& item, TileScratch& ws) const {
    const SequenceSpan& sp = spans_[item.seq];
    const int64_t r = item.kv_head, g = job_.group, d = job_.d, C = job_.chunk;
    const int64_t dp = kv_.d_pad(), cp = kv_.chunk_pad();
    const int64_t nq = std::min(tile_, sp.n_q - item.first_query);
    const int64_t rows = nq * g;
    const int64_t list_cap = sp.n_k / C + 1;

    // q rows as the kernels read them: f32 inputs in place (any row stride works for broadcast loads), other
    // dtypes widened once into the tile's scratch. The softmax scale is applied to the scores instead.
    const bool q_in_place = job_.q.dtype == DType::kF32;
    float* q_scratch = q_in_place ? nullptr : ws.q.reserve(rows * dp);
    const float** q_rows = ws.q_rows.reserve(rows);
    float* o = ws.o.reserve(rows * dp);
    float* row_max = ws.row_max.reserve(rows);
    float* row_sum = ws.row_sum.reserve(rows);
    int64_t* list_chunk = ws.list_chunk.reserve(nq * list_cap);
    float* list_bias = ws.list_bias.reserve(nq * list_cap);
    TileQuery queries[kMaxTileQueries];

    for (int64_t qi = 0; qi < nq; ++qi) {
      TileQuery& tq = queries[qi];
      const int64_t i = item.first_query + qi;
      tq.row = sp.q_begin + i;
      tq.pos = query_position(i, sp.n_q, sp.n_k);
      tq.diag = diagonal_chunk(tq.pos, C);
      if (qi + kRowPrefetchDistance < nq) {
        for (int64_t h = 0; h < g; ++h) {
          prefetch_bytes<false>(element(job_.q, sp.batch_index, tq.row + kRowPrefetchDistance, r * g + h),
                                d * dtype_size(job_.q.dtype));
        }
      }
      for (int64_t h = 0; h < g; ++h) {
        const void* src = element(job_.q, sp.batch_index, tq.row, r * g + h);
        if (q_in_place) {
          q_rows[qi * g + h] = static_cast<const float*>(src);
        } else {
          float* dst = q_scratch + (qi * g + h) * dp;
          load_row(src, job_.q.dtype, d, dst);
          q_rows[qi * g + h] = dst;
        }
      }
      int64_t* chunks = list_chunk + qi * list_cap;
      float* bias = list_bias + qi * list_cap;
      int64_t len = 0;
      if (!sparse_) {
        for (int64_t c = 0; c < tq.diag; ++c) chunks[len++] = c;
      } else {
        // The mask bit is ground truth for membership; only chunks before the diagonal can be routed.
        const uint32_t* mrow = static_cast<const uint32_t*>(element(job_.mask, sp.batch_index, r, tq.row));
        for (int64_t w = 0; w * 32 < tq.diag; ++w) {
          uint32_t bits = mrow[w];
          if (tq.diag - w * 32 < 32) bits &= (1u << (tq.diag - w * 32)) - 1u;
          while (bits) {
            chunks[len++] = w * 32 + __builtin_ctz(bits);
            bits &= bits - 1;
          }
        }
      }
      if (biased_ && len > 0) {
        route_bias(item.seq, sp, r, tq.row, q_rows + qi * g, chunks, len, bias, ws);
      } else {
        std::fill(bias, bias + len, 0.0f);
      }
      chunks[len] = tq.diag;
      bias[len] = 0.0f;
      tq.len = len + 1;
    }

    // o needs no clearing: a row's first chunk has rescale 0, and accumulate_pv then starts from zero.
    std::fill(row_max, row_max + rows, -std::numeric_limits<float>::infinity());
    std::fill(row_sum, row_sum + rows, 0.0f);
    float* s = ws.s.reserve(rows * cp);
    const float** a_rows = ws.a_rows.reserve(rows);
    const float** p_rows = ws.p_rows.reserve(rows);
    float** o_rows = ws.o_rows.reserve(rows);
    float* g_max = ws.gathered_max.reserve(rows);
    float* g_sum = ws.gathered_sum.reserve(rows);
    float* g_rescale = ws.gathered_rescale.reserve(rows);
    float* g_bias = ws.gathered_bias.reserve(rows);
    int* g_valid = ws.gathered_valid.reserve(rows);
    int* g_row = ws.gathered_row.reserve(rows);

    // Every (query, chunk) pair of the tile sorted by chunk once (a counting sort over the queries' ascending
    // lists, so each chunk's entries stay in query order), instead of scanning all tile queries per chunk.
    const int64_t chunk_slots = queries[nq - 1].diag + 1;  // the last query's diagonal is the tile's last chunk
    int* bucket_begin = ws.bucket_begin.reserve(chunk_slots + 1);
    std::fill(bucket_begin, bucket_begin + chunk_slots + 1, 0);
    int64_t entries = 0;
    for (int64_t qi = 0; qi < nq; ++qi) {
      const int64_t* chunks = list_chunk + qi * list_cap;
      for (int64_t k = 0; k < queries[qi].len; ++k) ++bucket_begin[chunks[k] + 1];
      entries += queries[qi].len;
    }
    for (int64_t c = 0; c < chunk_slots; ++c) bucket_begin[c + 1] += bucket_begin[c];
    int* fill = ws.bucket_fill.reserve(chunk_slots);
    std::copy(bucket_begin, bucket_begin + chunk_slots, fill);
    int* entry_query = ws.entry_query.reserve(entries);
    int* entry_valid = ws.entry_valid.reserve(entries);
    float* entry_bias = ws.entry_bias.reserve(entries);
    for (int64_t qi = 0; qi < nq; ++qi) {
      const TileQuery& tq = queries[qi];
      const int64_t* chunks = list_chunk + qi * list_cap;
      const float* bias = list_bias + qi * list_cap;
      for (int64_t k = 0; k < tq.len; ++k) {
        const int e = fill[chunks[k]]++;
        entry_query[e] = static_cast<int>(qi);
        // Visible keys: C for a routed chunk, fewer on the query's diagonal.
        entry_valid[e] = static_cast<int>(chunks[k] == tq.diag ? tq.pos - chunks[k] * C + 1 : C);
        entry_bias[e] = bias[k];
      }
    }
    int64_t* walk = ws.walk_chunks.reserve(chunk_slots);
    int64_t walk_len = 0;
    for (int64_t c = 0; c < chunk_slots; ++c)
      if (bucket_begin[c + 1] > bucket_begin[c]) walk[walk_len++] = c;

    for (int64_t w = 0; w < walk_len; ++w) {
      const int64_t chunk = walk[w];
      const int* sel_query = entry_query + bucket_begin[chunk];
      const int* sel_valid = entry_valid + bucket_begin[chunk];
      const float* sel_bias = entry_bias + bucket_begin[chunk];
      const int selected = bucket_begin[chunk + 1] - bucket_begin[chunk];
      int min_valid = static_cast<int>(C);
      for (int k = 0; k < selected; ++k) min_valid = std::min(min_valid, sel_valid[k]);
      // A sparse tile jumps between chunks the hardware prefetcher cannot guess: fetch the next chunk's K/V
      // blocks while this one computes.
      if (w + 1 < walk_len) {
        prefetch_block(kv_.kt_block(item.seq, r, walk[w + 1]), d * cp);
        prefetch_block(kv_.v_block(item.seq, r, walk[w + 1]), C * dp);
      }
      const float* kb = kv_.kt_block(item.seq, r, chunk);
      const float* vb = kv_.v_block(item.seq, r, chunk);
      // With g >= 4 a query's rows fill whole register blocks: each diagonal query's scores are taken over only
      // the columns it sees and turned into probabilities in registers, then P·V runs over its visible keys (all
      // scores first, then all P·V, so the chunk's K and V blocks are not both needed in L1 at once). The rows
      // that see the whole chunk form one band.
      const bool per_query_diagonal = g >= 4;
      if (per_query_diagonal && min_valid < C) {
        int m = 0;
        for (int k = 0; k < selected; ++k) {
          if (sel_valid[k] >= C) continue;
          const int64_t rr = sel_query[k] * g;
          prefix_softmax(q_rows + rr, static_cast<int>(g), static_cast<int>(d), sel_valid[k], kb, cp, job_.scale,
                         row_max + rr, row_sum + rr, g_rescale + m, s + m * cp, cp);
          m += static_cast<int>(g);
        }
        m = 0;
        for (int k = 0; k < selected; ++k) {
          if (sel_valid[k] >= C) continue;
          const int64_t rr = sel_query[k] * g;
          for (int64_t h = 0; h < g; ++h) {
            o_rows[h] = o + (rr + h) * dp;
            p_rows[h] = s + (m + h) * cp;
          }
          accumulate_pv(o_rows, g_rescale + m, p_rows, static_cast<int>(g), vb, dp, sel_valid[k],
                        static_cast<int>(dp));
          m += static_cast<int>(g);
        }
      }
      // Otherwise rows are processed in bands of visible-key counts rounded up to kFloatPad, so the early rows of
      // a diagonal chunk do not pay for the columns only the late rows see. Routed rows all fall in the last band.
      // Bands below the smallest visible-key count are empty: a chunk only routed starts at the last band.
      const int64_t first_band = per_query_diagonal ? cp : std::min(cp, pad_floats(min_valid));
      for (int64_t band_cols = first_band; band_cols < cp + kFloatPad; band_cols += kFloatPad) {
        const int64_t band_lo = band_cols - kFloatPad;  // valid in (band_lo, band_cols], the last band open above
        int m = 0, keys = 0;
        for (int k = 0; k < selected; ++k) {
          const int valid = sel_valid[k];
          if (per_query_diagonal && valid < C) continue;
          if (valid <= band_lo || (valid > band_cols && band_cols < cp)) continue;
          keys = std::max(keys, valid);
          for (int64_t h = 0; h < g; ++h, ++m) {
            const int64_t rr = sel_query[k] * g + h;
            a_rows[m] = q_rows[rr];
            o_rows[m] = o + rr * dp;
            p_rows[m] = s + m * cp;
            g_valid[m] = valid;
            g_bias[m] = sel_bias[k];
            g_max[m] = row_max[rr];
            g_sum[m] = row_sum[rr];
            g_row[m] = static_cast<int>(rr);
          }
        }
        if (m == 0) continue;
        const int cols = static_cast<int>(std::min(cp, pad_floats(keys)));
        matmul_bt(a_rows, m, static_cast<int>(d), kb, cp, cols, s, cp);
        softmax_step(s, cp, m, cols, job_.scale, biased_ ? g_bias : nullptr, g_valid, g_max, g_sum, g_rescale);
        accumulate_pv(o_rows, g_rescale, p_rows, m, vb, dp, keys, static_cast<int>(dp));
        for (int k = 0; k < m; ++k) {
          row_max[g_row[k]] = g_max[k];
          row_sum[g_row[k]] = g_sum[k];
        }
      }
    }

    for (int64_t qi = 0; qi < nq; ++qi) {
      const TileQuery& tq = queries[qi];
      if (qi + kRowPrefetchDistance < nq) {
        for (int64_t h = 0; h < g; ++h) {
          const int64_t ahead = queries[qi + kRowPrefetchDistance].row;
          prefetch_bytes<true>(mutable_element(job_.o, sp.batch_index, ahead, r * g + h), d * dtype_size(job_.o.dtype));
        }
      }
      for (int64_t h = 0; h < g; ++h) {
        const int64_t rr = qi * g + h;
        store_row(o + rr * dp, d, 1.0f / row_sum[rr], job_.o.dtype,
                  mutable_element(job_.o, sp.batch_index, tq.row, r * g + h));
        if (job_.lse.defined()) {
          *static_cast<float*>(mutable_element(job_.lse, sp.batch_index, r * g + h, tq.row)) =
              row_max[rr] + std::log(row_sum[rr]);
        }
      }
    }
  }

 private:
  // Bias of each routed chunk of one query: rebuild the group weight from the stored τ and a fresh matmul_bt
  // score against the chunk's summary (the same kernel and the same inputs Stage 1 thresholded).
  void route_bias(int64_t seq, const SequenceSpan& sp, int64_t r, int64_t row, const float* const* q_rows,
                  const int64_t* chunks, int64_t len, float* bias, TileScratch& ws) const {
    const int64_t g = job_.group, d = job_.d, dp = kv_.d_pad();
    const int64_t cols = pad_floats(len);
    float* srows = ws.summary_rows.reserve(len * dp);
    float* st = ws.summary_t.reserve(d * cols);
    float* scores = ws.scores.reserve(g * cols);
    float* taus = ws.taus.reserve(g);
    const float** a_rows = ws.a_rows.reserve(std::max<int64_t>(g, 1));
    for (int64_t k = 0; k < len; ++k) {
      load_row(element(job_.summaries, seq, chunks[k], r), job_.summaries.dtype, d, srows + k * dp);
    }
    for (int64_t t = 0; t < d; ++t) {
      float* dst = st + t * cols;
      for (int64_t k = 0; k < len; ++k) dst[k] = srows[k * dp + t];
      std::fill(dst + len, dst + cols, 0.0f);
    }
    for (int64_t h = 0; h < g; ++h) a_rows[h] = q_rows[h];
    matmul_bt(a_rows, static_cast<int>(g), static_cast<int>(d), st, cols, static_cast<int>(cols), scores, cols);
    for (int64_t h = 0; h < g; ++h) {
      taus[h] = *static_cast<const float*>(element(job_.tau, sp.batch_index, r * g + h, row));
    }
    const float mu = *static_cast<const float*>(element(job_.mu, sp.batch_index, r, row));
    const float alpha = job_.method.alpha;
    for (int64_t k = 0; k < len; ++k) {
      float w = group_weight([&](int h) { return score_(scores[h * cols + k]); }, [&](int h) { return taus[h]; },
                             static_cast<int>(g), alpha);
      // A set bit whose weight rebuilds as 0 (a mask made elsewhere) still attends; keep its bias finite.
      if (!(w > 0.0f)) w = FLT_MIN;
      bias[k] = prior_bias(job_.prior, std::log(w), mu, inv_sigma_);
    }
  }

  const AttentionJob& job_;
  const std::vector<SequenceSpan>& spans_;
  const PackedKv& kv_;
  int64_t tile_;
  bool sparse_, biased_;
  RoutingScore score_;
  float inv_sigma_;
};

void write_padding_rows(const AttentionJob& job, const std::vector<SequenceSpan>& spans) {
  if (job.seqs.batch.is_varlen()) return;  // packed rows all belong to a sequence
  std::vector<float> zeros(static_cast<size_t>(job.d), 0.0f);
  for (int64_t s = 0; s < job.seqs.count; ++s) {
    for (int64_t i = spans[s].n_q; i < job.seqs.padded_n_q; ++i) {
      for (int64_t h = 0; h < job.h_q; ++h) {
        store_row(zeros.data(), job.d, 1.0f, job.o.dtype, mutable_element(job.o, s, i, h));
        if (job.lse.defined()) {
          *static_cast<float*>(mutable_element(job.lse, s, h, i)) = -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
}

}  // namespace

void run_attention(const AttentionJob& job) {
  std::vector<SequenceSpan> spans(static_cast<size_t>(job.seqs.count));
  for (int64_t s = 0; s < job.seqs.count; ++s) spans[s] = job.seqs.span(s);
  TileRunner runner(job, spans);

  // KV head outermost so that TBB's range halving hands each thread long runs over one head's K/V.
  std::vector<Item> items;
  for (int64_t r = 0; r < job.h_kv; ++r)
    for (int64_t s = 0; s < job.seqs.count; ++s)
      for (int64_t i = 0; i < spans[s].n_q; i += runner.tile()) items.push_back({s, r, i});

  // Per-thread scratch kept across calls (grow-only), so repeated calls do not fault in fresh pages. A TBB thread
  // runs one of these task bodies at a time (they start no nested parallel work), so sharing it is safe.
  static tbb::enumerable_thread_specific<TileScratch> scratch;
  parallel_items(static_cast<int64_t>(items.size()), [&](int64_t k) { runner.run(items[k], scratch.local()); });
  write_padding_rows(job, spans);
}

}  // namespace cpu
}  // namespace dashattn
