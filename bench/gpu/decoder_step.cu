// What a decode loop pays per step through the convenience Decoder, against forward() on the same caches: the
// library's own cost beyond the kernels (argument checks, the appends of the new keys and values, table and
// length uploads, workspace handling).
//   dashattn_decoder_step [--batch 24] [--context 32768] [--steps 200] [--pages 0,256] [--capacity T]
// For each page size (0: contiguous caches) a Decoder (h_q = 32, h_kv = 2, d = 128, C = 64, bf16) is filled to
// `context` tokens per sequence by chunked prefill steps, then timed over `steps` one-token steps run back to back
// (as a serving loop runs them: one synchronization at the end): the host's wall clock per step, and the GPU time
// per step between two events. Then forward() of one new query per sequence over the decoder's caches (no chunk
// to summarize), with a caller-owned workspace (an engine's decode step) and without one (forward() then takes
// it from the backend: on CUDA a stream-ordered pool, so the call no longer waits for its kernels).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_device.cuh"
#include "dashattn/dashattn.h"

using namespace dashattn;

namespace {

constexpr int64_t kHq = 32, kHkv = 2, kD = 128, kChunk = 64;

struct Options {
  int64_t batch = 24, context = 32768, steps = 200, capacity = 0;  // capacity 0: context + what the timing adds
  std::vector<int64_t> pages{0, 256};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--batch") {
      o.batch = std::atoll(v.c_str());
    } else if (a == "--context") {
      o.context = std::atoll(v.c_str());
    } else if (a == "--capacity") {
      o.capacity = std::atoll(v.c_str());
    } else if (a == "--steps") {
      o.steps = std::atoll(v.c_str());
    } else if (a == "--pages") {
      o.pages.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = v.find(',', at);
        o.pages.push_back(std::atoll(v.substr(at, comma - at).c_str()));
        at = comma == std::string::npos ? v.size() + 1 : comma + 1;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct DeviceArray {
  void* ptr = nullptr;
  explicit DeviceArray(size_t bytes) { CK(cudaMalloc(&ptr, bytes)); }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

struct Timing {
  double wall_us = 0, gpu_us = 0;
};

// `calls` runs of f back to back on `stream`: wall clock and GPU time per run, one synchronization at the end.
Timing time_loop(int64_t calls, cudaStream_t stream, const std::function<void()>& f) {
  for (int i = 0; i < 10; ++i) f();  // warm-up
  CK(cudaStreamSynchronize(stream));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const auto t0 = std::chrono::steady_clock::now();
  CK(cudaEventRecord(e0, stream));
  for (int64_t i = 0; i < calls; ++i) f();
  CK(cudaEventRecord(e1, stream));
  CK(cudaStreamSynchronize(stream));
  const auto t1 = std::chrono::steady_clock::now();
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  Timing t;
  t.wall_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / double(calls);
  t.gpu_us = 1e3 * ms / double(calls);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const auto start = std::chrono::steady_clock::now();
  const bool trace = std::getenv("DECODER_STEP_TRACE") != nullptr;  // every filling step to stderr
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Backend* be = Registry::instance().find("cuda");
  if (!be || !be->probe().available) {
    std::printf("%s\n", be ? be->probe().reason.c_str() : "CUDA backend not compiled in");
    return 77;
  }
  const Device dev{DeviceType::kCuda, 0};
  const int64_t b = opt.batch;
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU %s; b = %lld, context %lld, h_q %lld, h_kv %lld, d %lld, C %lld, bf16; %lld steps per figure\n",
              prop.name, (long long)b, (long long)opt.context, (long long)kHq, (long long)kHkv, (long long)kD,
              (long long)kChunk, (long long)opt.steps);

  constexpr int64_t kPrefill = 1024;  // tokens per prefill step
  DeviceArray q_fill(size_t(b * kPrefill * kHq * kD * 2)), k_fill(size_t(b * kPrefill * kHkv * kD * 2)),
      v_fill(size_t(b * kPrefill * kHkv * kD * 2)), o_fill(size_t(b * kPrefill * kHq * kD * 2));
  DeviceArray q1(size_t(b * kHq * kD * 2)), k1(size_t(b * kHkv * kD * 2)), v1(size_t(b * kHkv * kD * 2)),
      o1(size_t(b * kHq * kD * 2));
  // Queries scaled so that routing scores spread over several units (sparse routing), as in dashattn_gpu_bench.
  bench_device::fill(q1.ptr, b * kHq * kD, 11, 16.0f);
  bench_device::fill(k1.ptr, b * kHkv * kD, 12, 1.0f);
  bench_device::fill(v1.ptr, b * kHkv * kD, 13, 1.0f);
  const TensorView q1v = make_view(q1.ptr, DType::kBF16, {b, 1, kHq, kD}, dev);
  const TensorView k1v = make_view(k1.ptr, DType::kBF16, {b, 1, kHkv, kD}, dev);
  const TensorView v1v = make_view(v1.ptr, DType::kBF16, {b, 1, kHkv, kD}, dev);
  const TensorView o1v = make_view(o1.ptr, DType::kBF16, {b, 1, kHq, kD}, dev);

  std::printf("\n| pages | Decoder::step wall / GPU (us) | forward(), own workspace: wall / GPU (us) | "
              "forward(), no workspace: wall / GPU (us) |\n|---|---|---|---|\n");
  for (const int64_t page : opt.pages) {
    DecoderConfig cfg;
    cfg.batch = b;
    cfg.h_q = kHq;
    cfg.h_kv = kHkv;
    cfg.d = kD;
    cfg.dtype = DType::kBF16;
    cfg.method.chunk_size = kChunk;
    // By default no growth while timing.
    cfg.initial_capacity = opt.capacity > 0 ? opt.capacity : opt.context + 4 * opt.steps + 64;
    cfg.page_size = page;
    Decoder dec(*be, cfg);
    dec.stream = stream;
    for (int64_t filled = 0; filled < opt.context; filled += kPrefill) {
      const int64_t t = opt.context - filled < kPrefill ? opt.context - filled : kPrefill;
      CK(cudaStreamSynchronize(stream));  // the last step has read the fill buffers (the fills run on stream 0)
      if (trace || filled % (8 * kPrefill) == 0) {
        std::fprintf(stderr, "%.1f s: prefill at %lld\n", seconds(), (long long)filled);
      }
      bench_device::fill(q_fill.ptr, b * t * kHq * kD, 100 + filled, 16.0f);
      bench_device::fill(k_fill.ptr, b * t * kHkv * kD, 200 + filled, 1.0f);
      bench_device::fill(v_fill.ptr, b * t * kHkv * kD, 300 + filled, 1.0f);
      CK(cudaDeviceSynchronize());
      dec.step(make_view(q_fill.ptr, DType::kBF16, {b, t, kHq, kD}, dev),
               make_view(k_fill.ptr, DType::kBF16, {b, t, kHkv, kD}, dev),
               make_view(v_fill.ptr, DType::kBF16, {b, t, kHkv, kD}, dev),
               make_view(o_fill.ptr, DType::kBF16, {b, t, kHq, kD}, dev));
    }
    CK(cudaStreamSynchronize(stream));
    std::fprintf(stderr, "%.1f s: page %lld: filled to %lld tokens\n", seconds(), (long long)page,
                 (long long)dec.length());
    const Timing step = time_loop(opt.steps, stream, [&] { dec.step(q1v, k1v, v1v, o1v); });
    std::fprintf(stderr, "%.1f s: page %lld: Decoder::step timed\n", seconds(), (long long)page);

    // One new query per sequence over the caches as they stand (its key is already in them: no chunk completes).
    ForwardParams p;
    p.q = q1v;
    p.o = o1v;
    if (page > 0) {
      p.k = dec.key_pages();
      p.v = dec.value_pages();
      const TensorView table = dec.block_table();
      p.batch.block_table = static_cast<const int32_t*>(table.data);
      p.batch.block_table_stride = table.shape[1];
      p.batch.max_seqlen_k = static_cast<int>(dec.length());
    } else {
      p.k = dec.keys();
      p.v = dec.values();
    }
    p.summaries = dec.summaries();
    p.summaries_valid = dec.summarized_chunks();
    p.method = cfg.method;
    p.stream = stream;
    std::fprintf(stderr, "%.1f s: page %lld: forward() without a workspace\n", seconds(), (long long)page);
    const Timing bare = time_loop(opt.steps, stream, [&] { forward(*be, p); });
    const size_t ws_bytes = workspace_size(*be, p);
    DeviceArray ws(ws_bytes > 0 ? ws_bytes : 1);
    p.workspace = ws.ptr;
    p.workspace_bytes = ws_bytes;
    const Timing owned = time_loop(opt.steps, stream, [&] { forward(*be, p); });
    std::printf("| %lld | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f |\n", (long long)page, step.wall_us, step.gpu_us,
                owned.wall_us, owned.gpu_us, bare.wall_us, bare.gpu_us);
  }
  CK(cudaStreamDestroy(stream));
  return 0;
}
