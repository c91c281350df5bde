// Decoder::step with per-sequence token counts (new_tokens) on the CUDA backend: prompts of different lengths and
// steps where some sequences add no token. A GPU step's split plan depends on the batch, so each sequence is not
// compared bit for bit with a one-sequence decoder (tests/decode does that on the CPU) but with a prefill of the
// whole batch: the decoded o rows must pass the same float64-reference check as the prefill, lse within float
// rounding, masks and active counts exactly; padded rows are zeros with lse = -inf.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "decode/decode_rows.h"
#include "reference/checks.h"

namespace dashattn::cuda_test {
namespace {

struct Step {
  int64_t t;
  std::vector<int32_t> counts;
};

// Rows [from[i], from[i] + counts[i]) of each sequence of a padded [b, n, h, d] host tensor, padded with NaN to t.
ref::HostTensor ragged_rows(const ref::HostTensor& x, const std::vector<int64_t>& from, const Step& s) {
  const int64_t b = x.view.shape[0], h = x.view.shape[2], d = x.view.shape[3], es = dtype_size(x.view.dtype);
  ref::HostTensor out = ref::make_host_tensor(x.view.dtype, {b, s.t, h, d});
  std::fill(out.bytes.begin(), out.bytes.end(), 0xff);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t r = 0; r < s.counts[i]; ++r)
      for (int64_t hh = 0; hh < h; ++hh)
        std::memcpy(out.bytes.data() + out.view.offset(i, r, hh, 0) * es,
                    x.bytes.data() + x.view.offset(i, from[i] + r, hh, 0) * es, static_cast<size_t>(d * es));
  return out;
}

template <typename T>
T& at(ref::HostTensor& t, int64_t a, int64_t b, int64_t c, int64_t d = 0) {
  return reinterpret_cast<T*>(t.bytes.data())[t.view.offset(a, b, c, d)];
}

}  // namespace

TEST_CASE("cuda ragged decoder: each sequence's rows match a prefill within the reference tolerance") {
  const std::vector<Step> schedule = {{130, {70, 1, 130}}, {3, {1, 0, 3}}, {1, {0, 1, 1}}, {3, {3, 3, 0}},
                                      {1, {0, 0, 0}},      {4, {1, 0, 2}}, {70, {0, 70, 0}}, {1, {1, 1, 1}}};
  const int64_t b = 3, h_q = 8, h_kv = 2, d = 64;
  if (!compiled(d)) {
    MESSAGE("head dim 64 not compiled, skipped");
    return;
  }
  std::vector<int32_t> totals(b, 0);
  for (const Step& s : schedule)
    for (int64_t i = 0; i < b; ++i) totals[i] += s.counts[i];
  const int64_t n = *std::max_element(totals.begin(), totals.end());
  for (int chunk : {32, 64}) {
    for (int64_t page : {0, 128}) {
      INFO("C " << chunk << " page_size " << page);
      ref::ProblemSpec ps = spec(b, n, n, h_q, h_kv, d, DType::kBF16, 3.0, 900 + chunk + page);
      ps.seqlens_q = ps.seqlens_k = totals;
      const ref::Problem pr = ref::make_problem(ps);
      MethodParams method;
      method.chunk_size = chunk;
      method.gamma = 4.0f;
      ref::RunOptions opt;
      opt.out_dtype = DType::kBF16;
      const ref::RunResult prefill = ref::run_forward(cuda_backend(), pr, method, opt);
      REQUIRE_FALSE(prefill.unsupported);
      const ref::CheckReport rep = ref::check_forward(pr, method, prefill.out);
      CHECK_MESSAGE(rep.pass(), rep.summary());

      const DecoderConfig dc = decode_test::decoder_config(b, h_q, h_kv, d, DType::kBF16, chunk, page, 64);
      const DeviceTensor summary_query = to_device(pr.summary_query.view);
      Decoder dec(cuda_backend(), dc, summary_query.view);

      ref::ForwardOutputs decoded = prefill.out;  // o rows replaced by the steps' below
      std::vector<int64_t> from(b, 0);
      int64_t lse_mismatch = 0, mask_mismatch = 0, active_mismatch = 0, padding_bad = 0;
      for (const Step& s : schedule) {
        int64_t n_k = s.t;
        for (int64_t i = 0; i < b; ++i) n_k = std::max(n_k, from[i] + s.counts[i]);
        const int64_t words = mask_words(n_k, chunk);
        const DeviceTensor q = to_device(ragged_rows(pr.q, from, s).view),
                           k = to_device(ragged_rows(pr.k, from, s).view),
                           v = to_device(ragged_rows(pr.v, from, s).view);
        DeviceTensor o = device_filled(DType::kBF16, {b, s.t, h_q, d}, 0xff),
                     lse = device_filled(DType::kF32, {b, h_q, s.t}, 0xff),
                     mask = device_filled(DType::kU32, {b, h_kv, s.t, words}, 0xff),
                     active = device_filled(DType::kI32, {b, h_kv, s.t}, 0xff);
        RoutingView routing;
        routing.mask = mask.view;
        routing.active_chunks = active.view;
        dec.step(q.view, k.view, v.view, o.view, lse.view, routing, s.counts.data());
        const std::vector<uint16_t> o_h = to_host<uint16_t>(o.view);
        const std::vector<float> lse_h = to_host<float>(lse.view);
        const std::vector<uint32_t> mask_h = to_host<uint32_t>(mask.view);
        const std::vector<int32_t> active_h = to_host<int32_t>(active.view);
        for (int64_t i = 0; i < b; ++i) {
          for (int64_t r = 0; r < s.t; ++r) {
            const bool real = r < s.counts[i];
            const int64_t row = from[i] + r;  // the sequence position of a real row
            for (int64_t h = 0; h < h_q; ++h) {
              const uint16_t* src = o_h.data() + o.view.offset(i, r, h, 0);
              if (real) {
                std::memcpy(&at<uint16_t>(decoded.o, i, row, h), src, static_cast<size_t>(d) * 2);
              } else {
                padding_bad += std::any_of(src, src + d, [](uint16_t x) { return x != 0; }) ? 1 : 0;
              }
              const float got = lse_h[lse.view.offset(i, h, r)];
              if (!real) {
                padding_bad += std::isinf(got) && got < 0 ? 0 : 1;
                continue;
              }
              const float want = at<float>(decoded.lse, i, h, row);
              lse_mismatch += std::fabs(got - want) <= 2e-6f * std::max(1.0f, std::fabs(want)) ? 0 : 1;
            }
            if (!real) continue;
            for (int64_t r2 = 0; r2 < h_kv; ++r2) {
              for (int64_t w = 0; w < words; ++w) {
                const uint32_t want = w < decoded.mask.view.shape[3] ? at<uint32_t>(decoded.mask, i, r2, row, w) : 0;
                mask_mismatch += mask_h[mask.view.offset(i, r2, r, w)] != want ? 1 : 0;
              }
              active_mismatch += active_h[active.view.offset(i, r2, r)] != at<int32_t>(decoded.active, i, r2, row);
            }
          }
          from[i] += s.counts[i];
        }
        CHECK(dec.lengths() == from);
      }
      // The decode splits a row's tiles differently from the prefill: the decoded rows must pass the same
      // float64-reference check as the prefill; routing outputs stay exact.
      const ref::CheckReport drep = ref::check_forward(pr, method, decoded);
      CHECK_MESSAGE(drep.pass(), "decoded rows: " << drep.summary());
      CHECK(lse_mismatch == 0);
      CHECK(mask_mismatch == 0);
      CHECK(active_mismatch == 0);
      CHECK(padding_bad == 0);
    }
  }
}

}  // namespace dashattn::cuda_test
