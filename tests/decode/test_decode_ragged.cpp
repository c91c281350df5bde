// Decoder::step with per-sequence token counts (new_tokens) on the CPU backend: a batch of sequences with prompts
// of different lengths, and later steps where some sequences add no token, gives each sequence bit for bit the
// outputs of a one-sequence decoder fed that sequence's tokens alone, on contiguous and paged caches; padded rows
// are zeros with lse = -inf; null new_tokens is t for every sequence; bad counts commit nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dashattn/dashattn.h"
#include "decode/decode_rows.h"
#include "reference/checks.h"

using namespace dashattn;

namespace {

constexpr int64_t kHq = 4, kHkv = 2, kD = 64;

Backend& cpu_backend() {
  Backend* be = Registry::instance().find("cpu");
  REQUIRE(be != nullptr);
  return *be;
}

struct Step {
  int64_t t;                    // rows of q, k and v
  std::vector<int32_t> counts;  // new tokens per sequence, each <= t
};

// The first step takes every prompt at once (t = the longest); later steps add 0, 1 or 3 tokens to some sequences,
// one step adds none to any, one pads every sequence (t above every count), one runs the 1-token prompt across a
// few chunks while the others wait, and the last but one grows the caches while the lengths differ (each
// sequence's own summaries must survive the growth: Stage 0 starts every sequence at its own complete chunks).
std::vector<Step> ragged_schedule() {
  return {{130, {70, 1, 130}}, {3, {1, 0, 3}}, {1, {0, 1, 1}}, {3, {3, 3, 0}}, {1, {0, 0, 0}},
          {4, {1, 0, 2}},      {70, {0, 70, 0}}, {1, {1, 1, 1}}, {3, {3, 0, 3}}, {70, {0, 0, 70}},
          {1, {1, 1, 1}}};
}

DecoderConfig config_for(int64_t batch, DType dtype, int chunk, int64_t page_size) {
  // A small initial capacity: the caches grow during the run.
  return decode_test::decoder_config(batch, kHq, kHkv, kD, dtype, chunk, page_size, 64);
}

// Rows [begin, begin + count) of sequence `seq` of a padded [b, n, h, d] tensor, as a [1, count, h, d] tensor.
ref::HostTensor sequence_rows(const ref::HostTensor& t, int64_t seq, int64_t begin, int64_t count) {
  const ref::HostTensor rows = decode_test::slice_rows(t, begin, count);
  ref::HostTensor out = ref::make_host_tensor(t.view.dtype, {1, count, t.view.shape[2], t.view.shape[3]});
  const size_t bytes = out.bytes.size();
  std::memcpy(out.bytes.data(), rows.bytes.data() + seq * bytes, bytes);
  return out;
}

// A ragged step's [b, t, h, d] input: sequence i's next counts[i] rows, then NaN padding (never to be read).
ref::HostTensor ragged_rows(const ref::HostTensor& t, const std::vector<int64_t>& from, const Step& s) {
  const int64_t b = t.view.shape[0], h = t.view.shape[2], d = t.view.shape[3];
  ref::HostTensor out = ref::make_host_tensor(t.view.dtype, {b, s.t, h, d});
  std::fill(out.bytes.begin(), out.bytes.end(), 0xff);
  const int64_t es = dtype_size(t.view.dtype);
  for (int64_t i = 0; i < b; ++i) {
    const ref::HostTensor rows = sequence_rows(t, i, from[i], s.counts[i]);
    std::memcpy(out.bytes.data() + out.view.offset(i, 0, 0, 0) * es, rows.bytes.data(), rows.bytes.size());
  }
  return out;
}

// One step with caller-owned outputs for every result, filled with a nonzero pattern so that padding rows the
// step leaves alone show; the outputs on the host.
ref::ForwardOutputs run_step(Backend& be, Decoder& dec, int chunk, const ref::HostTensor& q, const ref::HostTensor& k,
                             const ref::HostTensor& v, const int32_t* new_tokens) {
  const int64_t b = q.view.shape[0], t = q.view.shape[1];
  int64_t n_k = t;  // the step's padded key length
  for (int64_t i = 0; i < b; ++i) n_k = std::max(n_k, dec.lengths()[i] + (new_tokens ? new_tokens[i] : t));
  return decode_test::step_outputs(be, dec, ref::upload(be, q), ref::upload(be, k), ref::upload(be, v),
                                   mask_words(n_k, chunk), new_tokens, 0x5a);
}

}  // namespace

namespace {

// Element (i, x, r, y) of a contiguous rank-4 host tensor (shape [b, X, R, Y]) as a byte pointer.
const char* at(const ref::HostTensor& t, int64_t i, int64_t x, int64_t r, int64_t y) {
  return reinterpret_cast<const char*>(t.bytes.data()) + t.view.offset(i, x, r, y) * dtype_size(t.view.dtype);
}

// Mismatches of sequence `seq` of a ragged step's outputs (`count` real rows) against a one-sequence decoder's
// outputs for the same tokens, and of its padding rows against o = 0, lse = -inf.
int64_t sequence_mismatches(const ref::ForwardOutputs& ragged, int64_t seq, int64_t count,
                            const ref::ForwardOutputs* alone) {
  int64_t bad = 0;
  const int64_t t = ragged.o.view.shape[1];
  const size_t o_row = static_cast<size_t>(kHq * kD * dtype_size(ragged.o.view.dtype));
  const std::vector<char> zeros(o_row, 0);
  for (int64_t r = 0; r < t; ++r) {
    const bool real = r < count;
    bad += std::memcmp(at(ragged.o, seq, r, 0, 0), real ? at(alone->o, 0, r, 0, 0) : zeros.data(), o_row) != 0;
    for (int64_t h = 0; h < kHq; ++h) {
      const float lse = *reinterpret_cast<const float*>(at(ragged.lse, seq, h, r, 0));
      if (!real) {
        bad += !(std::isinf(lse) && lse < 0);
        continue;
      }
      bad += std::memcmp(&lse, at(alone->lse, 0, h, r, 0), 4) != 0;
      bad += std::memcmp(at(ragged.tau, seq, h, r, 0), at(alone->tau, 0, h, r, 0), 4) != 0;
    }
    if (!real) continue;
    for (int64_t h = 0; h < kHkv; ++h) {
      bad += std::memcmp(at(ragged.mu, seq, h, r, 0), at(alone->mu, 0, h, r, 0), 4) != 0;
      bad += std::memcmp(at(ragged.active, seq, h, r, 0), at(alone->active, 0, h, r, 0), 4) != 0;
      // The ragged mask spans the longest sequence's chunks: the words past this sequence's own are zero.
      const int64_t words = ragged.mask.view.shape[3], own = alone->mask.view.shape[3];
      bad += std::memcmp(at(ragged.mask, seq, h, r, 0), at(alone->mask, 0, h, r, 0), static_cast<size_t>(own * 4));
      for (int64_t w = own; w < words; ++w) bad += *reinterpret_cast<const uint32_t*>(at(ragged.mask, seq, h, r, w)) != 0;
    }
  }
  return bad;
}

// Runs the ragged schedule on a batch decoder and each sequence alone on a one-sequence decoder (skipping its
// zero-token steps) and checks every step's outputs, the lengths and the summarized chunks.
void check_ragged_against_alone(Backend& be, DType dtype, int chunk, int64_t page_size, uint64_t seed) {
  const std::vector<Step> schedule = ragged_schedule();
  const int64_t b = static_cast<int64_t>(schedule[0].counts.size());
  std::vector<int64_t> totals(static_cast<size_t>(b), 0);
  for (const Step& s : schedule)
    for (int64_t i = 0; i < b; ++i) totals[i] += s.counts[i];
  const ref::Problem pr = ref::make_problem(decode_test::sparse_problem_spec(
      b, *std::max_element(totals.begin(), totals.end()), kHq, kHkv, kD, dtype, seed));
  const ref::DeviceTensor summary_query = ref::upload(be, pr.summary_query);

  Decoder batch(be, config_for(b, dtype, chunk, page_size), summary_query.view);
  std::vector<std::unique_ptr<Decoder>> alone;
  for (int64_t i = 0; i < b; ++i) {
    alone.push_back(std::make_unique<Decoder>(be, config_for(1, dtype, chunk, page_size), summary_query.view));
  }
  std::vector<int64_t> lengths(static_cast<size_t>(b), 0);
  for (size_t n = 0; n < schedule.size(); ++n) {
    const Step& s = schedule[n];
    INFO("step " << n << " of t = " << s.t);
    const ref::ForwardOutputs got = run_step(be, batch, chunk, ragged_rows(pr.q, lengths, s),
                                             ragged_rows(pr.k, lengths, s), ragged_rows(pr.v, lengths, s),
                                             s.counts.data());
    for (int64_t i = 0; i < b; ++i) {
      INFO("sequence " << i << ", " << s.counts[i] << " new tokens after " << lengths[i]);
      std::unique_ptr<ref::ForwardOutputs> want;
      if (s.counts[i] > 0) {
        const int64_t c = s.counts[i];
        want = std::make_unique<ref::ForwardOutputs>(run_step(
            be, *alone[i], chunk, sequence_rows(pr.q, i, lengths[i], c), sequence_rows(pr.k, i, lengths[i], c),
            sequence_rows(pr.v, i, lengths[i], c), nullptr));
      }
      CHECK(sequence_mismatches(got, i, s.counts[i], want.get()) == 0);
      lengths[i] += s.counts[i];
    }
    REQUIRE(batch.lengths() == lengths);
    CHECK(batch.length() == *std::max_element(lengths.begin(), lengths.end()));
    CHECK(batch.summarized_chunks() == *std::min_element(lengths.begin(), lengths.end()) / chunk);
  }
}

}  // namespace

TEST_CASE("a ragged batch decoder gives each sequence the outputs it has alone, bit for bit (CPU)") {
  Backend& be = cpu_backend();
  if (!Registry::instance().probe(be).available) {
    MESSAGE("the CPU backend is unavailable, skipped");
    return;
  }
  for (int64_t page : {0, 64, 128}) {
    for (int chunk : {32, 64}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        INFO("page_size " << page << " C " << chunk << (dtype == DType::kF32 ? " f32" : " bf16"));
        check_ragged_against_alone(be, dtype, chunk, page, 500 + page + chunk);
      }
    }
  }
}

TEST_CASE("null new_tokens is t for every sequence, and bad counts commit nothing") {
  Backend& be = cpu_backend();
  if (!Registry::instance().probe(be).available) return;
  for (int64_t page : {0, 64}) {
    INFO("page_size " << page);
    ref::ProblemSpec spec;
    spec.batch = 3;
    spec.n_q = spec.n_k = 80;
    spec.h_q = kHq;
    spec.h_kv = kHkv;
    spec.d = kD;
    spec.dtype = DType::kF32;
    spec.seed = 77;
    const ref::Problem pr = ref::make_problem(spec);
    const DecoderConfig config = config_for(3, DType::kF32, 32, page);
    Decoder null_counts(be, config), full_counts(be, config);
    // A uniform first step, then one that leaves the sequences at different lengths, then a null-count step.
    const std::vector<Step> steps = {{40, {40, 40, 40}}, {3, {3, 0, 1}}, {2, {2, 2, 2}}};
    std::vector<int64_t> from(3, 0);
    for (const Step& s : steps) {
      const ref::HostTensor q = ragged_rows(pr.q, from, s), k = ragged_rows(pr.k, from, s),
                            v = ragged_rows(pr.v, from, s);
      const bool uniform = s.counts == std::vector<int32_t>(3, static_cast<int32_t>(s.t));
      const ref::ForwardOutputs a = run_step(be, null_counts, 32, q, k, v, uniform ? nullptr : s.counts.data());
      const ref::ForwardOutputs b = run_step(be, full_counts, 32, q, k, v, s.counts.data());
      for (const std::string& diff : ref::byte_differences(a, b)) FAIL_CHECK(diff);
      for (int64_t i = 0; i < 3; ++i) from[i] += s.counts[i];
    }
    CHECK(null_counts.lengths() == std::vector<int64_t>{45, 42, 43});
    CHECK(null_counts.length() == 45);
    CHECK(null_counts.summarized_chunks() == 1);

    // A negative count and a count above t: InvalidArgument naming the entry, nothing committed.
    const Step s{2, {0, 0, 0}};
    const ref::DeviceTensor q = ref::upload(be, ragged_rows(pr.q, from, s)), k = ref::upload(be, ragged_rows(pr.k, from, s)),
                            v = ref::upload(be, ragged_rows(pr.v, from, s));
    ref::HostTensor o_host = ref::make_host_tensor(DType::kF32, {3, 2, kHq, kD});
    const ref::DeviceTensor o = ref::upload(be, o_host);
    const int32_t negative[] = {1, -1, 0}, too_many[] = {1, 0, 3};
    for (const int32_t* counts : {negative, too_many}) {
      const int bad = counts == negative ? 1 : 2;
      try {
        null_counts.step(q.view, k.view, v.view, o.view, {}, {}, counts);
        FAIL("accepted new_tokens[" << bad << "] = " << counts[bad]);
      } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "new_tokens[" + std::to_string(bad) + "]");
        CHECK(std::string(e.what()).find("[0, 2]") != std::string::npos);
      }
      CHECK(null_counts.lengths() == std::vector<int64_t>{45, 42, 43});
      CHECK(null_counts.length() == 45);
    }
  }
}

TEST_CASE("Stage 0 with per-sequence first chunks leaves earlier chunks alone and names a bad entry") {
  Backend& be = cpu_backend();
  constexpr int64_t kB = 3, kN = 256, kC = 32, kChunks = kN / kC;
  std::vector<float> k(static_cast<size_t>(kB * kN * kHkv * kD));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::sin(0.37f * static_cast<float>(i));
  SummarizeParams p;
  p.k = make_view(k.data(), DType::kF32, {kB, kN, kHkv, kD});
  p.method.chunk_size = kC;
  std::vector<float> full(static_cast<size_t>(kB * kChunks * kHkv * kD), 0.0f);
  p.summaries = make_view(full.data(), DType::kF32, {kB, kChunks, kHkv, kD});
  summarize(be, p);

  // Sequence i starts at chunk first[i]: the chunks before it keep a sentinel, the rest equal the full run's bits.
  const std::vector<int32_t> first{1, 5, 8};
  std::vector<float> part(full.size(), 7.0f);
  p.summaries = make_view(part.data(), DType::kF32, {kB, kChunks, kHkv, kD});
  p.first_chunk = 1;
  p.first_chunks = first.data();
  summarize(be, p);
  const size_t chunk_floats = static_cast<size_t>(kHkv * kD);
  int64_t wrong = 0;
  for (int64_t s = 0; s < kB; ++s)
    for (int64_t c = 0; c < kChunks; ++c) {
      const size_t at = static_cast<size_t>((s * kChunks + c)) * chunk_floats;
      if (c < first[s]) {
        wrong += std::any_of(part.begin() + at, part.begin() + at + chunk_floats, [](float x) { return x != 7.0f; });
      } else {
        wrong += std::memcmp(&part[at], &full[at], chunk_floats * 4) != 0;
      }
    }
  CHECK(wrong == 0);

  // An entry below first_chunk is named before anything is written.
  const std::vector<int32_t> bad{1, 0, 8};
  std::fill(part.begin(), part.end(), 7.0f);
  p.first_chunks = bad.data();
  try {
    summarize(be, p);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("first_chunks[1]") != std::string::npos);
  }
  CHECK(std::all_of(part.begin(), part.end(), [](float x) { return x == 7.0f; }));
}
