// The "cpu" backend: Highway SIMD kernels (dispatched to the best instruction set at run time) on oneTBB threads.
#include <tbb/info.h>

#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "backends/cpu/cpu_stages.h"
#include "backends/cpu/simd_kernels.h"
#include "dashattn/backend.h"
#include "dashattn/error.h"

namespace dashattn {
namespace {

constexpr std::align_val_t kHostAlignment{64};

// Name of the first tensor that is not host memory, or empty.
std::string first_non_host(std::initializer_list<std::pair<const char*, const TensorView*>> tensors) {
  for (const auto& [name, t] : tensors) {
    if (t->defined() && t->device.type != DeviceType::kCpu) {
      return std::string(name) + " is on " + device_type_name(t->device.type) + ":" + std::to_string(t->device.index);
    }
  }
  return {};
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  DeviceType device_type() const override { return DeviceType::kCpu; }
  int priority() const override { return 0; }

  Probe probe() const override {
    Probe p;
    p.available = true;
    try {
      p.reason = std::string("host CPU, Highway ") + cpu::simd_target_name() + ", " +
                 std::to_string(tbb::info::default_concurrency()) + " oneTBB threads";
    } catch (...) {
      p.reason = "host CPU";
    }
    return p;
  }

  std::string unsupported_reason(const ForwardParams& p) const override {
    const std::string where =
        first_non_host({{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}, {"lse", &p.lse},
                        {"summary_query", &p.summary_query}, {"summaries", &p.summaries},
                        {"routing.mask", &p.routing.mask}, {"routing.tau", &p.routing.tau},
                        {"routing.mu", &p.routing.mu}, {"routing.active_chunks", &p.routing.active_chunks}});
    if (!where.empty()) return "the cpu backend runs on host memory only, but " + where;
    return {};
  }

  void summarize(const SummarizeParams& p) override {
    require_host({{"k", &p.k}, {"summary_query", &p.summary_query}, {"summaries", &p.summaries}});
    cpu::summarize(p);
  }
  void route(const RouteParams& p) override {
    require_host({{"q", &p.q}, {"summaries", &p.summaries}, {"routing.mask", &p.routing.mask},
                  {"routing.tau", &p.routing.tau}, {"routing.mu", &p.routing.mu},
                  {"routing.active_chunks", &p.routing.active_chunks}});
    cpu::route(p);
  }
  void attend(const AttendParams& p) override {
    require_host({{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}, {"lse", &p.lse}, {"summaries", &p.summaries},
                  {"routing.mask", &p.routing.mask}, {"routing.tau", &p.routing.tau}, {"routing.mu", &p.routing.mu}});
    cpu::attend(p);
  }
  void dense_attention(const DenseParams& p) override {
    require_host({{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}, {"lse", &p.lse}});
    cpu::dense_attention(p);
  }

  void* allocate(size_t bytes) override {
    void* ptr = ::operator new(bytes == 0 ? 1 : bytes, kHostAlignment, std::nothrow);
    if (ptr == nullptr) {
      throw Error(ErrorCode::kOutOfMemory, "bytes",
                  "cpu backend: could not allocate " + std::to_string(bytes) + " bytes of host memory");
    }
    return ptr;
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr != nullptr) ::operator delete(ptr, kHostAlignment);
  }
  void copy(void* dst, const void* src, size_t bytes, CopyKind, void*) override {
    if (bytes != 0) std::memmove(dst, src, bytes);
  }
  void memset_zero(void* dst, size_t bytes, void*) override {
    if (bytes != 0) std::memset(dst, 0, bytes);
  }
  void synchronize(void*) override {}

 private:
  static void require_host(std::initializer_list<std::pair<const char*, const TensorView*>> tensors) {
    const std::string where = first_non_host(tensors);
    if (!where.empty()) throw Unsupported("cpu", where.substr(0, where.find(' ')), "host memory only, but " + where);
  }
};

}  // namespace

void register_cpu_backend(Registry& registry) { registry.add(std::make_unique<CpuBackend>()); }

}  // namespace dashattn
