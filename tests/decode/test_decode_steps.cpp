// Cached decoding equals prefill: dashattn::Decoder steps of one and several tokens, across chunk boundaries, and
// ForwardParams with a caller-owned summary cache, on every available backend.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dashattn/dashattn.h"
#include "decode/decode_rows.h"
#include "reference/checks.h"

using namespace dashattn;
using dashattn::decode_test::slice_rows;

namespace {

struct Comparison {
  double worst_ulps = 0;
  int64_t not_bitwise = 0, disagree = 0, elements = 0;
};

// o rows [begin, begin + count) of the prefill output against a step output [b, count, h, d].
void compare_o(const TensorView& prefill, const TensorView& step, int64_t begin, DType dtype, Comparison* c) {
  for (int64_t b = 0; b < step.shape[0]; ++b)
    for (int64_t i = 0; i < step.shape[1]; ++i)
      for (int64_t h = 0; h < step.shape[2]; ++h)
        for (int64_t e = 0; e < step.shape[3]; ++e) {
          const double want = ref::load_element(prefill, b, begin + i, h, e);
          const double got = ref::load_element(step, b, i, h, e);
          c->worst_ulps = std::max(c->worst_ulps, std::isfinite(got) ? ref::ulp_distance(got, want, dtype) : 1e30);
          c->not_bitwise += got != want ? 1 : 0;
          c->disagree += ref::agree_across_paths(got, want, dtype) ? 0 : 1;
          ++c->elements;
        }
}

template <typename T>
T at3(const TensorView& t, int64_t a, int64_t b, int64_t c) {
  return static_cast<const T*>(t.data)[t.offset(a, b, c)];
}

struct Config {
  int64_t n = 0, h_q = 0, h_kv = 0, d = 0;
  DType dtype = DType::kBF16;
  MethodParams method;
  std::vector<int64_t> steps;  // tokens per decode step, summing to n
};

std::vector<Config> configs() {
  std::vector<Config> out;
  Config a;
  a.n = 150;
  a.h_q = 8;
  a.h_kv = 2;
  a.d = 64;
  a.dtype = DType::kBF16;
  a.method.chunk_size = 16;
  a.method.gamma = 12.0f;
  a.method.sigma = 1.0f;
  // A first multi-token step, then single tokens through two chunk boundaries, then blocks that straddle them.
  a.steps = {20};
  for (int i = 0; i < 25; ++i) a.steps.push_back(1);
  for (int64_t s : {3, 7, 16, 1, 17, 5, 33, 2, 21}) a.steps.push_back(s);
  out.push_back(a);

  Config b = a;
  b.n = 140;
  b.h_q = 4;
  b.h_kv = 1;
  b.d = 128;
  b.dtype = DType::kF32;
  b.method.chunk_size = 32;
  b.method.prior = PriorMode::kRaw;
  b.method.alpha = 2.0f;
  b.steps = {1, 1, 1, 30, 1, 1, 31, 40, 1, 33};  // starts from an empty cache one token at a time
  out.push_back(b);

  Config c = a;
  c.n = 100;
  c.h_q = 16;
  c.h_kv = 1;
  c.d = 256;
  c.dtype = DType::kF16;
  c.method.chunk_size = 16;
  c.method.prior = PriorMode::kNone;
  c.method.gamma = 1e4f;
  c.steps = {64, 1, 15, 1, 1, 18};
  out.push_back(c);
  return out;
}

ref::Problem full_problem(const Config& c, uint64_t seed) {
  ref::ProblemSpec spec;
  spec.batch = 2;
  spec.n_q = spec.n_k = c.n;
  spec.h_q = c.h_q;
  spec.h_kv = c.h_kv;
  spec.d = c.d;
  spec.dtype = c.dtype;
  spec.seed = seed;
  return ref::make_problem(spec);
}

}  // namespace

TEST_CASE("Decoder steps equal the matching prefill rows; completed chunks' summaries are bitwise the prefill's") {
  // o: to the last bit or so on the CPU, within the float64-reference tolerance on GPUs; lse, masks, active counts
  // and summaries exactly everywhere.
  std::vector<std::string> unavailable;
  const std::vector<Backend*> backends = ref::available_backends(&unavailable);
  for (const std::string& line : unavailable) MESSAGE("backend unavailable, skipped (not counted): " << line);
  REQUIRE(!backends.empty());
  for (Backend* be : backends) {
    const std::string name = be->name();
    for (const Config& cfg : configs()) {
      int64_t total = 0;
      for (int64_t s : cfg.steps) total += s;
      REQUIRE(total == cfg.n);
      const ref::Problem pr = full_problem(cfg, 7 + cfg.n);
      INFO(name << " n " << cfg.n << " C " << cfg.method.chunk_size << " " << std::string(dtype_name(cfg.dtype)));

      // Prefill, itself checked against the float64 reference.
      ref::RunOptions opt;
      opt.out_dtype = cfg.dtype;
      const ref::RunResult prefill = ref::run_forward(*be, pr, cfg.method, opt);
      if (prefill.unsupported) {
        MESSAGE(name << " unsupported, skipped (not counted): " << prefill.reason);
        CHECK(be->device_type() != DeviceType::kCpu);
        continue;
      }
      const ref::CheckReport rep = ref::check_forward(pr, cfg.method, prefill.out);
      CHECK_MESSAGE(rep.pass(), rep.summary());

      DecoderConfig dc;
      dc.batch = 2;
      dc.h_q = cfg.h_q;
      dc.h_kv = cfg.h_kv;
      dc.d = cfg.d;
      dc.dtype = cfg.dtype;
      dc.method = cfg.method;
      dc.initial_capacity = 32;  // forces several geometric growths of the caches
      const ref::DeviceTensor summary_query = ref::upload(*be, pr.summary_query);
      Decoder dec(*be, dc, summary_query.view);

      const int64_t words = mask_words(cfg.n, cfg.method.chunk_size), C = cfg.method.chunk_size;
      Comparison o_cmp;
      // The prefill outputs with o replaced row by row by the steps' o, for the float64-reference check below.
      ref::ForwardOutputs decoded = prefill.out;
      int64_t length = 0, lse_mismatch = 0, mask_mismatch = 0, active_mismatch = 0, summary_mismatch = 0;
      for (int64_t t : cfg.steps) {
        const ref::HostTensor q = slice_rows(pr.q, length, t), k = slice_rows(pr.k, length, t),
                              v = slice_rows(pr.v, length, t);
        ref::HostTensor o = ref::make_host_tensor(cfg.dtype, {2, t, cfg.h_q, cfg.d});
        ref::HostTensor lse = ref::make_host_tensor(DType::kF32, {2, cfg.h_q, t});
        ref::HostTensor mask = ref::make_host_tensor(DType::kU32, {2, cfg.h_kv, t, words});
        ref::HostTensor active = ref::make_host_tensor(DType::kI32, {2, cfg.h_kv, t});
        ref::DeviceTensor dq = ref::upload(*be, q), dk = ref::upload(*be, k), dv = ref::upload(*be, v),
                          dov = ref::upload(*be, o), dl = ref::upload(*be, lse), dm = ref::upload(*be, mask),
                          da = ref::upload(*be, active);
        RoutingView routing;
        routing.mask = dm.view;
        routing.active_chunks = da.view;
        dec.step(dq.view, dk.view, dv.view, dov.view, dl.view, routing);
        ref::download(*be, dov, o);
        ref::download(*be, dl, lse);
        ref::download(*be, dm, mask);
        ref::download(*be, da, active);

        compare_o(prefill.out.o.view, o.view, length, cfg.dtype, &o_cmp);
        const int64_t es_o = dtype_size(cfg.dtype);
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t i = 0; i < t; ++i)
            for (int64_t h = 0; h < cfg.h_q; ++h)
              std::memcpy(decoded.o.bytes.data() + decoded.o.view.offset(b, length + i, h, 0) * es_o,
                          o.bytes.data() + o.view.offset(b, i, h, 0) * es_o, static_cast<size_t>(cfg.d * es_o));
        for (int64_t b = 0; b < 2; ++b) {
          for (int64_t i = 0; i < t; ++i) {
            for (int64_t h = 0; h < cfg.h_q; ++h) {
              const float want = at3<float>(prefill.out.lse.view, b, h, length + i);
              const float got = at3<float>(lse.view, b, h, i);
              lse_mismatch += std::fabs(got - want) <= 2e-6f * std::max(1.0f, std::fabs(want)) ? 0 : 1;
            }
            for (int64_t r = 0; r < cfg.h_kv; ++r) {
              for (int64_t w = 0; w < words; ++w) {
                const uint32_t want = static_cast<const uint32_t*>(prefill.out.mask.view.data)[prefill.out.mask.view.offset(b, r, length + i, w)];
                const uint32_t got = static_cast<const uint32_t*>(mask.view.data)[mask.view.offset(b, r, i, w)];
                mask_mismatch += got != want ? 1 : 0;
              }
              active_mismatch += at3<int32_t>(active.view, b, r, i) != at3<int32_t>(prefill.out.active.view, b, r, length + i);
            }
          }
        }
        length += t;
        CHECK(dec.length() == length);
        CHECK(dec.summarized_chunks() == length / C);

        // The decoder's summary cache against the prefill's summaries, bit for bit.
        const TensorView sv = dec.summaries();
        const int64_t es = dtype_size(cfg.dtype);
        std::vector<unsigned char> host(static_cast<size_t>(2 * sv.stride[0] * es));
        be->synchronize(nullptr);
        be->copy(host.data(), sv.data, host.size(), CopyKind::kDeviceToHost, nullptr);
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t c = 0; c < dec.summarized_chunks(); ++c)
            for (int64_t r = 0; r < cfg.h_kv; ++r)
              summary_mismatch += std::memcmp(host.data() + sv.offset(b, c, r, 0) * es,
                                              prefill.out.summaries.bytes.data() +
                                                  prefill.out.summaries.view.offset(b, c, r, 0) * es,
                                              static_cast<size_t>(cfg.d * es)) != 0;
      }
      MESSAGE(name << " n " << cfg.n << ": decode o vs prefill worst " << o_cmp.worst_ulps << " ulp, "
                   << o_cmp.not_bitwise << " of " << o_cmp.elements << " elements not bitwise equal");
      if (be->device_type() == DeviceType::kCpu) {
        // One kernel order for both: a step's o is its prefill row's to the last bit or so.
        CHECK(o_cmp.disagree == 0);
      } else {
        // The GPU decode splits a row's tiles over warps and CTAs and merges their softmax states, so P is
        // rounded to the input precision against other running maxima than in the prefill: the decoded rows
        // must pass the same float64-reference check as the prefill (routing outputs stay exact, below).
        const ref::CheckReport drep = ref::check_forward(pr, cfg.method, decoded);
        CHECK_MESSAGE(drep.pass(), "decoded rows: " << drep.summary());
      }
      CHECK(lse_mismatch == 0);
      CHECK(mask_mismatch == 0);
      CHECK(active_mismatch == 0);
      CHECK(summary_mismatch == 0);
    }
  }
}

TEST_CASE("forward with a caller-owned summary cache and summaries_valid equals prefill") {
  const std::vector<Backend*> backends = ref::available_backends();
  REQUIRE(!backends.empty());
  for (Backend* be : backends) {
    const std::string name = be->name();
    Config cfg = configs()[0];
    const ref::Problem pr = full_problem(cfg, 99);
    ref::RunOptions opt;
    opt.out_dtype = cfg.dtype;
    const ref::RunResult prefill = ref::run_forward(*be, pr, cfg.method, opt);
    if (prefill.unsupported) continue;
    const int64_t C = cfg.method.chunk_size, chunks = cfg.n / C;

    // Prefix of L0 tokens with the cache, then the remaining queries against all keys with the cache's valid part.
    for (int64_t L0 : {int64_t(37), int64_t(48), int64_t(140)}) {
      INFO(name << " prefix " << L0);
      const int64_t valid = L0 / C;
      ref::HostTensor cache = ref::make_host_tensor(cfg.dtype, {2, chunks, cfg.h_kv, cfg.d});
      std::memset(cache.bytes.data(), 0xff, cache.bytes.size());  // NaN everywhere: unwritten chunks would show
      ref::DeviceTensor dcache = ref::upload(*be, cache);
      const ref::DeviceTensor sq = ref::upload(*be, pr.summary_query);
      {
        const ref::HostTensor q0 = slice_rows(pr.q, 0, L0), k0 = slice_rows(pr.k, 0, L0), v0 = slice_rows(pr.v, 0, L0);
        ref::HostTensor o0 = ref::make_host_tensor(cfg.dtype, {2, L0, cfg.h_q, cfg.d});
        ref::DeviceTensor dq = ref::upload(*be, q0), dk = ref::upload(*be, k0), dv = ref::upload(*be, v0),
                          dout = ref::upload(*be, o0);
        ForwardParams p;
        p.q = dq.view;
        p.k = dk.view;
        p.v = dv.view;
        p.summary_query = sq.view;
        p.summaries = dcache.view;
        p.o = dout.view;
        p.method = cfg.method;
        forward(*be, p);
        ref::download(*be, dout, o0);
        Comparison c;
        compare_o(prefill.out.o.view, o0.view, 0, cfg.dtype, &c);
        CHECK(c.disagree == 0);
      }
      // Mark one valid chunk: a trusted chunk must be read as is, never recomputed or overwritten.
      ref::download(*be, dcache, cache);
      ref::HostTensor marked = cache;
      if (valid > 0) {
        const int64_t es = dtype_size(cfg.dtype);
        unsigned char* first = marked.bytes.data() + marked.view.offset(1, valid - 1, 0, 0) * es;
        store_from_float(first, cfg.dtype, ref::load_element(cache.view, 1, valid - 1, 0, 0) + 0.25f);
      }
      ref::DeviceTensor dmarked = ref::upload(*be, marked);

      const int64_t rest = cfg.n - L0;
      const ref::HostTensor q1 = slice_rows(pr.q, L0, rest);
      ref::HostTensor o1 = ref::make_host_tensor(cfg.dtype, {2, rest, cfg.h_q, cfg.d});
      ref::DeviceTensor dq = ref::upload(*be, q1), dout = ref::upload(*be, o1);
      const ref::DeviceProblem dev = ref::upload_problem(*be, pr);
      ForwardParams p;
      p.q = dq.view;
      p.k = dev.k.view;
      p.v = dev.v.view;
      p.summary_query = sq.view;
      p.summaries = dmarked.view;
      p.summaries_valid = valid;
      p.o = dout.view;
      p.method = cfg.method;
      forward(*be, p);
      ref::HostTensor after = marked;
      ref::download(*be, dmarked, after);
      ref::download(*be, dout, o1);

      // Chunks >= valid are now exactly the prefill's; chunks < valid are untouched (the marked one included).
      const int64_t es = dtype_size(cfg.dtype);
      int64_t recomputed_bad = 0, trusted_touched = 0;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < chunks; ++c)
          for (int64_t r = 0; r < cfg.h_kv; ++r) {
            const unsigned char* got = after.bytes.data() + after.view.offset(b, c, r, 0) * es;
            if (c >= valid) {
              recomputed_bad += std::memcmp(got, prefill.out.summaries.bytes.data() +
                                                     prefill.out.summaries.view.offset(b, c, r, 0) * es,
                                            static_cast<size_t>(cfg.d * es)) != 0;
            } else {
              trusted_touched += std::memcmp(got, marked.bytes.data() + marked.view.offset(b, c, r, 0) * es,
                                             static_cast<size_t>(cfg.d * es)) != 0;
            }
          }
      CHECK(recomputed_bad == 0);
      CHECK(trusted_touched == 0);

      // Sequence 0 (unmarked) equals the prefill rows; sequence 1 used the marked summary where routable.
      Comparison c;
      ref::HostTensor o1_seq0 = ref::make_host_tensor(cfg.dtype, {1, rest, cfg.h_q, cfg.d});
      std::memcpy(o1_seq0.bytes.data(), o1.bytes.data(), o1_seq0.bytes.size());
      compare_o(prefill.out.o.view, o1_seq0.view, L0, cfg.dtype, &c);
      CHECK(c.disagree == 0);
    }
  }
}

namespace {

struct FusedCase {
  int64_t batch, n_q, h_q, h_kv, d, chunk;
  DType dtype;
  std::vector<int32_t> varlen_k;  // packed varlen (one sequence per entry, n_q queries each) when non-empty
  int64_t n_k;                    // keys of a padded batch
};

// Stage 0 + 1 of a decode step through summarize_and_route and through summarize, then route: the summary cache
// and every routing output bit for bit. The cache's chunks from the step's first chunk on start as NaN, so a chunk
// the fused call failed to write (or wrote elsewhere) shows.
void check_fused_step(Backend& be, const FusedCase& fc, uint64_t seed) {
  ref::ProblemSpec spec;
  spec.h_q = fc.h_q;
  spec.h_kv = fc.h_kv;
  spec.d = fc.d;
  spec.dtype = fc.dtype;
  spec.seed = seed;
  spec.q_std = 3.0;  // scores spread over several units: sparse routing
  if (fc.varlen_k.empty()) {
    spec.batch = fc.batch;
    spec.n_q = fc.n_q;
    spec.n_k = fc.n_k;
  } else {
    spec.varlen_k = fc.varlen_k;
    spec.varlen_q.assign(fc.varlen_k.size(), static_cast<int32_t>(fc.n_q));
  }
  const ref::Problem pr = ref::make_problem(spec);
  const ref::DeviceProblem dev = ref::upload_problem(be, pr);
  const int64_t seqs = pr.num_sequences(), n_k = pr.padded_n_k(), C = fc.chunk;
  const int64_t chunks = n_k / C, words = mask_words(n_k, C), rows = pr.rows_q();
  const int64_t first = (n_k - 1) / C;  // the last query's own chunk
  MethodParams m;
  m.chunk_size = C;
  m.gamma = 8.0f;

  // Every chunk's summary, then the step's starting cache: chunks before `first` valid, the rest NaN.
  ref::HostTensor full = ref::make_host_tensor(fc.dtype, {seqs, std::max<int64_t>(chunks, 1), fc.h_kv, fc.d});
  ref::DeviceTensor dfull = ref::upload(be, full);
  SummarizeParams all;
  all.k = dev.k.view;
  all.summary_query = dev.summary_query.view;
  all.summaries = dfull.view;
  all.batch = dev.layout;
  all.method = m;
  summarize(be, all);
  ref::download(be, dfull, full);
  ref::HostTensor start = full;
  const int64_t es = dtype_size(fc.dtype);
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t c = first; c < pr.span(s).n_k / C; ++c)
      std::memset(start.bytes.data() + start.view.offset(s, c, 0, 0) * es, 0xff,
                  static_cast<size_t>(fc.h_kv * fc.d * es));

  struct Outputs {
    ref::HostTensor cache, mask, tau, mu, active;
  };
  auto run = [&](bool fused) {
    Outputs o;
    o.cache = start;
    const bool varlen = pr.varlen();
    o.mask = varlen ? ref::make_host_tensor(DType::kU32, {fc.h_kv, rows, words})
                    : ref::make_host_tensor(DType::kU32, {seqs, fc.h_kv, fc.n_q, words});
    o.tau = varlen ? ref::make_host_tensor(DType::kF32, {fc.h_q, rows})
                   : ref::make_host_tensor(DType::kF32, {seqs, fc.h_q, fc.n_q});
    o.mu = varlen ? ref::make_host_tensor(DType::kF32, {fc.h_kv, rows})
                  : ref::make_host_tensor(DType::kF32, {seqs, fc.h_kv, fc.n_q});
    o.active = varlen ? ref::make_host_tensor(DType::kI32, {fc.h_kv, rows})
                      : ref::make_host_tensor(DType::kI32, {seqs, fc.h_kv, fc.n_q});
    ref::DeviceTensor dc = ref::upload(be, o.cache), dm = ref::upload(be, o.mask), dt = ref::upload(be, o.tau),
                      du = ref::upload(be, o.mu), da = ref::upload(be, o.active);
    SummarizeParams sp = all;
    sp.summaries = dc.view;
    sp.first_chunk = first;
    RouteParams rp;
    rp.q = dev.q.view;
    rp.summaries = dc.view;
    rp.n_k = n_k;
    rp.batch = dev.layout;
    rp.method = m;
    rp.routing.mask = dm.view;
    rp.routing.tau = dt.view;
    rp.routing.mu = du.view;
    rp.routing.active_chunks = da.view;
    if (fused) {
      summarize_and_route(be, sp, rp);
    } else {
      summarize(be, sp);
      route(be, rp);
    }
    ref::download(be, dc, o.cache);
    ref::download(be, dm, o.mask);
    ref::download(be, dt, o.tau);
    ref::download(be, du, o.mu);
    ref::download(be, da, o.active);
    return o;
  };
  const Outputs a = run(false), b = run(true);
  CHECK(b.cache.bytes == full.bytes);  // every chunk written, bitwise the full Stage 0's
  CHECK(a.cache.bytes == b.cache.bytes);
  CHECK(a.mask.bytes == b.mask.bytes);
  CHECK(a.tau.bytes == b.tau.bytes);
  CHECK(a.mu.bytes == b.mu.bytes);
  CHECK(a.active.bytes == b.active.bytes);
}

}  // namespace

TEST_CASE("summarize_and_route equals summarize then route, bit for bit; a step that reads what it writes is refused") {
  const std::vector<Backend*> backends = ref::available_backends();
  REQUIRE(!backends.empty());
  // Decode shapes (n_k a multiple of C, so the step completes a chunk) and some that complete none; GQA 1 to 16,
  // head dims 64 / 128 / 256, chunk sizes 16 to 128, padded and packed varlen batches.
  const std::vector<FusedCase> cases = {
      {3, 1, 32, 2, 128, 64, DType::kBF16, {}, 4096},
      {2, 1, 16, 1, 64, 16, DType::kF16, {}, 1024},
      {2, 2, 8, 1, 256, 32, DType::kBF16, {}, 640},
      {1, 3, 4, 1, 64, 128, DType::kBF16, {}, 768},
      {2, 1, 4, 4, 128, 64, DType::kF16, {}, 4000},
      {4, 1, 16, 2, 128, 64, DType::kBF16, {}, 64},
      {0, 1, 16, 2, 128, 64, DType::kBF16, {2048, 1984, 2047, 64}, 0},
  };
  for (Backend* be : backends) {
    for (const FusedCase& fc : cases) {
      INFO(be->name() << " g " << fc.h_q / fc.h_kv << " d " << fc.d << " C " << fc.chunk << " n_q " << fc.n_q
                      << " n_k " << (fc.varlen_k.empty() ? fc.n_k : -1) << " " << dtype_name(fc.dtype));
      check_fused_step(*be, fc, 11 + fc.d + fc.chunk);
    }

    // Routing would read a summary this Stage 0 writes: refused before anything runs.
    ref::ProblemSpec spec;
    spec.batch = 1;
    spec.n_q = 2;
    spec.n_k = 128;
    spec.h_q = 4;
    spec.h_kv = 1;
    spec.d = 64;
    const ref::Problem pr = ref::make_problem(spec);
    const ref::DeviceProblem dev = ref::upload_problem(*be, pr);
    ref::HostTensor cache = ref::make_host_tensor(DType::kBF16, {1, 8, 1, 64});
    ref::HostTensor mask = ref::make_host_tensor(DType::kU32, {1, 1, 2, 1});
    ref::HostTensor tau = ref::make_host_tensor(DType::kF32, {1, 4, 2}), mu = ref::make_host_tensor(DType::kF32, {1, 1, 2});
    ref::DeviceTensor dc = ref::upload(*be, cache), dm = ref::upload(*be, mask), dt = ref::upload(*be, tau),
                      du = ref::upload(*be, mu);
    SummarizeParams sp;
    sp.k = dev.k.view;
    sp.summary_query = dev.summary_query.view;
    sp.summaries = dc.view;
    sp.method.chunk_size = 16;
    sp.first_chunk = 6;  // the last query (key 127) is in chunk 7 and routes chunk 6
    RouteParams rp;
    rp.q = dev.q.view;
    rp.summaries = dc.view;
    rp.n_k = 128;
    rp.method.chunk_size = 16;
    rp.routing.mask = dm.view;
    rp.routing.tau = dt.view;
    rp.routing.mu = du.view;
    try {
      summarize_and_route(*be, sp, rp);
      FAIL("a step whose routing reads what its Stage 0 writes was accepted");
    } catch (const InvalidArgument& e) {
      CHECK(std::string(e.what()).find("sp.first_chunk") != std::string::npos);
    }
    sp.first_chunk = 7;
    sp.method.chunk_size = 32;
    CHECK_THROWS_AS(summarize_and_route(*be, sp, rp), InvalidArgument);
    sp.method.chunk_size = 16;
    CHECK_NOTHROW(summarize_and_route(*be, sp, rp));
    be->synchronize(nullptr);
  }
}
