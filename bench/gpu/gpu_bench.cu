// GPU benchmark of the CUDA backend on the paper's protocol (docs: benchmark-protocol.md).
//
//   prefill: b = 1, h_q = 32, h_kv = 2, d = 128, C = 64, bf16, N in --sizes
//     Stage 0 + Stage 1 on real routing (planted-structure problem from dashattn/synthetic.h),
//     Stage 2 at random masks of sparsity s (drawn per query chunk, and per token), our dense kernel.
//   decode: b = 24 (--decode-batch), one new token over a cache of N; Stage 0 (the chunk the token completes),
//     Stage 1, Stage 2 at random masks with split-KV, our dense decode.
// Every figure is the median over many replays of a CUDA graph holding the timed launches (so host-side
// validation and launch gaps stay out), each started while a 50 µs spin kernel holds the GPU (so the host's launch
// of the replay is not timed either; torch_baselines.py times the dense baselines the same way), after warm-up, on
// non-zero inputs. Inputs that fit in the L2 cache are rotated, as the protocol asks: a decode step's routing reads
// only q and the summaries (12.6 MB at 64K), which replays of one graph would find in L2, while in an engine the
// other layers' work evicts a layer's summaries between two of its steps. So the decode timings of Stage 0,
// Stage 1 and the step cycle through copies of q and the summaries that together exceed twice the L2 (one graph
// per copy; the kernels' code stays cached, as in an engine that runs them every layer), and decode Stage 2
// through as many random masks of the same sparsity, since the K/V tiles one mask routes fit in the L2 at 16K /
// 93.75 %; --warm-l2 times them on one copy. Every other input (a prefill's, the dense decode's K/V) exceeds the L2
// at every protocol size. Prints JSON lines (one per measurement) and a markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attend_launch.cuh"
#include "bench_device.cuh"
#include "bias_lists.cuh"
#include "bench_paged.cuh"
#include "dashattn/dashattn.h"
#include "dashattn/synthetic.h"

namespace {

using namespace dashattn;


struct Options {
  std::vector<int64_t> sizes{16384, 32768, 65536};
  std::vector<double> sparsities{0.75, 0.875, 0.9375};
  int reps = 30;
  int decode_batch = 24;
  bool prefill = true, decode = true;
  PriorMode prior = PriorMode::kEstimateDiagonal;  // the library default; `none` times Stage 2 without the bias
  // Extra decode Stage-2 timings with these key-split counts instead of the plan's (0: none); e.g. more splits
  // than fit one wave, so that the block scheduler evens out (sequence, KV head) pairs with more active tiles.
  std::vector<int> decode_splits;
  // Extra decode step timings with Stage 0 after Stage 2 or left out, to tell what Stage 0 beside Stage 2 costs
  // the step.
  bool step_variants = false;
  // The decode rows timed on one copy of their inputs (L2-warm replays), not rotated.
  bool warm_l2 = false;
  // How q, k, v, o and the summaries lie in memory: [b, n, h, d] (the API's logical order), or [b, h, n, d], the
  // layout PyTorch SDPA's callers hold and torch_baselines.py times the dense kernels on by default. The same
  // logical views either way (from_bhnd permutes the strides), so the kernels and their arithmetic are the same;
  // what changes is which keys are neighbours in memory: in [b, h, n, d] a 64-key chunk of one KV head is one
  // contiguous 16 KB run, in [b, n, h, d] 64 runs of 256 bytes interleaved with the other heads' keys.
  bool heads_major = false;
  // Prefill Stages 1 and 2 with the bias lists that forward() hands from one to the other (bias_lists.cuh): Stage 1
  // writes them, Stage 2 fills its bias table from them. --no-bias-lists times both as the standalone route() and
  // attend() run them (Stage 2 recomputing the table), for A/B runs in one binary.
  bool bias_lists = true;
  // --paged P: Stage 0 and Stage 2 also timed on the same keys and values in a shuffled pool of P-token pages
  // (bench_paged.cuh), beside the contiguous timings (0: not timed).
  int64_t page_size = 0;
  // --even-draws: random masks with the same count in every row (random_mask's `even`), not the protocol's draws.
  bool even_draws = false;
  // --decode-lengths: the decode rows pass per-sequence lengths (seqlens_q / seqlens_k in device memory), as an
  // engine's padded batch does, instead of a batch of equal lengths without them.
  bool decode_lengths = false;
};

// Device buffer with a view, freed at scope exit.
struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : bytes(n) { CK(cudaMalloc(&p, std::max<size_t>(n, 1))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

TensorView view(void* p, DType t, std::initializer_list<int64_t> shape) {
  return make_view(p, t, shape, Device{DeviceType::kCuda, 0});
}

using bench_device::fill;

// A [b, n, h, d] tensor in the layout --layout chose (see Options::heads_major).
TensorView bnhd_view(const Options& o, void* p, DType t, int64_t b, int64_t n, int64_t h, int64_t d) {
  return o.heads_major ? from_bhnd(p, t, b, h, n, d, Device{DeviceType::kCuda, 0}) : view(p, t, {b, n, h, d});
}

// Host bytes of a row-major [n, h, d] tensor of 2-byte elements, reordered to [h, n, d] when heads_major.
std::vector<uint8_t> host_layout(const Options& o, std::vector<uint8_t> bytes, int64_t n, int64_t h, int64_t d) {
  if (!o.heads_major) return bytes;
  std::vector<uint8_t> out(bytes.size());
  const size_t row = size_t(d) * 2;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < h; ++j)
      std::copy_n(&bytes[size_t(i * h + j) * row], row, &out[size_t(j * n + i) * row]);
  return out;
}

// Stage 2's parameters over the tensors of Stages 0-1 (q, routing) and of the dense baseline (k, v, o).
AttendParams attend_params(const RouteParams& rp, const SummarizeParams& sp, const DenseParams& dp,
                           const MethodParams& m) {
  AttendParams ap;
  ap.q = rp.q;
  ap.k = sp.k;
  ap.v = dp.v;
  ap.summaries = sp.summaries;
  ap.routing = rp.routing;
  ap.o = dp.o;
  ap.method = m;
  ap.batch = rp.batch;  // --decode-lengths: the per-sequence lengths (default: none)
  return ap;
}

// Wall-clock window (seconds since the epoch) of the last timing's replays, which emit() reports with the timing's row
// and then forgets: run_gpu_bench.py reads the GPU's clock log over it, so that a row timed while the clock dipped
// can be told apart from a kernel's own level (perf-log.md, thirty-fourth pass).
double g_window_t0 = 0, g_window_t1 = 0;
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Median time (ms) of one graph replay: one graph per input copy r = 0 .. copies - 1, captured from body(stream, r),
// replayed in turn so that each finds its inputs where the other copies' replays left the L2.
double time_ms_rotating(cudaStream_t st, int reps, int copies,
                        const std::function<void(cudaStream_t, int)>& body) {
  std::vector<cudaGraph_t> graphs(static_cast<size_t>(copies));
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(copies));
  for (int r = 0; r < copies; ++r) {
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    body(st, r);
    CK(cudaStreamEndCapture(st, &graphs[r]));
    CK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
  }
  for (int i = 0; i < std::max(3, copies); ++i) CK(cudaGraphLaunch(execs[i % copies], st));
  CK(cudaStreamSynchronize(st));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  g_window_t0 = wall_seconds();
  for (int i = 0; i < reps; ++i) {
    bench_device::busy_wait_ns<<<1, 32, 0, st>>>(50000);  // GPU time only: see busy_wait_ns
    CK(cudaEventRecord(a, st));
    CK(cudaGraphLaunch(execs[i % copies], st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  g_window_t1 = wall_seconds();
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  for (int r = 0; r < copies; ++r) {
    CK(cudaGraphExecDestroy(execs[r]));
    CK(cudaGraphDestroy(graphs[r]));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median time (ms) of one replay of the graph captured from body (inputs that exceed the L2).
double time_ms(cudaStream_t st, int reps, const std::function<void(cudaStream_t)>& body) {
  return time_ms_rotating(st, reps, 1, [&](cudaStream_t s, int) { body(s); });
}

__global__ void empty_kernel() {}

void emit(const std::string& mode, int64_t n, const std::string& what, double ms, const std::string& extra = "") {
  std::string window;
  if (g_window_t1 > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ",\"t0\":%.3f,\"t1\":%.3f", g_window_t0, g_window_t1);
    window = buf;
    g_window_t0 = g_window_t1 = 0;
  }
  std::printf("{\"mode\":\"%s\",\"n\":%lld,\"what\":\"%s\",\"ms\":%.5f%s%s%s}\n", mode.c_str(), (long long)n,
              what.c_str(), ms, extra.empty() ? "" : ",", extra.c_str(), window.c_str());
  std::fflush(stdout);
}

// Random routing mask [b, h_kv, rows, words] for queries at the end of n_k keys: each routable chunk kept with
// probability 1 − s, diagonal always set. per_query_chunk: the 64 queries of a query chunk share the draw.
// even (--even-draws): each row keeps exactly round((1 − s) · routable) chunks, drawn uniformly without
// replacement, so that every row block of a decode step has the same number of tiles (the protocol's draws give
// the 48 (sequence, KV head) pairs of its decode step counts of 32 ± 5.5 at 32K / 93.75 %).
std::vector<uint32_t> random_mask(int64_t b, int64_t h_kv, int64_t rows, int64_t n_k, int64_t chunk, int64_t words,
                                  double s, bool per_query_chunk, uint64_t seed, double* kept_fraction,
                                  bool even = false) {
  std::vector<uint32_t> m(static_cast<size_t>(b * h_kv * rows * words), 0u);
  std::mt19937_64 rng(seed);
  const uint64_t keep_below = static_cast<uint64_t>((1.0 - s) * 18446744073709551615.0);
  double kept = 0, routable = 0;
  std::vector<uint32_t> shared;
  std::vector<int64_t> order;  // even draws: the row's chunks, partly shuffled
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t r = 0; r < h_kv; ++r) {
      int64_t last_qc = -1;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t pos = n_k - rows + i, diag = pos / chunk;
        uint32_t* row = &m[static_cast<size_t>(((bi * h_kv + r) * rows + i) * words)];
        if (per_query_chunk && diag == last_qc) {
          std::copy(shared.begin(), shared.end(), row);
        } else {
          if (even) {
            // Partial Fisher-Yates over the routable chunks: the first `keep` of a shuffled order.
            const int64_t keep = std::llround((1.0 - s) * static_cast<double>(diag));
            order.resize(static_cast<size_t>(diag));
            std::iota(order.begin(), order.end(), int64_t(0));
            for (int64_t k = 0; k < keep; ++k) {
              const int64_t j = k + static_cast<int64_t>(rng() % static_cast<uint64_t>(diag - k));
              std::swap(order[static_cast<size_t>(k)], order[static_cast<size_t>(j)]);
              const int64_t c = order[static_cast<size_t>(k)];
              row[c >> 5] |= 1u << (c & 31);
            }
          } else {
            for (int64_t c = 0; c < diag; ++c)
              if (rng() < keep_below) row[c >> 5] |= 1u << (c & 31);
          }
          shared.assign(row, row + words);
          last_qc = diag;
        }
        for (int64_t c = 0; c < diag; ++c) kept += (row[c >> 5] >> (c & 31)) & 1u;
        routable += static_cast<double>(diag);
        row[diag >> 5] |= 1u << (diag & 31);
      }
    }
  *kept_fraction = routable > 0 ? kept / routable : 0;
  return m;
}

// The bias lists (bias_lists.cuh) of a mask drawn here, [h_kv, rows] like μ: each row's chunks below its diagonal
// with a log weight of an even spread over them (Stage 2's work does not depend on the values), kNoList for a row
// of more than kBiasListCap chunks, as Stage 1 writes them.
void upload_bias_lists(const std::vector<uint32_t>& mask, int64_t h_kv, int64_t rows, int64_t n_k, int64_t chunk,
                       int64_t words, const cuda::BiasLists& lists) {
  std::vector<int32_t> counts(static_cast<size_t>(h_kv * rows));
  std::vector<int2> entries(static_cast<size_t>(h_kv * rows * cuda::kBiasListCap), int2{0, 0});
  for (int64_t r = 0; r < h_kv; ++r)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = r * rows + i, diag = (n_k - rows + i) / chunk;
      const uint32_t* m = &mask[static_cast<size_t>(row * words)];
      int32_t count = 0;
      for (int64_t c = 0; c < diag; ++c) count += (m[c >> 5] >> (c & 31)) & 1u;
      if (count > cuda::kBiasListCap) {
        counts[static_cast<size_t>(row)] = cuda::kNoList;
        continue;
      }
      counts[static_cast<size_t>(row)] = count;
      const float lw = count > 0 ? -std::log(float(count)) : 0.0f;
      int k = 0;
      for (int64_t c = 0; c < diag; ++c) {
        if ((m[c >> 5] >> (c & 31)) & 1u) {
          int32_t bits;
          std::memcpy(&bits, &lw, 4);
          entries[static_cast<size_t>(row * cuda::kBiasListCap + k++)] = int2{int32_t(c), bits};
        }
      }
    }
  CK(cudaMemcpy(lists.counts, counts.data(), counts.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(lists.entries, entries.data(), entries.size() * sizeof(int2), cudaMemcpyHostToDevice));
}

struct Row {
  std::string mode;
  int64_t n;
  double dense = 0, s0 = 0, s1 = 0, sparsity_real = 0;
  std::vector<double> s2_chunk, s2_token;
  std::vector<double> step;  // decode: Stage 0 + 1 + 2 captured as one graph, per sparsity
  // --paged: Stage 0 and Stage 2 on the page pool (prefill: chunk draws; decode: per-token draws), per sparsity.
  double s0_paged = 0;
  std::vector<double> s2_paged;
  double extra_gb = 0;
};

Row bench_prefill(Backend& be, const Options& o, int64_t n, cudaStream_t st) {
  Row row{"prefill", n};
  const int64_t h_q = 32, h_kv = 2, d = 128, C = 64;
  synthetic::Config cfg;
  cfg.n = n;
  cfg.h_q = h_q;
  cfg.h_kv = h_kv;
  cfg.d = d;
  cfg.chunk = C;
  cfg.num_needles = 16;
  cfg.seed = 7;
  synthetic::Problem pr = synthetic::generate(cfg);
  const auto qh = host_layout(o, synthetic::convert(pr.q, DType::kBF16), n, h_q, d),
             kh = host_layout(o, synthetic::convert(pr.k, DType::kBF16), n, h_kv, d),
             vh = host_layout(o, synthetic::convert(pr.v, DType::kBF16), n, h_kv, d),
             sqh = synthetic::convert(pr.summary_query, DType::kBF16);
  Buf q(qh.size()), k(kh.size()), v(vh.size()), sq(sqh.size()), out(qh.size());
  CK(cudaMemcpy(q.p, qh.data(), qh.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(k.p, kh.data(), kh.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(v.p, vh.data(), vh.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sq.p, sqh.data(), sqh.size(), cudaMemcpyHostToDevice));
  const int64_t nc = n / C, words = mask_words(n, C);
  Buf summ(size_t(nc * h_kv * d * 2)), mask(size_t(h_kv * n * words * 4)), tau(size_t(h_q * n * 4)),
      mu(size_t(h_kv * n * 4)), active(size_t(h_kv * n * 4));
  MethodParams m;
  m.chunk_size = C;
  m.prior = o.prior;

  SummarizeParams sp;
  sp.k = bnhd_view(o, k.p, DType::kBF16, 1, n, h_kv, d);
  sp.summary_query = view(sq.p, DType::kBF16, {h_kv, d});
  sp.summaries = bnhd_view(o, summ.p, DType::kBF16, 1, nc, h_kv, d);
  sp.method = m;
  RouteParams rp;
  rp.q = bnhd_view(o, q.p, DType::kBF16, 1, n, h_q, d);
  rp.summaries = sp.summaries;
  rp.n_k = n;
  rp.method = m;
  rp.routing.mask = view(mask.p, DType::kU32, {1, h_kv, n, words});
  rp.routing.tau = view(tau.p, DType::kF32, {1, h_q, n});
  rp.routing.mu = view(mu.p, DType::kF32, {1, h_kv, n});
  rp.routing.active_chunks = view(active.p, DType::kI32, {1, h_kv, n});
  row.s0 = time_ms(st, o.reps, [&](cudaStream_t s) { sp.stream = s; summarize(be, sp); });
  emit("prefill", n, "stage0", row.s0);
  // Stage 1 as forward() runs it: with the bias lists for Stage 2 (their rows indexed like μ, [h_kv, n]) for the
  // shapes for which forward() carves them.
  const bool use_lists = o.bias_lists && cuda::bias_lists_read(d, h_q / h_kv, C, n);
  Buf lists_buf(use_lists ? cuda::bias_lists_bytes(h_kv * n) : 0);
  const cuda::BiasLists lists = use_lists ? cuda::carve_bias_lists(lists_buf.p, h_kv * n) : cuda::BiasLists{};
  const RouteParams rp_norm = normalize_route(rp);
  const ProblemShape route_s = route_shape(rp_norm);
  row.s1 = time_ms(st, o.reps, [&](cudaStream_t s) {
    rp.stream = s;
    if (!use_lists) return route(be, rp);
    RouteParams x = rp_norm;
    x.stream = s;
    cuda::launch_route(x, route_s, s, &lists);
  });
  CK(cudaStreamSynchronize(st));
  std::vector<int32_t> act(static_cast<size_t>(h_kv * n));
  CK(cudaMemcpy(act.data(), active.p, act.size() * 4, cudaMemcpyDeviceToHost));
  const RoutingStats rs = routing_stats(make_view(act.data(), DType::kI32, {1, h_kv, n}), BatchLayout{}, n, n, C);
  row.sparsity_real = rs.sparsity;
  emit("prefill", n, "stage1", row.s1, "\"real_sparsity\":" + std::to_string(rs.sparsity));

  DenseParams dp;
  dp.q = rp.q;
  dp.k = sp.k;
  dp.v = bnhd_view(o, v.p, DType::kBF16, 1, n, h_kv, d);
  dp.o = bnhd_view(o, out.p, DType::kBF16, 1, n, h_q, d);
  row.dense = time_ms(st, std::max(5, o.reps / 3), [&](cudaStream_t s) { dp.stream = s; dense_attention(be, dp); });
  emit("prefill", n, "dense_ours", row.dense);

  AttendParams ap = attend_params(rp, sp, dp, m);
  const AttendParams ap_norm = normalize_attend(ap);
  const ProblemShape attend_s = attend_shape(ap_norm);
  std::unique_ptr<bench_paged::PagedKv> pages;
  if (o.page_size > 0) {
    pages = bench_paged::make_paged(k.p, v.p, 1, n, h_kv, d, o.page_size, 11);
    SummarizeParams paged_sp = pages->on_pages(sp);
    row.s0_paged = time_ms(st, o.reps, [&](cudaStream_t s) { paged_sp.stream = s; summarize(be, paged_sp); });
    emit("prefill", n, "stage0_paged", row.s0_paged, "\"page\":" + std::to_string(o.page_size));
  }
  for (int per_token = 0; per_token < 2; ++per_token) {
    for (double s : o.sparsities) {
      double kept = 0;
      const auto mh = random_mask(1, h_kv, n, n, C, words, s, !per_token, 1234 + per_token, &kept, o.even_draws);
      CK(cudaMemcpy(mask.p, mh.data(), mh.size() * 4, cudaMemcpyHostToDevice));
      if (use_lists) upload_bias_lists(mh, h_kv, n, n, C, words, lists);
      const double ms = time_ms(st, o.reps, [&](cudaStream_t st2) {
        ap.stream = st2;
        if (!use_lists) return attend(be, ap);
        AttendParams x = ap_norm;
        x.stream = st2;
        cuda::launch_attend(x, attend_s, nullptr, 0, st2, &lists);
      });
      (per_token ? row.s2_token : row.s2_chunk).push_back(ms);
      emit("prefill", n, std::string("stage2_") + (per_token ? "token" : "chunk"), ms,
           "\"s\":" + std::to_string(s) + ",\"kept\":" + std::to_string(kept));
      if (pages && !per_token) {
        AttendParams paged = pages->on_pages(ap);
        const double pm = time_ms(st, o.reps, [&](cudaStream_t st2) { paged.stream = st2; attend(be, paged); });
        row.s2_paged.push_back(pm);
        emit("prefill", n, "stage2_chunk_paged", pm,
             "\"s\":" + std::to_string(s) + ",\"page\":" + std::to_string(o.page_size));
      }
    }
  }
  // Extra device memory of the method beyond q, k, v, o and the summaries.
  row.extra_gb = double(mask.bytes + tau.bytes + mu.bytes + active.bytes + lists_buf.bytes) / 1e9;
  emit("prefill", n, "extra_memory", 0.0, "\"gb\":" + std::to_string(row.extra_gb));
  return row;
}

Row bench_decode(Backend& be, const Options& o, int64_t n, cudaStream_t st) {
  Row row{"decode", n};
  const int64_t b = o.decode_batch, h_q = 32, h_kv = 2, d = 128, C = 64;
  Buf q(size_t(b * h_q * d * 2)), k(size_t(b * n * h_kv * d * 2)), v(size_t(b * n * h_kv * d * 2)),
      sq(size_t(h_kv * d * 2)), out(size_t(b * h_q * d * 2));
  // Random keys; queries scaled so that the routing scores spread over several units (sparse routing, as a
  // trained model's), small summary query.
  fill(k.p, b * n * h_kv * d, 1, 1.0f);
  fill(v.p, b * n * h_kv * d, 2, 1.0f);
  fill(q.p, b * h_q * d, 3, 16.0f);
  fill(sq.p, h_kv * d, 4, 0.05f);
  const int64_t nc = n / C, words = mask_words(n, C);
  Buf summ(size_t(b * nc * h_kv * d * 2)), mask(size_t(b * h_kv * words * 4)), tau(size_t(b * h_q * 4)),
      mu(size_t(b * h_kv * 4)), active(size_t(b * h_kv * 4));
  MethodParams m;
  m.chunk_size = C;
  m.prior = o.prior;
  SummarizeParams sp;
  sp.k = bnhd_view(o, k.p, DType::kBF16, b, n, h_kv, d);
  sp.summary_query = view(sq.p, DType::kBF16, {h_kv, d});
  sp.summaries = bnhd_view(o, summ.p, DType::kBF16, b, nc, h_kv, d);
  sp.method = m;
  summarize(be, sp);  // the cache of every earlier chunk
  sp.first_chunk = nc - 1;  // the step's own work: the chunk the new token completes
  RouteParams rp;
  rp.q = bnhd_view(o, q.p, DType::kBF16, b, 1, h_q, d);
  rp.summaries = sp.summaries;
  rp.n_k = n;
  rp.method = m;
  rp.routing.mask = view(mask.p, DType::kU32, {b, h_kv, 1, words});
  rp.routing.tau = view(tau.p, DType::kF32, {b, h_q, 1});
  rp.routing.mu = view(mu.p, DType::kF32, {b, h_kv, 1});
  rp.routing.active_chunks = view(active.p, DType::kI32, {b, h_kv, 1});
  DenseParams dp;
  dp.q = rp.q;
  dp.k = sp.k;
  dp.v = bnhd_view(o, v.p, DType::kBF16, b, n, h_kv, d);
  dp.o = bnhd_view(o, out.p, DType::kBF16, b, 1, h_q, d);
  // --decode-lengths: the batch as an engine passes it, with each sequence's lengths (one query, n keys) in device
  // memory, which every kernel then reads in its head.
  std::unique_ptr<Buf> lens;  // [seqlens_q | seqlens_k]
  if (o.decode_lengths) {
    lens = std::make_unique<Buf>(size_t(2 * b) * 4);
    std::vector<int32_t> host(static_cast<size_t>(2 * b), int32_t(n));
    std::fill(host.begin(), host.begin() + b, 1);
    CK(cudaMemcpy(lens->p, host.data(), lens->bytes, cudaMemcpyHostToDevice));
    for (BatchLayout* bl : {&sp.batch, &rp.batch, &dp.batch}) {
      bl->seqlens_q = static_cast<const int32_t*>(lens->p);
      bl->seqlens_k = static_cast<const int32_t*>(lens->p) + b;
    }
  }
  const AttendParams ap = attend_params(rp, sp, dp, m);
  const ProblemShape shape = attend_shape(ap);
  size_t ws_bytes = std::max(cuda::attend_workspace_bytes(shape, false), cuda::attend_workspace_bytes(shape, true));
  for (int k : o.decode_splits) ws_bytes = std::max(ws_bytes, cuda::split_workspace_bytes(shape, k));
  Buf ws(ws_bytes);
  // Stage 1 of the step writes its own mask (Stage 2 reads the random one).
  Buf mask_routed(mask.bytes);
  // Copies of q and the summaries for the rotated timings (see the header; copy 0 is the original): together at
  // least twice the L2, at most 64.
  int l2_bytes = 0;
  CK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0));
  const size_t copy_bytes = summ.bytes + q.bytes;
  const int copies =
      o.warm_l2 ? 1 : int(std::min<size_t>(64, std::max<size_t>(2, (2 * size_t(l2_bytes) + copy_bytes - 1) / copy_bytes)));
  std::vector<std::unique_ptr<Buf>> copy_bufs;
  std::vector<SummarizeParams> sp_at{sp};
  std::vector<RouteParams> rp_at{rp};
  for (int r = 1; r < copies; ++r) {
    copy_bufs.push_back(std::make_unique<Buf>(summ.bytes));
    const Buf& sb = *copy_bufs.back();
    copy_bufs.push_back(std::make_unique<Buf>(q.bytes));
    const Buf& qb = *copy_bufs.back();
    CK(cudaMemcpy(sb.p, summ.p, summ.bytes, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(qb.p, q.p, q.bytes, cudaMemcpyDeviceToDevice));
    sp_at.push_back(sp);
    sp_at.back().summaries = bnhd_view(o, sb.p, DType::kBF16, b, nc, h_kv, d);
    rp_at.push_back(rp);
    rp_at.back().q = bnhd_view(o, qb.p, DType::kBF16, b, 1, h_q, d);
    rp_at.back().summaries = sp_at.back().summaries;
  }
  auto rotated = [&](const std::function<void(cudaStream_t, int)>& body) {
    return time_ms_rotating(st, o.reps * 3, copies, body);
  };
  emit("decode", n, "input_copies", 0.0, "\"copies\":" + std::to_string(copies));
  row.s0 = rotated([&](cudaStream_t s, int r) { sp_at[r].stream = s; summarize(be, sp_at[r]); });
  emit("decode", n, "stage0", row.s0);
  row.s1 = rotated([&](cudaStream_t s, int r) { rp_at[r].stream = s; route(be, rp_at[r]); });
  // Stages 0 and 1 as one call: Stage 0 (the chunk the token completes, which no query of the step routes: the
  // token's own chunk) beside Stage 1 on a second stream.
  const double s01 = rotated([&](cudaStream_t s, int r) {
    sp_at[r].stream = s;
    rp_at[r].stream = s;
    summarize_and_route(be, sp_at[r], rp_at[r]);
  });
  emit("decode", n, "stage01_fused", s01);
  CK(cudaStreamSynchronize(st));
  std::vector<int32_t> act(static_cast<size_t>(b * h_kv));
  CK(cudaMemcpy(act.data(), active.p, act.size() * 4, cudaMemcpyDeviceToHost));
  const RoutingStats rs = routing_stats(make_view(act.data(), DType::kI32, {b, h_kv, 1}), BatchLayout{}, 1, n, C);
  row.sparsity_real = rs.sparsity;
  emit("decode", n, "stage1", row.s1, "\"real_sparsity\":" + std::to_string(rs.sparsity));

  row.dense = time_ms(st, o.reps * 3, [&](cudaStream_t s) {
    cuda::launch_dense(normalize_dense(dp), shape, ws.p, ws.bytes, s);
  });
  emit("decode", n, "dense_ours", row.dense);
  // Stage 2 reads K/V tiles by its mask: at 16K / 93.75 % the tiles one mask routes (27 MB) fit in the L2, so each
  // copy gets a mask of its own draw (copy 0 the original buffer), and the replays stream different tiles. Timed
  // alone (s2_at), Stage 2 reads q and the summaries of copy 0, which stay cached as they do in an engine, where
  // Stage 1 has just read them; in the step (step_at) those of the step's copy, which its Stage 1 reads first.
  std::vector<std::unique_ptr<Buf>> mask_copies;
  std::vector<AttendParams> s2_at, step_at;
  for (int r = 0; r < copies; ++r) {
    AttendParams alone = ap, in_step = attend_params(rp_at[r], sp_at[r], dp, m);
    if (r > 0) {
      mask_copies.push_back(std::make_unique<Buf>(mask.bytes));
      alone.routing.mask = in_step.routing.mask = view(mask_copies.back()->p, DType::kU32, {b, h_kv, 1, words});
    }
    s2_at.push_back(normalize_attend(alone));
    step_at.push_back(normalize_attend(in_step));
  }
  // --paged: the pool, Stage 0 on it, and each copy's Stage-2 parameters on it.
  std::unique_ptr<bench_paged::PagedKv> pages;
  std::vector<AttendParams> s2_paged_at;
  if (o.page_size > 0) {
    pages = bench_paged::make_paged(k.p, v.p, b, n, h_kv, d, o.page_size, 11);
    std::vector<SummarizeParams> sp_paged;
    for (const SummarizeParams& x : sp_at) sp_paged.push_back(pages->on_pages(x));
    row.s0_paged = rotated([&](cudaStream_t s, int r) { sp_paged[r].stream = s; summarize(be, sp_paged[r]); });
    emit("decode", n, "stage0_paged", row.s0_paged, "\"page\":" + std::to_string(o.page_size));
    for (const AttendParams& x : s2_at) s2_paged_at.push_back(normalize_attend(pages->on_pages(x)));
  }
  // --decode-splits: the plan and arguments of the sparsity loop's Stage 2, with other split counts.
  const cuda::AttendPlan planned = cuda::plan_attend(shape, cuda::current_sm_count(), false);
  const cuda::AttendArgs split_args = cuda::make_attend_args(s2_at[0], shape);
  // The whole step as an engine runs it, one graph: Stage 0 (the completed chunk), Stage 1 (real routing, into
  // its own mask buffer) and Stage 2 over the random mask with Stage 1's τ and μ. Timing the stages as separate
  // graphs adds a launch gap per stage that a captured step does not pay.
  cudaStream_t side;
  cudaEvent_t fork, join;
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  std::vector<RouteParams> rp_step = rp_at;
  for (RouteParams& x : rp_step) x.routing.mask = view(mask_routed.p, DType::kU32, {b, h_kv, 1, words});
  for (double s : o.sparsities) {
    double kept = 0;
    const auto mh = random_mask(b, h_kv, 1, n, C, words, s, false, 99, &kept, o.even_draws);
    CK(cudaMemcpy(mask.p, mh.data(), mh.size() * 4, cudaMemcpyHostToDevice));
    for (int r = 1; r < copies; ++r) {
      double kept_r = 0;
      const auto mr = random_mask(b, h_kv, 1, n, C, words, s, false, 99 + r, &kept_r, o.even_draws);
      CK(cudaMemcpy(mask_copies[r - 1]->p, mr.data(), mr.size() * 4, cudaMemcpyHostToDevice));
    }
    const double ms = rotated([&](cudaStream_t s2, int r) { cuda::launch_attend(s2_at[r], shape, ws.p, ws.bytes, s2); });
    row.s2_token.push_back(ms);
    emit("decode", n, "stage2_token", ms, "\"s\":" + std::to_string(s) + ",\"kept\":" + std::to_string(kept));
    if (pages) {
      const double pm =
          rotated([&](cudaStream_t s2, int r) { cuda::launch_attend(s2_paged_at[r], shape, ws.p, ws.bytes, s2); });
      row.s2_paged.push_back(pm);
      emit("decode", n, "stage2_token_paged", pm, "\"s\":" + std::to_string(s) + ",\"page\":" + std::to_string(o.page_size));
    }
    for (int k : o.decode_splits) {
      cuda::AttendPlan plan = planned;
      plan.num_splits = k;
      plan.workspace_bytes = cuda::split_workspace_bytes(shape, k);
      const double mk = time_ms(st, o.reps * 3, [&](cudaStream_t s2) {
        cuda::launch_attend_planned(split_args, shape.d, s2_at[0].q.dtype, plan, ws.p, s2);
      });
      emit("decode", n, "stage2_token_splits", mk, "\"s\":" + std::to_string(s) + ",\"splits\":" + std::to_string(k));
    }
    // The step: Stage 0 on the step's stream (serial), or, as the library's forward() runs a one-token step
    // (whose new chunk no stage of the step reads), on a side stream forked after Stage 1 and joined back.
    auto run_step = [&](cudaStream_t s2, int r, bool beside) {
      if (!beside) {
        sp_at[r].stream = s2;
        summarize(be, sp_at[r]);
      }
      rp_step[r].stream = s2;
      route(be, rp_step[r]);
      if (beside) {  // in the order the backend's summarize_beside enqueues them: Stage 2 first, then Stage 0
        CK(cudaEventRecord(fork, s2));
        CK(cudaStreamWaitEvent(side, fork, 0));
      }
      cuda::launch_attend(step_at[r], shape, ws.p, ws.bytes, s2);
      if (beside) {
        sp_at[r].stream = side;
        summarize(be, sp_at[r]);
        CK(cudaEventRecord(join, side));
        CK(cudaStreamWaitEvent(s2, join, 0));
      }
    };
    const double step = rotated([&](cudaStream_t s2, int r) { run_step(s2, r, true); });
    row.step.push_back(step);
    emit("decode", n, "step", step, "\"s\":" + std::to_string(s));
    // The same three stages in order on one stream, for comparison.
    const double serial = rotated([&](cudaStream_t s2, int r) { run_step(s2, r, false); });
    emit("decode", n, "step_serial", serial, "\"s\":" + std::to_string(s));
    // Stage 0 beside Stage 1 (summarize_and_route), then Stage 2.
    const double fused = rotated([&](cudaStream_t s2, int r) {
      sp_at[r].stream = s2;
      rp_step[r].stream = s2;
      summarize_and_route(be, sp_at[r], rp_step[r]);
      cuda::launch_attend(step_at[r], shape, ws.p, ws.bytes, s2);
    });
    emit("decode", n, "step_fused", fused, "\"s\":" + std::to_string(s));
    if (o.step_variants) {
      auto variant = [&](const char* what, auto&& body) {
        emit("decode", n, what, rotated(body), "\"s\":" + std::to_string(s));
      };
      variant("step_no_stage0", [&](cudaStream_t s2, int r) {
        rp_step[r].stream = s2;
        route(be, rp_step[r]);
        cuda::launch_attend(step_at[r], shape, ws.p, ws.bytes, s2);
      });
      variant("step_stage0_after", [&](cudaStream_t s2, int r) {
        rp_step[r].stream = s2;
        route(be, rp_step[r]);
        cuda::launch_attend(step_at[r], shape, ws.p, ws.bytes, s2);
        sp_at[r].stream = s2;
        summarize(be, sp_at[r]);
      });
    }
  }
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  CK(cudaStreamDestroy(side));
  row.extra_gb = double(mask.bytes + tau.bytes + mu.bytes + active.bytes + ws.bytes) / 1e9;
  emit("decode", n, "extra_memory", 0.0, "\"gb\":" + std::to_string(row.extra_gb));
  return row;
}

void print_table(const std::vector<Row>& rows, const Options& o) {
  std::printf("\n| mode | N | ours dense ms | Stage 0 ms | Stage 1 ms | real sparsity |");
  for (double s : o.sparsities) std::printf(" S2 %.2f%% chunk / token ms |", s * 100);
  std::printf(" extra GB |\n|---|---|---|---|---|---|");
  for (size_t i = 0; i < o.sparsities.size(); ++i) std::printf("---|");
  std::printf("---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %lldK | %.3f | %.4f | %.4f | %.3f |", r.mode.c_str(), (long long)(r.n / 1024), r.dense, r.s0,
                r.s1, r.sparsity_real);
    for (size_t i = 0; i < o.sparsities.size(); ++i) {
      if (i < r.s2_chunk.size()) std::printf(" %.3f / %.3f |", r.s2_chunk[i], r.s2_token[i]);
      else std::printf(" %.3f |", i < r.s2_token.size() ? r.s2_token[i] : 0.0);
    }
    std::printf(" %.3f |\n", r.extra_gb);
  }
  if (o.page_size <= 0) return;
  std::printf("\n| mode | N | Stage 0 ms contiguous / paged (P = %lld) |", (long long)o.page_size);
  for (double s : o.sparsities) std::printf(" S2 %.2f%% contiguous / paged ms |", s * 100);
  std::printf("\n|---|---|---|");
  for (size_t i = 0; i < o.sparsities.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const Row& r : rows) {
    // Prefill rows compare chunk draws, decode rows per-token draws (the draws each mode's paged timing used).
    const std::vector<double>& base = r.mode == "prefill" ? r.s2_chunk : r.s2_token;
    std::printf("| %s | %lldK | %.4f / %.4f |", r.mode.c_str(), (long long)(r.n / 1024), r.s0, r.s0_paged);
    for (size_t i = 0; i < o.sparsities.size(); ++i)
      std::printf(" %.4f / %.4f |", i < base.size() ? base[i] : 0.0, i < r.s2_paged.size() ? r.s2_paged[i] : 0.0);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    // Comma-separated list of numbers.
    auto list = [&](auto parse, auto& out) {
      out.clear();
      const std::string s = next();
      for (size_t p = 0; p < s.size();) {
        const size_t e = s.find(',', p);
        out.push_back(parse(s.substr(p, e - p)));
        p = e == std::string::npos ? s.size() : e + 1;
      }
    };
    if (a == "--sizes") {
      list([](const std::string& t) { return int64_t(std::stoll(t)); }, o.sizes);
    } else if (a == "--sparsities") {
      // e.g. 1 for the diagonal chunk alone: Stage 2's cost that does not scale with the attended keys.
      list([](const std::string& t) { return std::stod(t); }, o.sparsities);
    } else if (a == "--reps") {
      o.reps = std::stoi(next());
    } else if (a == "--prior") {
      const std::string name = next();
      if (!parse_prior_mode(name.c_str(), &o.prior)) {
        std::fprintf(stderr, "--prior: expected estimate_diagonal, raw or none, got '%s'\n", name.c_str());
        return 2;
      }
    } else if (a == "--decode-splits") {
      list([](const std::string& t) { return std::stoi(t); }, o.decode_splits);
    } else if (a == "--step-variants") {
      o.step_variants = true;
    } else if (a == "--prefill-only") {
      o.decode = false;
    } else if (a == "--no-bias-lists") {
      o.bias_lists = false;
    } else if (a == "--warm-l2") {
      o.warm_l2 = true;
    } else if (a == "--layout") {
      const std::string name = next();
      if (name != "bnhd" && name != "bhnd") {
        std::fprintf(stderr, "--layout: expected bnhd or bhnd, got '%s'\n", name.c_str());
        return 2;
      }
      o.heads_major = name == "bhnd";
    } else if (a == "--paged") {
      o.page_size = std::stoll(next());
      if (o.page_size < 64 || o.page_size % 64 != 0) {
        std::fprintf(stderr, "--paged: expected a page size that is a positive multiple of 64, got %lld\n",
                     (long long)o.page_size);
        return 2;
      }
    } else if (a == "--decode-lengths") {
      o.decode_lengths = true;
    } else if (a == "--even-draws") {
      o.even_draws = true;
    } else if (a == "--decode-only") {
      o.prefill = false;
    } else if (a == "--decode-batch") {
      o.decode_batch = std::stoi(next());
      if (o.decode_batch < 1) {
        std::fprintf(stderr, "--decode-batch: expected a batch of at least 1, got %d\n", o.decode_batch);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--sizes 16384,32768,65536] [--sparsities 0.75,0.875,0.9375] [--reps 30] "
                   "[--prior estimate_diagonal|raw|none] [--prefill-only|--decode-only] [--decode-batch 24] [--decode-splits 5,8,11] [--step-variants] [--warm-l2] [--no-bias-lists] [--layout bnhd|bhnd] [--paged 256] [--even-draws] [--decode-lengths]\n",
                   argv[0]);
      return 2;
    }
  }
  if (o.page_size > 0 && o.heads_major) {
    std::fprintf(stderr, "--paged: the page pool is [pages, P, h, d]; use it with --layout bnhd\n");
    return 2;
  }
  Backend* be = Registry::instance().find("cuda");
  if (!be || !be->probe().available) {
    std::printf("no CUDA device: %s\n", be ? be->probe().reason.c_str() : "backend not compiled in");
    return 77;
  }
  std::printf("{\"device\":\"%s\",\"layout\":\"%s\"}\n", be->probe().reason.c_str(), o.heads_major ? "bhnd" : "bnhd");
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // What timing one replay costs with nothing in it: a graph of one empty kernel, timed as every figure is. Each
  // separately timed stage pays it once; a captured step pays it once for all of its stages.
  emit("floor", 0, "empty_graph", time_ms(st, o.reps * 3, [](cudaStream_t s) { empty_kernel<<<1, 32, 0, s>>>(); }));
  std::vector<Row> rows;
  try {
    for (int64_t n : o.sizes) {
      if (o.prefill) rows.push_back(bench_prefill(*be, o, n, st));
      if (o.decode) rows.push_back(bench_decode(*be, o, n, st));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    print_table(rows, o);
    return 1;
  }
  print_table(rows, o);
  return 0;
}
