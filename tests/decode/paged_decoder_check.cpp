#include "decode/paged_decoder_check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <set>
#include <string>

#include "decode/decode_rows.h"
#include "reference/checks.h"

namespace dashattn::decode_test {
namespace {

// A host copy of a view the decoder owns (pools, table, summary cache), with the view's strides.
ref::HostTensor download_view(Backend& be, const TensorView& v) {
  ref::HostTensor h;
  h.view = v;
  int64_t last = 0;
  bool empty = false;
  for (int i = 0; i < v.rank; ++i) {
    empty = empty || v.shape[i] == 0;
    last += (v.shape[i] - 1) * v.stride[i];
  }
  const int64_t es = dtype_size(v.dtype);
  h.bytes.resize(empty ? 0 : static_cast<size_t>((last + 1) * es));
  be.synchronize(nullptr);
  // Slice by slice of axis 0: a cache view's sequences lie capacity rows apart, and the rows between them were
  // never written (copying them would read undefined device memory).
  const int64_t slice = empty ? 0 : last + 1 - (v.shape[0] - 1) * v.stride[0];
  for (int64_t i = 0; i < (empty ? 0 : v.shape[0]); ++i) {
    be.copy(h.bytes.data() + i * v.stride[0] * es, static_cast<const char*>(v.data) + i * v.stride[0] * es,
            static_cast<size_t>(slice * es), CopyKind::kDeviceToHost, nullptr);
  }
  h.view.data = h.bytes.data();
  h.view.device = Device{DeviceType::kCpu, 0};
  return h;
}

// Whether row [h, d] (a, i) of x and row (b, j) of y hold the same bytes (views with dense [h, d] rows).
bool same_row(const ref::HostTensor& x, int64_t a, int64_t i, const ref::HostTensor& y, int64_t b, int64_t j) {
  const int64_t es = dtype_size(x.view.dtype), bytes = x.view.shape[2] * x.view.shape[3] * es;
  return std::memcmp(x.bytes.data() + x.view.offset(a, i, 0, 0) * es, y.bytes.data() + y.view.offset(b, j, 0, 0) * es,
                     static_cast<size_t>(bytes)) == 0;
}

// One step of dec with caller-owned outputs for every result; the outputs on the host.
ref::ForwardOutputs run_step(Backend& be, Decoder& dec, const PagedDecoderCase& c, const ref::DeviceTensor& q,
                             const ref::DeviceTensor& k, const ref::DeviceTensor& v) {
  return step_outputs(be, dec, q, k, v, mask_words(dec.length() + q.view.shape[1], c.chunk));
}

// A step of `paged` that reaches forward() and fails there (no output), with NaN keys and values: it may take
// pages and write its rows, but must commit nothing.
void failed_step(Backend& be, Decoder& paged, const PagedDecoderCase& c, const ref::DeviceTensor& q, int64_t t) {
  ref::HostTensor nan = ref::make_host_tensor(c.dtype, {c.batch, t, c.h_kv, c.d});
  std::fill(nan.bytes.begin(), nan.bytes.end(), 0xff);
  const ref::DeviceTensor k = ref::upload(be, nan), v = ref::upload(be, nan);
  const int64_t length = paged.length();
  CHECK_THROWS_AS(paged.step(q.view, k.view, v.view, TensorView{}), InvalidArgument);
  CHECK(paged.length() == length);
}

// The paged decoder's keys (or values) read through its table against the contiguous decoder's, row by row.
int64_t differing_cache_rows(Backend& be, const TensorView& contiguous, const TensorView& pool,
                             const ref::HostTensor& table, int64_t length) {
  const ref::HostTensor want = download_view(be, contiguous), pages = download_view(be, pool);
  const KeyPages translate{static_cast<const int32_t*>(table.view.data), table.view.shape[1], pool.shape[1]};
  int64_t differ = 0;
  for (int64_t i = 0; i < contiguous.shape[0]; ++i)
    for (int64_t j = 0; j < length; ++j) {
      const KeyRow at = locate_key(translate, i, 0, 0, j);
      differ += same_row(pages, at.index, at.row, want, i, j) ? 0 : 1;
    }
  return differ;
}

// The table's used entries: in the pool, each page owned once, and at least one sequence whose consecutive pages
// are not neighbours in the pool (so that a read ignoring the table would show).
void check_table(const ref::HostTensor& table, int64_t used_columns, int64_t num_pages) {
  const int32_t* entries = static_cast<const int32_t*>(table.view.data);
  const int64_t width = table.view.shape[1];
  std::set<int32_t> seen;
  int64_t out_of_pool = 0, shared = 0, gaps = 0;
  for (int64_t i = 0; i < table.view.shape[0]; ++i)
    for (int64_t j = 0; j < used_columns; ++j) {
      const int32_t page = entries[i * width + j];
      out_of_pool += page < 0 || page >= num_pages ? 1 : 0;
      shared += seen.insert(page).second ? 0 : 1;
      gaps += j > 0 && page != entries[i * width + j - 1] + 1 ? 1 : 0;
    }
  CHECK(out_of_pool == 0);
  CHECK(shared == 0);
  CHECK(gaps > 0);
}

}  // namespace

std::vector<int64_t> step_schedule(int64_t total) {
  static const int64_t pattern[] = {1, 3, 1, 1, 3, 17, 1, 3, 40, 3, 1, 64};
  std::vector<int64_t> steps{std::min<int64_t>(5, total)};
  int64_t sum = steps[0];
  for (size_t i = 0; sum < total; ++i) {
    steps.push_back(std::min(pattern[i % std::size(pattern)], total - sum));
    sum += steps.back();
  }
  return steps;
}

void check_paged_against_contiguous(Backend& be, const PagedDecoderCase& c, uint64_t seed) {
  int64_t total = 0;
  for (int64_t t : c.steps) total += t;
  const ref::Problem pr = ref::make_problem(sparse_problem_spec(c.batch, total, c.h_q, c.h_kv, c.d, c.dtype, seed));
  const ref::DeviceTensor summary_query = ref::upload(be, pr.summary_query);

  DecoderConfig config = decoder_config(c.batch, c.h_q, c.h_kv, c.d, c.dtype, c.chunk, 0, c.initial_capacity);
  Decoder contiguous(be, config, summary_query.view);
  config.page_size = c.page_size;
  Decoder paged(be, config, summary_query.view);
  const int64_t first_pages = paged.num_pages(), first_width = paged.block_table().shape[1];
  REQUIRE(first_pages > 0);

  const int64_t P = c.page_size;
  int64_t length = 0, straddling = 0, failed_attempts = 0;
  for (int64_t t : c.steps) {
    INFO("step of " << t << " tokens after " << length);
    const ref::DeviceTensor q = ref::upload(be, slice_rows(pr.q, length, t)),
                            k = ref::upload(be, slice_rows(pr.k, length, t)),
                            v = ref::upload(be, slice_rows(pr.v, length, t));
    const int64_t first_page = length / P, last_page = (length + t - 1) / P;
    straddling += first_page != last_page ? 1 : 0;
    if (length % P == 0 || first_page != last_page) {  // the step takes a new page
      failed_step(be, paged, c, q, t);
      ++failed_attempts;
    }
    const ref::ForwardOutputs want = run_step(be, contiguous, c, q, k, v);
    const ref::ForwardOutputs got = run_step(be, paged, c, q, k, v);
    for (const std::string& diff : ref::byte_differences(got, want)) FAIL_CHECK(diff);
    length += t;
    REQUIRE(paged.length() == length);
  }
  CHECK(straddling > 0);
  CHECK(failed_attempts > 0);

  // The caches: summaries bitwise, keys and values through the table bitwise.
  CHECK(paged.summarized_chunks() == contiguous.summarized_chunks());
  const ref::HostTensor want_s = download_view(be, contiguous.summaries());
  const ref::HostTensor got_s = download_view(be, paged.summaries());
  int64_t summary_rows_differ = 0;
  for (int64_t i = 0; i < c.batch; ++i)
    for (int64_t ch = 0; ch < paged.summarized_chunks(); ++ch) {
      summary_rows_differ += same_row(got_s, i, ch, want_s, i, ch) ? 0 : 1;
    }
  CHECK(summary_rows_differ == 0);
  const ref::HostTensor table = download_view(be, paged.block_table());
  CHECK(differing_cache_rows(be, contiguous.keys(), paged.key_pages(), table, length) == 0);
  CHECK(differing_cache_rows(be, contiguous.values(), paged.value_pages(), table, length) == 0);

  // The pools grew at least twice and the table widened; its used entries are sound and not contiguous.
  CHECK(paged.num_pages() >= 4 * first_pages);
  CHECK(table.view.shape[1] > first_width);
  CHECK(table.view.shape[1] >= (length + P - 1) / P);
  check_table(table, (length + P - 1) / P, paged.num_pages());
}

}  // namespace dashattn::decode_test
