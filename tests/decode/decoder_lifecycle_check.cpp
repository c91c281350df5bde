#include "decode/decoder_lifecycle_check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "decode/decode_rows.h"
#include "reference/checks.h"

namespace dashattn::decode_test {
namespace {

constexpr int64_t kBatch = 3;
// Token sources (rows of one problem): sequence 0's stream, sequence 1's first prompt (A only), sequence 2's first
// stream, sequence 1's new prompt, the fork's own continuation, sequence 0's new prompt after its reset.
enum Source : int64_t { kStream0, kPrompt1, kStream2, kNewPrompt1, kForkTail, kNewPrompt0, kSources };
constexpr int64_t kSourceRows = 256;

// What one sequence takes in a step: `count` rows of a source from row `from`.
struct Feed {
  int64_t source = 0, from = 0, count = 0;
};

int64_t pages_for(int64_t keys, int64_t page) { return (keys + page - 1) / page; }

class Twins {
 public:
  Twins(Backend& be, const LifecycleCase& c, uint64_t seed) : be_(be), c_(c) {
    pr_ = ref::make_problem(sparse_problem_spec(kSources, kSourceRows, c.h_q, c.h_kv, c.d, c.dtype, seed));
    summary_query_ = ref::upload(be, pr_.summary_query);
    const DecoderConfig config =
        decoder_config(kBatch, c.h_q, c.h_kv, c.d, c.dtype, c.chunk, c.page_size, c.initial_capacity);
    a_ = std::make_unique<Decoder>(be, config, summary_query_.view);
    b_ = std::make_unique<Decoder>(be, config, summary_query_.view);
  }

  Decoder& a() { return *a_; }
  Decoder& b() { return *b_; }

  // One step of `dec` taking feeds[i] into sequence i; the outputs on the host.
  ref::ForwardOutputs step(Decoder& dec, const std::vector<Feed>& feeds) {
    int64_t t = 1;
    for (const Feed& f : feeds) t = std::max(t, f.count);
    std::vector<int32_t> counts;
    int64_t n_k = t;
    for (int64_t i = 0; i < kBatch; ++i) {
      counts.push_back(static_cast<int32_t>(feeds[i].count));
      n_k = std::max(n_k, dec.lengths()[i] + feeds[i].count);
    }
    return step_outputs(be_, dec, rows(pr_.q, feeds, t), rows(pr_.k, feeds, t), rows(pr_.v, feeds, t),
                        mask_words(n_k, c_.chunk), counts.data(), 0x5a);
  }

  // The same step on both decoders: every output must be the same bytes. Returns A's outputs.
  ref::ForwardOutputs step_both(const std::vector<Feed>& feeds) {
    const ref::ForwardOutputs got = step(*a_, feeds), want = step(*b_, feeds);
    for (const std::string& diff : ref::byte_differences(got, want)) FAIL_CHECK(diff);
    CHECK(a_->lengths() == b_->lengths());
    return got;
  }

  // Free pages and block table row `seq` of a paged decoder.
  std::vector<int32_t> table_row(Decoder& dec, int64_t seq) {
    const TensorView t = dec.block_table();
    std::vector<int32_t> row(static_cast<size_t>(t.shape[1]));
    be_.synchronize(dec.stream);
    be_.copy(row.data(), static_cast<const int32_t*>(t.data) + seq * t.stride[0], row.size() * sizeof(int32_t),
             CopyKind::kDeviceToHost, nullptr);
    return row;
  }

 private:
  // A step's [b, t, h, d] input: each sequence's fed rows, then NaN padding (never to be read).
  ref::DeviceTensor rows(const ref::HostTensor& src, const std::vector<Feed>& feeds, int64_t t) {
    const int64_t h = src.view.shape[2], d = src.view.shape[3], es = dtype_size(src.view.dtype);
    ref::HostTensor out = ref::make_host_tensor(src.view.dtype, {kBatch, t, h, d});
    std::fill(out.bytes.begin(), out.bytes.end(), 0xff);
    for (int64_t i = 0; i < kBatch; ++i) {
      const Feed& f = feeds[i];
      REQUIRE(f.from + f.count <= kSourceRows);
      for (int64_t r = 0; r < f.count; ++r) {
        std::memcpy(out.bytes.data() + out.view.offset(i, r, 0, 0) * es,
                    src.bytes.data() + src.view.offset(f.source, f.from + r, 0, 0) * es,
                    static_cast<size_t>(h * d * es));
      }
    }
    return ref::upload(be_, out);
  }

  Backend& be_;
  LifecycleCase c_;
  ref::Problem pr_;
  ref::DeviceTensor summary_query_;
  std::unique_ptr<Decoder> a_, b_;
};

// Whether sequences x and y of one step's outputs hold the same bytes in every output (each output's sequences are
// equal contiguous slices).
bool same_sequence_rows(const ref::ForwardOutputs& out, int64_t x, int64_t y) {
  for (const ref::HostTensor* t : {&out.o, &out.lse, &out.mask, &out.tau, &out.mu, &out.active}) {
    const size_t slice = t->bytes.size() / kBatch;
    if (std::memcmp(t->bytes.data() + x * slice, t->bytes.data() + y * slice, slice) != 0) return false;
  }
  return true;
}

void expect_invalid(const char* argument, const std::function<void()>& call) {
  try {
    call();
    FAIL_CHECK("accepted a bad " << argument);
  } catch (const InvalidArgument& e) {
    CHECK(e.argument() == argument);
    CHECK(std::string(e.what()).find("[0, 3)") != std::string::npos);
  }
}

}  // namespace

void check_reset_and_fork(Backend& be, const LifecycleCase& c, uint64_t seed) {
  Twins tw(be, c, seed);
  Decoder &a = tw.a(), &b = tw.b();
  const bool paged = c.page_size > 0;
  const int64_t page = c.page_size;

  // Histories: A's sequence 1 holds a prompt that B's never sees.
  tw.step(a, {{kStream0, 0, 150}, {kPrompt1, 0, 100}, {kStream2, 0, 40}});
  tw.step(b, {{kStream0, 0, 150}, {}, {kStream2, 0, 40}});
  for (int64_t s = 0; s < 3; ++s) {
    tw.step(a, {{kStream0, 150 + s, 1}, {kPrompt1, 100 + s, 1}, {kStream2, 40 + s, 1}});
    tw.step(b, {{kStream0, 150 + s, 1}, {}, {kStream2, 40 + s, 1}});
  }
  REQUIRE(a.lengths() == std::vector<int64_t>{153, 103, 43});

  {
    INFO("a reset sequence takes a new prompt");
    const int64_t free_before = a.free_pages();
    a.reset(1);
    CHECK(a.lengths() == std::vector<int64_t>{153, 0, 43});
    if (paged) CHECK(a.free_pages() == free_before + pages_for(103, page));
    tw.step_both({{kStream0, 153, 1}, {kNewPrompt1, 0, 70}, {kStream2, 43, 1}});
    tw.step_both({{kStream0, 154, 3}, {kNewPrompt1, 70, 3}, {kStream2, 44, 3}});
  }
  REQUIRE(a.lengths() == std::vector<int64_t>{157, 73, 47});

  {
    INFO("a fork shares its source's prefix");
    const int64_t free_before = a.free_pages();
    a.fork(0, 2);
    b.reset(2);
    tw.step(b, {{}, {}, {kStream0, 0, 157}});
    CHECK(a.lengths() == b.lengths());
    if (paged) {
      const int64_t full = 157 / page;
      CHECK(a.free_pages() == free_before + pages_for(47, page) - (157 % page != 0 ? 1 : 0));
      const std::vector<int32_t> source = tw.table_row(a, 0), fork = tw.table_row(a, 2);
      CHECK(std::equal(source.begin(), source.begin() + full, fork.begin()));
      if (157 % page != 0) CHECK(source[full] != fork[full]);
    }
    // The same tokens into the source and the fork: their rows are the same bytes.
    const ref::ForwardOutputs same = tw.step_both({{kStream0, 157, 2}, {kNewPrompt1, 73, 1}, {kStream0, 157, 2}});
    CHECK(same_sequence_rows(same, 0, 2));
    // Then each its own tokens.
    tw.step_both({{kStream0, 159, 3}, {kNewPrompt1, 74, 1}, {kForkTail, 0, 3}});
    tw.step_both({{kStream0, 162, 1}, {kNewPrompt1, 75, 1}, {kForkTail, 3, 1}});
  }
  REQUIRE(a.lengths() == std::vector<int64_t>{163, 76, 163});

  {
    INFO("the fork keeps the shared pages when its source is reset and its freed pages are reused");
    const int64_t free_before = a.free_pages();
    a.reset(0);
    b.reset(0);
    if (paged) CHECK(a.free_pages() == free_before + pages_for(163, page) - 157 / page);
    tw.step_both({{kNewPrompt0, 0, 200}, {}, {kForkTail, 4, 1}});
    a.fork(1, 1);  // changes nothing
    tw.step_both({{kNewPrompt0, 200, 1}, {kNewPrompt1, 76, 1}, {kForkTail, 5, 1}});
    tw.step_both({{kNewPrompt0, 201, 3}, {kNewPrompt1, 77, 2}, {kForkTail, 6, 3}});
  }
  REQUIRE(a.lengths() == std::vector<int64_t>{204, 79, 168});

  // Bad indices are named before anything changes.
  expect_invalid("seq", [&] { a.reset(-1); });
  expect_invalid("seq", [&] { a.reset(3); });
  expect_invalid("src", [&] { a.fork(3, 0); });
  expect_invalid("dst", [&] { a.fork(0, -1); });
  CHECK(a.lengths() == std::vector<int64_t>{204, 79, 168});
  tw.step_both({{kNewPrompt0, 204, 1}, {kNewPrompt1, 79, 1}, {kForkTail, 9, 1}});
}

}  // namespace dashattn::decode_test
