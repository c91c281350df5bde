// The CUDA backend's front end: availability probe, the support check shared by every entry point, device memory
// for the convenience API, and the stage entry points that hand normalized params to the launchers.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "attend_launch.cuh"
#include "bias_lists.cuh"
#include "copy_regions.cuh"
#include "cuda_internal.cuh"
#include "dashattn/backend.h"
#include "dashattn/error.h"
#include "dashattn/validate.h"

namespace dashattn {
namespace cuda {

namespace {

constexpr int kInstantiatedHeadDims[] = {DASHATTN_CUDA_HEAD_DIM_ARRAY};
constexpr int kMaxGroup = 128;  // Stage 1 keeps all query heads of one KV head in one block

bool chunk_supported(int c) { return c == 16 || c == 32 || c == 64 || c == 128; }

// Compiled like every kernel of the backend (the same targets), so that asking for its attributes tells whether this
// build holds code the current device can run: machine code runs only on its own major architecture (sm_80 code on
// sm_86 / sm_89, not on sm_90 or sm_100), and the default build carries no PTX. Without the check probe() called such
// a device available and the first launch failed with "no kernel image is available".
__global__ void image_probe_kernel() {}

// Makes `index` the current device for the scope and restores the previous one afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != index) {
      DASHATTN_CUDA_CHECK(cudaSetDevice(index));
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

std::string check_tensor(const char* name, const TensorView& t) {
  if (!t.defined()) return {};
  if (t.device.type != DeviceType::kCuda) {
    return std::string(name) + " must be CUDA device memory (device type cuda), got " +
           device_type_name(t.device.type);
  }
  return {};
}

// The K/V and summary tiles are copied in 16-byte pieces: base pointers must be 16-byte aligned and every
// non-innermost stride a multiple of 8 elements (16 bytes of bf16/f16).
std::string check_alignment(const char* name, const TensorView& t) {
  if (!t.defined()) return {};
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return std::string(name) + " must start at a 16-byte aligned address on the CUDA backend";
  }
  for (int i = 0; i + 1 < t.rank; ++i) {
    if (t.shape[i] > 1 && t.stride[i] % 8 != 0) {
      return std::string(name) + ".stride[" + std::to_string(i) + "] must be a multiple of 8 elements on the CUDA " +
             "backend, got " + std::to_string(t.stride[i]);
    }
  }
  return {};
}

// An allocation's status: out of memory as the typed error naming the bytes, anything else as a CUDA error.
void check_allocation(cudaError_t err, const char* call, size_t bytes, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  if (err == cudaErrorMemoryAllocation) {
    throw Error(ErrorCode::kOutOfMemory, "bytes",
                "out of CUDA device memory allocating " + std::to_string(bytes) + " bytes" + what);
  }
  throw_cuda_error(err, call, __FILE__, __LINE__);
}

constexpr int64_t kMaxGridY = 65535;  // Stage 2 launches one grid row per (sequence, KV head)

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    for (auto& w : dense_workspace_) {
      if (w.ptr) cudaFree(w.ptr);
    }
    for (cudaMemPool_t pool : scratch_pools_) {
      if (pool) cudaMemPoolDestroy(pool);
    }
    for (auto& b : beside_) {
      if (b.stream) cudaStreamDestroy(b.stream);
      if (b.fork) cudaEventDestroy(b.fork);
      if (b.join) cudaEventDestroy(b.join);
    }
  }

  const char* name() const override { return "cuda"; }
  DeviceType device_type() const override { return DeviceType::kCuda; }
  int priority() const override { return 10; }

  Probe probe() const override {
    Probe p;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
      p.reason = std::string("no CUDA device: ") + cudaGetErrorString(err);
      return p;
    }
    if (count == 0) {
      p.reason = "no CUDA device: cudaGetDeviceCount found none";
      return p;
    }
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      cudaGetLastError();
      p.reason = "no CUDA device: cannot read the properties of device " + std::to_string(dev);
      return p;
    }
    if (prop.major < 8) {
      p.reason = std::string("no supported CUDA device: ") + prop.name + " has compute capability " +
                 std::to_string(prop.major) + "." + std::to_string(prop.minor) + ", the CUDA backend needs 8.0+";
      return p;
    }
    const std::string sm = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
    cudaFuncAttributes image{};
    const cudaError_t image_err = cudaFuncGetAttributes(&image, image_probe_kernel);
    if (image_err != cudaSuccess) {
      cudaGetLastError();
      p.reason = std::string("no supported CUDA device: ") + prop.name + " (" + sm +
                 ") has no code in this build, which was compiled for " DASHATTN_CUDA_ARCH_LIST " (" +
                 cudaGetErrorString(image_err) + "); rebuild with -DDASHATTN_CUDA_ARCHITECTURES naming its architecture";
      return p;
    }
    p.available = true;
    p.reason = std::string(prop.name) + " (" + sm + ", " +
               std::to_string(prop.multiProcessorCount) + " SMs, " +
               std::to_string(prop.totalGlobalMem >> 20) + " MiB), " + std::to_string(count) + " device(s)";
    return p;
  }

  std::string unsupported_reason(const ForwardParams& p) const override {
    const TensorView* tensors[] = {&p.q, &p.k, &p.v, &p.o, &p.lse, &p.summary_query, &p.summaries,
                                   &p.routing.mask, &p.routing.tau, &p.routing.mu, &p.routing.active_chunks};
    const char* names[] = {"q", "k", "v", "o", "lse", "summary_query", "summaries",
                           "routing.mask", "routing.tau", "routing.mu", "routing.active_chunks"};
    for (size_t i = 0; i < sizeof(tensors) / sizeof(tensors[0]); ++i) {
      std::string r = check_tensor(names[i], *tensors[i]);
      if (!r.empty()) return r;
    }
    if (p.q.dtype != DType::kBF16 && p.q.dtype != DType::kF16) {
      return std::string("q, k and v must be bf16 or f16 on the CUDA backend (f32 inputs are not supported: cast "
                         "them to bf16 or f16), got ") + dtype_name(p.q.dtype);
    }
    if (p.k.defined() && p.k.dtype != p.q.dtype) {
      return std::string("k (or the summaries) must have the dtype of q (") + dtype_name(p.q.dtype) + "), got " +
             dtype_name(p.k.dtype);
    }
    const int64_t d = p.q.rank > 0 ? p.q.shape[p.q.rank - 1] : 0;
    if (!head_dim_instantiated(d)) {
      return "head dim " + std::to_string(d) + " is not compiled into the CUDA backend (instantiated: " +
             instantiated_head_dims() + "; see DASHATTN_HEAD_DIMS)";
    }
    if (!chunk_supported(p.method.chunk_size)) {
      return "chunk size " + std::to_string(p.method.chunk_size) +
             " is not supported by the CUDA backend (16, 32, 64 or 128)";
    }
    const TensorView* aligned[] = {&p.q, &p.k, &p.v, &p.o, &p.summaries};
    const char* aligned_names[] = {"q", "k", "v", "o", "summaries"};
    for (size_t i = 0; i < sizeof(aligned) / sizeof(aligned[0]); ++i) {
      std::string r = check_alignment(aligned_names[i], *aligned[i]);
      if (!r.empty()) return r;
    }
    if (p.q.rank == 4 && p.k.defined() && p.k.rank == 4) {
      const int64_t seqs = p.batch.is_varlen() ? p.batch.num_seqs : p.q.shape[0];
      if (seqs * p.k.shape[2] > kMaxGridY) {
        return "batch x KV heads = " + std::to_string(seqs * p.k.shape[2]) + " exceeds the CUDA backend's limit of " +
               std::to_string(kMaxGridY);
      }
    }
    if (p.q.rank >= 3 && p.k.defined() && p.k.rank >= 3) {
      const int64_t h_q = p.q.shape[p.q.rank - 2], h_kv = p.k.shape[p.k.rank - 2];
      if (h_kv > 0 && h_q / h_kv > kMaxGroup) {
        return "GQA group size " + std::to_string(h_q / h_kv) + " exceeds the CUDA backend's limit of " +
               std::to_string(kMaxGroup) + " query heads per KV head";
      }
    }
    return {};
  }

  void summarize(const SummarizeParams& p) override {
    DeviceGuard guard(p.k.device.index);
    launch_summarize(p, as_stream(p.stream));
  }

  void route(const RouteParams& p) override {
    DeviceGuard guard(p.q.device.index);
    launch_route(p, route_shape(p), as_stream(p.stream));
  }

  // Stage 0 on the side stream beside Stage 1 (see beside()).
  void summarize_and_route(const SummarizeParams& sp, const RouteParams& rp) override {
    const int device = rp.q.device.index;
    DeviceGuard guard(device);
    if (device < 0 || device >= kMaxDevices) {
      Backend::summarize_and_route(sp, rp);
      return;
    }
    beside(device, as_stream(rp.stream), [&](cudaStream_t side) { launch_summarize(sp, side); },
           [&]() { launch_route(rp, route_shape(rp), as_stream(rp.stream)); });
  }

  void attend(const AttendParams& p) override {
    DeviceGuard guard(p.q.device.index);
    launch_attend(p, attend_shape(p), as_stream(p.stream));
  }

  // The core's forward composes the stages over its workspace plan; this backend only adds the device guard and
  // its Stage-2 split-KV partials, carved from the caller's workspace (decode splits over the KV axis without
  // allocating in the launch path).
  void forward(const ForwardParams& p) override {
    DeviceGuard guard(p.q.device.index);
    Backend::forward(p);
  }

  void dense_attention(const DenseParams& p) override {
    DeviceGuard guard(p.q.device.index);
    ForwardParams f;
    f.q = p.q;
    f.k = p.k;
    f.v = p.v;
    f.batch = p.batch;
    f.method.scale = p.scale;
    const ProblemShape s = forward_shape(f);
    // The dense baseline is a convenience entry point without a workspace argument; it keeps a grown-on-demand
    // split-KV buffer per device so decode-shaped baselines split like the sparse path instead of under-filling.
    const size_t bytes = attend_workspace_bytes(s, /*dense=*/true);
    void* ws = bytes > 0 ? dense_workspace(p.q.device.index, bytes) : nullptr;
    launch_dense(p, s, ws, bytes, as_stream(p.stream));
  }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    check_allocation(cudaMalloc(&ptr, bytes), "cudaMalloc", bytes, "");
    return ptr;
  }

  void deallocate(void* ptr) noexcept override {
    if (ptr) cudaFree(ptr);
  }

  // forward() without a workspace takes it from a stream-ordered pool of the current device (forward()'s guard
  // has made the tensors' device current): no driver allocation and no wait for the GPU per call, and under
  // stream capture the two become graph memory nodes. A device without memory pools keeps the default (allocate,
  // wait, free).
  void* acquire_scratch(size_t bytes, void* stream) override {
    if (bytes == 0) return nullptr;
    int device = 0;
    DASHATTN_CUDA_CHECK(cudaGetDevice(&device));
    cudaMemPool_t pool = scratch_pool(device);
    if (pool == nullptr) return Backend::acquire_scratch(bytes, stream);
    void* ptr = nullptr;
    check_allocation(cudaMallocFromPoolAsync(&ptr, bytes, pool, as_stream(stream)), "cudaMallocFromPoolAsync", bytes,
                     " of forward()'s workspace");
    return ptr;
  }

  void release_scratch(void* ptr, void* stream) noexcept override {
    if (ptr == nullptr) return;
    // Called in the same forward() as acquire_scratch, on the same current device; a pool, once made, stays, so
    // its presence tells which way the bytes came.
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
    bool pooled = false;
    if (device >= 0 && device < kMaxDevices) {
      std::lock_guard<std::mutex> lock(mutex_);
      pooled = scratch_pools_[device] != nullptr;
    }
    if (pooled) {
      if (cudaFreeAsync(ptr, as_stream(stream)) != cudaSuccess) cudaGetLastError();
      return;
    }
    Backend::release_scratch(ptr, stream);
  }

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) override {
    if (bytes == 0) return;
    cudaMemcpyKind k = cudaMemcpyDeviceToDevice;
    if (kind == CopyKind::kHostToDevice) k = cudaMemcpyHostToDevice;
    if (kind == CopyKind::kDeviceToHost) k = cudaMemcpyDeviceToHost;
    DASHATTN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, as_stream(stream)));
  }

  void memset_zero(void* dst, size_t bytes, void* stream) override {
    if (bytes == 0) return;
    DASHATTN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, as_stream(stream)));
  }

  void synchronize(void* stream) override { DASHATTN_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream))); }

  // One launch for all regions, on the device that holds the first destination (the regions of one call, a
  // Decoder's cache rows, lie on one device).
  void copy_regions(const CopyRegion* regions, size_t count, void* stream) override {
    if (count == 0) return;
    cudaPointerAttributes attr{};
    DASHATTN_CUDA_CHECK(cudaPointerGetAttributes(&attr, regions[0].dst));
    DeviceGuard guard(attr.type == cudaMemoryTypeDevice ? attr.device : 0);
    launch_copy_regions(regions, count, as_stream(stream));
  }

 protected:
  // The bias lists Stage 1 hands to Stage 2 (bias_lists.cuh), then Stage 2's split-KV partials. Only for the
  // shapes whose Stage 2 reads them (bias_lists_read).
  static int64_t bias_list_rows(const ProblemShape& s) {
    // Rows as forward()'s workspace carves μ: [b, h_kv, rows_q], one b for a packed batch (whose rows_q, the total,
    // exceeds n_q, the longest; launches check the μ view against the rows anyway).
    const bool read = bias_lists_read(s.d, s.group, s.chunk, s.n_k);
    return read ? (s.rows_q == s.n_q ? s.batch : 1) * s.h_kv * s.rows_q : 0;
  }
  size_t attend_scratch_bytes(const ProblemShape& s) const override {
    return bias_lists_bytes(bias_list_rows(s)) + attend_workspace_bytes(s);
  }
  // The lists at the scratch's front, when the scratch holds them (forward() sized it by attend_scratch_bytes).
  static BiasLists scratch_lists(const ProblemShape& s, void* scratch, size_t bytes) {
    const int64_t rows = bias_list_rows(s);
    return rows > 0 && bytes >= bias_lists_bytes(rows) ? carve_bias_lists(scratch, rows) : BiasLists{};
  }
  void route_with_scratch(const RouteParams& p, const ProblemShape& s, void* scratch, size_t bytes) override {
    const BiasLists lists = scratch_lists(s, scratch, bytes);
    launch_route(p, route_shape(p), as_stream(p.stream), &lists);
  }

  // A decode step's Stage 0 (one small kernel, latency-bound) on a second stream beside Stage 2 (see beside()).
  // Forked before Stage 1, its CTAs took multiprocessors that Stage 1's thread-block clusters wait for (a 64K step
  // on an H100: 82.8 → 77.4 us with the fork after Stage 1); Stage 2's grid leaves room beside it.
  void summarize_beside(const SummarizeParams& sp, const std::function<void()>& stage1,
                        const std::function<void()>& stage2) override {
    // Called from forward(), whose guard has made the tensors' device current.
    const int device = sp.k.device.index;
    if (device < 0 || device >= kMaxDevices) {
      Backend::summarize_beside(sp, stage1, stage2);
      return;
    }
    stage1();
    beside(device, as_stream(sp.stream), [&](cudaStream_t side) { launch_summarize(sp, side); }, stage2);
  }

 private:
  // side(side stream) runs on a backend-owned second stream beside main_work on `main`: forked from `main` by an
  // event and joined back the same way, so the work still orders as one unit on that stream and stays capturable
  // in a CUDA graph (the fork and join become graph edges). main_work is enqueued first: enqueued after the side
  // kernel, a decode Stage 1 ran after Stage 0 instead of beside it (64K on an H100: 29.3 us against 22.5 with
  // Stage 1 first, Stage 1 alone 22.9), and a step's Stage 2 lost 1-6 us the same way (perf-log.md, fifteenth
  // pass).
  template <typename Side, typename Main>
  void beside(int device, cudaStream_t main, Side&& side, Main&& main_work) {
    // One fork/join at a time per device: the side stream and its events are shared by the callers' streams.
    std::lock_guard<std::mutex> lock(beside_mutex_[device]);
    Beside& b = beside_[device];
    if (b.stream == nullptr) {
      DASHATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
      DASHATTN_CUDA_CHECK(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
      DASHATTN_CUDA_CHECK(cudaEventCreateWithFlags(&b.join, cudaEventDisableTiming));
    }
    DASHATTN_CUDA_CHECK(cudaEventRecord(b.fork, main));
    DASHATTN_CUDA_CHECK(cudaStreamWaitEvent(b.stream, b.fork, 0));
    auto join = [&]() {
      cudaError_t err = cudaEventRecord(b.join, b.stream);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(main, b.join, 0);
      return err;
    };
    try {
      main_work();
      side(b.stream);
    } catch (...) {
      join();  // whatever happened, the side stream is joined back: a capture with an unjoined stream cannot end
      throw;
    }
    DASHATTN_CUDA_CHECK(join());
  }

 protected:
  void attend_with_scratch(const AttendParams& p, const ProblemShape& s, void* scratch, size_t bytes) override {
    const BiasLists lists = scratch_lists(s, scratch, bytes);
    const size_t list_bytes = lists.on() ? bias_lists_bytes(lists.rows) : 0;
    launch_attend(p, s, lists.on() ? static_cast<char*>(scratch) + list_bytes : scratch, bytes - list_bytes,
                  as_stream(p.stream), &lists);
  }

 private:
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  void* dense_workspace(int device, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device < 0 || device >= static_cast<int>(sizeof(dense_workspace_) / sizeof(dense_workspace_[0]))) {
      throw Unsupported("cuda", "q.device", "device index " + std::to_string(device) + " (at most 15)");
    }
    Scratch& w = dense_workspace_[device];
    if (w.bytes < bytes) {
      // A stream may still read the old buffer: wait for the device before replacing it (rare: it only grows).
      DASHATTN_CUDA_CHECK(cudaDeviceSynchronize());
      if (w.ptr) cudaFree(w.ptr);
      w.ptr = allocate(bytes);
      w.bytes = bytes;
    }
    return w.ptr;
  }

  // The pool behind acquire_scratch, made on first use: it keeps what it has handed out once (its release
  // threshold is unbounded, as a framework's caching allocator keeps its blocks), so steady calls reuse the same
  // bytes; it is given back to the driver when the backend is destroyed. Null where the device has no pools.
  cudaMemPool_t scratch_pool(int device) {
    if (device < 0 || device >= kMaxDevices) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!scratch_pool_probed_[device]) {
      scratch_pool_probed_[device] = true;
      int supported = 0;
      if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess ||
          supported == 0) {
        cudaGetLastError();
        return nullptr;
      }
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.handleTypes = cudaMemHandleTypeNone;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      cudaMemPool_t pool = nullptr;
      DASHATTN_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
      uint64_t keep = UINT64_MAX;
      DASHATTN_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
      scratch_pools_[device] = pool;
    }
    return scratch_pools_[device];
  }

  static constexpr int kMaxDevices = 16;
  struct Beside {
    cudaStream_t stream = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
  };

  std::mutex mutex_;
  Scratch dense_workspace_[kMaxDevices];
  cudaMemPool_t scratch_pools_[kMaxDevices] = {};
  bool scratch_pool_probed_[kMaxDevices] = {};
  std::mutex beside_mutex_[kMaxDevices];
  Beside beside_[kMaxDevices];
};

}  // namespace

bool head_dim_instantiated(int64_t d) {
  for (int h : kInstantiatedHeadDims) {
    if (h == d) return true;
  }
  return false;
}

std::string instantiated_head_dims() {
  std::string s;
  for (int h : kInstantiatedHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(h);
  return s;
}

}  // namespace cuda

void register_cuda_backend(Registry& registry) { registry.add(std::make_unique<cuda::CudaBackend>()); }

}  // namespace dashattn
