// The emit of a single-sweep Stage-1 block (route_fast.cuh): from each row's candidate list and τ, the token's
// bit-packed mask row, μ and active count. Included only through route_fast.cuh.
#pragma once

#include <cmath>
#include <cstdint>

#include "dashattn/entmax.h"
#include "dashattn/prior.h"
#include "route_kernels.cuh"
#include "route_lists.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

// One warp per token of the block (tokens tok0 .. tok0 + tokens − 1 of sequence sp, KV head r), driven by the
// candidates (only they can carry weight). The lists are the sweep's: column ρ (= token·g + head) holds col_count[ρ]
// values and chunk ids, lstride apart; a split block (one token) holds kWarps segments of kWarpRows columns, in warp
// order. Each warp works in its own scratch_words of the idle tile buffers at scratch_base.
template <int kWarps, int kWarpRows>
__device__ __forceinline__ void emit_block_tokens(const RouteArgs& a, const SequenceSpan& sp, int r, int64_t tok0,
                                                  int tokens, int g, bool split, int cmax, const int* col_count,
                                                  const float* row_tau, const float* list_val,
                                                  const uint16_t* list_id, int lstride, float* scratch_base,
                                                  int scratch_words, int warp, int lane) {
  // Each warp works in its own quarter of the idle tile buffers, one token at a time. Fast form: the chunks some
  // head weighs (x > τ) are marked in a union bitset, numbered by prefix popcounts, and every head writes its
  // weight into a compact [union chunk][head] table, all heads at once; a lane per mask word then sums each of
  // its chunks' column in head order from 0. Heads that do not list a chunk contribute an exact 0, so the sums
  // are bitwise those of dashattn::group_weight, with no per-head barrier. A token whose table does not fit
  // falls back to windows of chunks swept head by head.
  const int scored = (cmax + 31) / 32 * 32;
  const int words_scored = scored / 32;
  // Fallback windows: 33 words per 32 chunks (the weights plus one mask word).
  const int window_cap = scratch_words / 33 * 32;
  const int window = scored < window_cap ? scored : window_cap;
  const int head_stride = g | 1;  // odd: one head's lanes, on distinct table rows, reach distinct banks
  const float alpha_f = a.alpha;
  float* scratch = scratch_base + size_t(warp) * scratch_words;
  const int segments = split ? kWarps : 1;
  for (int t = warp; t < tokens; t += kWarps) {
    const int64_t i = tok0 + t;
    const bool real = i < sp.n_q;
    const int64_t diag = real ? query_diagonal_chunk(a, sp, i) : -1;
    uint32_t* mask_row = token_mask_row(a, sp, r, i);
    int32_t* const list_count = token_list_count_ptr(a, sp, r, i);  // null without bias lists
    auto write_word = [&](int64_t word, uint32_t bits) {
      if (!real) bits = 0u;
      else if ((diag >> 5) == word) bits |= 1u << (diag & 31);
      mask_row[word] = bits;
    };
    // fn(chunk, x) for every list entry of head h of this token (its segments in warp order; a head's entries
    // are distinct chunks, so its lanes never collide).
    auto for_each_entry = [&](int h, auto&& fn) {
      const int rho = t * g + h;
      for (int s = 0; s < segments; ++s) {
        const int col = s * kWarpRows + rho;
        const int n = col_count[col];
        for (int e = lane; e < n; e += 32) fn(int(list_id[col * lstride + e]), list_val[col * lstride + e]);
      }
    };
    // fn(h, chunk, x, τ_h) for every list entry of the token, in no set order (the union and the table need
    // none). Without a split, g ≤ 32 heads' entries are spread over the lanes: lane h holds head h's count and τ,
    // and each lane finds its entry's head by a binary search over the prefix sums (shuffles), so every lane has
    // an entry and the loads of different heads overlap instead of waiting head after head. The layout is the
    // token's, read once for both walks.
    const bool spread = !split && g <= 32;
    const int head_count = spread && lane < g ? col_count[t * g + lane] : 0;
    const float head_tau = spread && lane < g ? row_tau[t * g + lane] : 0.0f;
    const int head_end = warp_inclusive_sum(head_count, lane);
    const int head_begin = head_end - head_count;  // lanes past g: the total, above every entry index
    const int entries = __shfl_sync(0xffffffffu, head_end, 31);
    // Entry f of the spread layout: its head (the last one whose entries start at or before f), chunk, score and
    // the head's τ. All lanes call it (shuffles); a lane with f ≥ entries reads nothing.
    auto spread_entry = [&](int f, int* h_out, int* c_out, float* x_out, float* tau_out) {
      int h = 0;
#pragma unroll
      for (int step = 16; step >= 1; step >>= 1) {
        if (__shfl_sync(0xffffffffu, head_begin, h + step) <= f) h += step;
      }
      const int e = f - __shfl_sync(0xffffffffu, head_begin, h);
      *tau_out = __shfl_sync(0xffffffffu, head_tau, h);
      *h_out = h;
      if (f < entries) {
        const int col = t * g + h;
        *c_out = int(list_id[col * lstride + e]);
        *x_out = list_val[col * lstride + e];
      }
    };
    // A token of at most 96 entries (most: ~42 on the benchmark problem at 64K) keeps them in registers, three per
    // lane, with their weights, for both walks below; longer ones look them up again on the second walk.
    constexpr int kKeptRounds = 3;
    const bool kept = spread && entries <= 32 * kKeptRounds;
    int kept_h[kKeptRounds], kept_c[kKeptRounds];
    float kept_w[kKeptRounds];
    bool kept_on[kKeptRounds], kept_own[kKeptRounds] = {};
    if (kept) {
#pragma unroll
      for (int j = 0; j < kKeptRounds; ++j) {
        float x = 0.0f, tau = 0.0f;
        kept_h[j] = kept_c[j] = 0;
        if (32 * j < entries) spread_entry(32 * j + lane, &kept_h[j], &kept_c[j], &x, &tau);  // warp-uniform
        kept_on[j] = 32 * j + lane < entries && x > tau;
        kept_w[j] = kept_on[j] ? entmax_weight(x, tau, alpha_f) : 0.0f;
      }
    }
    auto for_each_token_entry = [&](auto&& fn) {
      if (spread) {
        for (int f0 = 0; f0 < entries; f0 += 32) {
          const int f = f0 + lane;
          int h = 0, c = 0;
          float x = 0.0f, tau = 0.0f;
          spread_entry(f, &h, &c, &x, &tau);
          if (f < entries) fn(h, c, x, tau);
        }
      } else {
        for (int h = 0; h < g; ++h) {
          const float tau = row_tau[t * g + h];
          for_each_entry(h, [&](int c, float x) { fn(h, c, x, tau); });
        }
      }
    };
    float log_sum = 0.0f;
    int routed = 0;
    // Fast form. The union of the heads' weighed chunks.
    uint32_t* ubits = reinterpret_cast<uint32_t*>(scratch);
    int* ubase = reinterpret_cast<int*>(scratch + words_scored);
    uint32_t* rbits = reinterpret_cast<uint32_t*>(scratch + 2 * words_scored);  // the routed chunks' bits
    int* union_chunk = reinterpret_cast<int*>(scratch + 3 * words_scored);     // the chunk of each table row
    float* table = nullptr;                                                    // after union_chunk
    // The table form needs the union bitset, its prefix counts, the routed bits, the rows' chunks and
    // [union size][head_stride] weights to fit.
    bool table_form = 3 * words_scored <= scratch_words;
    int union_size = 0;
    if (table_form) {
      for (int k = lane; k < words_scored; k += 32) ubits[k] = 0u;
      __syncwarp();
      if (kept) {
        // The entry whose OR set its chunk's bit first owns the chunk (exactly one per union chunk): it writes the
        // chunk's table row below, so that no two lanes store to one address.
#pragma unroll
        for (int j = 0; j < kKeptRounds; ++j) {
          const uint32_t bit = 1u << (kept_c[j] & 31);
          kept_own[j] = kept_on[j] && (atomicOr(&ubits[kept_c[j] >> 5], bit) & bit) == 0u;
        }
      } else {
        for_each_token_entry([&](int, int c, float x, float tau) {
          if (x > tau) atomicOr(&ubits[c >> 5], 1u << (c & 31));
        });
      }
      __syncwarp();
      // Exclusive prefix of the words' popcounts: a chunk's table row.
      int running = 0;
      for (int k0 = 0; k0 < words_scored; k0 += 32) {
        const int k = k0 + lane;
        const int pc = k < words_scored ? __popc(ubits[k]) : 0;
        const int incl = warp_inclusive_sum(pc, lane);
        if (k < words_scored) ubase[k] = running + incl - pc;
        running += __shfl_sync(0xffffffffu, incl, 31);
      }
      union_size = running;
      // The table starts on a 16-byte boundary and is zeroed in 16-byte stores (the scratch of each warp starts on
      // one): a store per float was ~a tenth of the emit's instructions on the benchmark problem.
      const int table_off = (3 * words_scored + union_size + 3) & ~3;
      table_form = table_off + (union_size * head_stride + 3) / 4 * 4 <= scratch_words;
      table = scratch + table_off;
    }
    if (table_form) {
      float4* const table4 = reinterpret_cast<float4*>(table);
      for (int k = lane; k < (union_size * head_stride + 3) / 4; k += 32)
        table4[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int k = lane; k < words_scored; k += 32) {
        rbits[k] = 0u;
        if (kept) continue;  // the owning entries write the rows' chunks below
        // Each set bit's table row gets its chunk (a store per bit; the sums below take the rows a lane at a time).
        uint32_t left = ubits[k];
        int row = ubase[k];
        while (left != 0u) {
          union_chunk[row++] = k * 32 + __ffs(left) - 1;
          left &= left - 1u;
        }
      }
      __syncwarp();
      auto row_of = [&](int c) { return ubase[c >> 5] + __popc(ubits[c >> 5] & ((1u << (c & 31)) - 1u)); };
      if (kept) {
#pragma unroll
        for (int j = 0; j < kKeptRounds; ++j) {
          if (!kept_on[j]) continue;
          const int row = row_of(kept_c[j]);
          table[row * head_stride + kept_h[j]] = kept_w[j];
          if (kept_own[j]) union_chunk[row] = kept_c[j];
        }
      } else {
        for_each_token_entry([&](int h, int c, float x, float tau) {
          if (x > tau) table[row_of(c) * head_stride + h] = entmax_weight(x, tau, alpha_f);
        });
      }
      __syncwarp();
      // Bit = group weight > 0, Σ log w and the count: a lane per table row. (A lane per mask word left the rows of
      // a crowded word, the recent chunks most tokens weigh, to one lane while the others idled.) With bias lists,
      // each routed row's (chunk, log w) also goes to the token's list, at its rank among the round's routed
      // rows (a ballot) after the earlier rounds'.
      int2* const list = real && list_count != nullptr ? token_list_entries(a, list_count) : nullptr;
      int listed = 0;
      for (int row0 = 0; row0 < union_size; row0 += 32) {
        const int row = row0 + lane;
        bool on = false;
        float lw = 0.0f;
        int c = 0;
        if (row < union_size) {
          float sum = 0.0f;
          if (g == 16) {  // the common group (h_q = 32, h_kv = 2): the row's loads issued together
            float head_w[16];
#pragma unroll
            for (int h = 0; h < 16; ++h) head_w[h] = table[row * head_stride + h];
#pragma unroll
            for (int h = 0; h < 16; ++h) sum += head_w[h];
          } else {
            for (int h = 0; h < g; ++h) sum += table[row * head_stride + h];
          }
          const float w = group_mean(sum, g);
          if (w > 0.0f) {
            lw = logf(w);
            log_sum += lw;
            ++routed;
            c = union_chunk[row];
            atomicOr(&rbits[c >> 5], 1u << (c & 31));
            on = true;
          }
        }
        if (list != nullptr) {  // warp-uniform
          const uint32_t ballot = __ballot_sync(0xffffffffu, on);
          const int at = listed + __popc(ballot & ((1u << lane) - 1u));
          if (on && at < kBiasListCap) list[at] = make_int2(c, __float_as_int(lw));
          listed += __popc(ballot);
        }
      }
      __syncwarp();
      for (int k = lane; k < words_scored; k += 32) write_word(k, rbits[k]);
    } else {
      // Fallback: windows of chunks, each swept head by head in order (__syncwarp orders the heads).
      float* wacc = scratch;
      uint32_t* wbits = reinterpret_cast<uint32_t*>(wacc + window);
      auto for_each_candidate = [&](int c_lo, auto&& fn) {
        for (int h = 0; h < g; ++h) {
          for_each_entry(h, [&](int c, float x) {
            if (c - c_lo >= 0 && c - c_lo < window) fn(h, c - c_lo, x);
          });
          __syncwarp();
        }
      };
      for (int c_lo = 0; c_lo < scored; c_lo += window) {
        __syncwarp();
        for (int k = lane; k < window / 32; k += 32) wbits[k] = 0u;
        for_each_candidate(c_lo, [&](int, int c, float) { wacc[c] = 0.0f; });
        // Σ_h weight in head order from 0, as group_weight sums it.
        for_each_candidate(c_lo, [&](int h, int c, float x) {
          wacc[c] += entmax_weight(x, row_tau[t * g + h], alpha_f);
        });
        // Each chunk once (the first head that lists it marks it taken with −1): bit = w > 0, Σ log w, count.
        for_each_candidate(c_lo, [&](int, int c, float) {
          const float sum = wacc[c];
          if (sum >= 0.0f) {
            wacc[c] = -1.0f;
            const float w = group_mean(sum, g);
            if (w > 0.0f) {
              log_sum += logf(w);
              ++routed;
              atomicOr(&wbits[c >> 5], 1u << (c & 31));
            }
          }
        });
        const int words_here = ((c_lo + window < scored ? c_lo + window : scored) - c_lo) / 32;
        for (int k = lane; k < words_here; k += 32) write_word(c_lo / 32 + k, wbits[k]);
      }
    }
    __syncwarp();  // the scratch is reused by this warp's next token
    for (int64_t word = scored / 32 + lane; word < a.mask_words; word += 32) write_word(word, 0u);
    warp_log_sum(&log_sum, &routed);
    if (lane == 0) {
      store_token_mu_value(token_mu_ptr(a, sp, r, i), token_active_ptr(a, sp, r, i), real, log_sum, routed);
      // The list is whole when the table form listed every routed chunk (the windowed form lists none).
      if (list_count != nullptr) *list_count = table_form && routed <= kBiasListCap ? routed : kNoList;
    }
  }
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
