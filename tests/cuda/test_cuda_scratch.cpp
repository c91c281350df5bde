// forward() without a workspace on the CUDA backend takes its bytes from a stream-ordered pool: the call neither
// waits for the GPU nor allocates from the driver. Its outputs must be the bytes of a call given a workspace, call
// after call on a stream of the caller's, and the call must capture into a CUDA graph (allocating, waiting for the
// stream and freeing, as before, ends a capture with an error).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "reference/checks.h"

namespace dashattn::cuda_test {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) FAIL(what << ": " << cudaGetErrorString(err));
}

// The outputs one call writes: o, lse and the routing outputs (mask, τ, μ, active counts) on the device,
// poisoned (0xFF) so that whatever a call leaves unwritten shows.
struct Outputs {
  static constexpr ref::HostTensor ref::ForwardOutputs::* kMembers[] = {
      &ref::ForwardOutputs::o,  &ref::ForwardOutputs::lse, &ref::ForwardOutputs::mask,
      &ref::ForwardOutputs::tau, &ref::ForwardOutputs::mu,  &ref::ForwardOutputs::active};
  ref::ForwardOutputs host;
  std::vector<ref::DeviceTensor> dev;  // in kMembers' order

  Outputs(Backend& be, const ref::Problem& pr, const MethodParams& m) {
    const ref::ProblemSpec& s = pr.spec;
    const int64_t rows = pr.rows_q(), words = mask_words(pr.padded_n_k(), m.chunk_size);
    host.o = ref::make_host_tensor(DType::kF32, {s.batch, rows, s.h_q, s.d});
    host.lse = ref::make_host_tensor(DType::kF32, {s.batch, s.h_q, rows});
    host.mask = ref::make_host_tensor(DType::kU32, {s.batch, s.h_kv, rows, words});
    host.tau = ref::make_host_tensor(DType::kF32, {s.batch, s.h_q, rows});
    host.mu = ref::make_host_tensor(DType::kF32, {s.batch, s.h_kv, rows});
    host.active = ref::make_host_tensor(DType::kI32, {s.batch, s.h_kv, rows});
    for (auto member : kMembers) {
      ref::HostTensor& t = host.*member;
      std::fill(t.bytes.begin(), t.bytes.end(), 0xff);
      dev.push_back(ref::upload(be, t));
    }
  }
  void set(ForwardParams& p) const {
    p.o = dev[0].view;
    p.lse = dev[1].view;
    p.routing.mask = dev[2].view;
    p.routing.tau = dev[3].view;
    p.routing.mu = dev[4].view;
    p.routing.active_chunks = dev[5].view;
  }
  // Host copies, once the caller's stream has finished.
  const ref::ForwardOutputs& read(Backend& be) {
    for (size_t i = 0; i < dev.size(); ++i) ref::download(be, dev[i], host.*kMembers[i]);
    return host;
  }
};

void require_same(const ref::ForwardOutputs& got, const ref::ForwardOutputs& want, const std::string& what) {
  const std::vector<std::string> diffs = ref::byte_differences(got, want);
  for (const std::string& d : diffs) MESSAGE(what << ": " << d);
  CHECK_MESSAGE(diffs.empty(), what);
}

}  // namespace

TEST_CASE("cuda forward without a workspace: the same bytes on a caller's stream, call after call, and captured") {
  Backend& be = cuda_backend();
  // Two sequences with a partial last chunk, GQA 4; then one query row per sequence over 2000 keys, which takes
  // the decode split, so that Stage 2's split partials live in the scratch as well.
  struct Shape {
    int64_t n_q, n_k;
  };
  for (const Shape sh : {Shape{300, 300}, Shape{1, 2000}}) {
    CAPTURE(sh.n_q);
    CAPTURE(sh.n_k);
    const ref::Problem pr = ref::make_problem(spec(2, sh.n_q, sh.n_k, 8, 2, 128, DType::kBF16, 4.0, 11));
    MethodParams m;
    ref::DeviceProblem dev = ref::upload_problem(be, pr);
    ForwardParams p = ref::forward_inputs(dev, m);

    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    p.stream = stream;
    be.synchronize(nullptr);  // the uploads (on the default stream) are done before the caller's stream reads them

    // The reference bytes: a call given a caller-owned workspace.
    Outputs with_ws(be, pr, m);
    with_ws.set(p);
    const size_t need = workspace_size(be, p);
    ref::DeviceBuffer ws(be, need);
    be.synchronize(nullptr);
    p.workspace = ws.data();
    p.workspace_bytes = need;
    forward(be, p);
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const ref::ForwardOutputs want = with_ws.read(be);
    p.workspace = nullptr;
    p.workspace_bytes = 0;

    // Three calls without a workspace, back to back on the stream, each into outputs of its own.
    std::vector<Outputs> runs;
    for (int r = 0; r < 3; ++r) runs.emplace_back(be, pr, m);
    be.synchronize(nullptr);
    for (Outputs& r : runs) {
      r.set(p);
      forward(be, p);
    }
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (size_t r = 0; r < runs.size(); ++r) require_same(runs[r].read(be), want, "call " + std::to_string(r));

    // Captured into a graph and replayed twice, the outputs poisoned before each replay.
    Outputs captured(be, pr, m);
    be.synchronize(nullptr);
    captured.set(p);
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    std::string error;
    try {
      forward(be, p);
    } catch (const std::exception& e) {
      error = e.what();
    }
    check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    REQUIRE_MESSAGE(error.empty(), error);
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (int replay = 0; replay < 2; ++replay) {
      for (const ref::DeviceTensor& t : captured.dev)
        check_cuda(cudaMemsetAsync(t.buffer.data(), 0xff, t.buffer.bytes(), stream), "cudaMemsetAsync");
      check_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      require_same(captured.read(be), want, "replay " + std::to_string(replay));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace dashattn::cuda_test
