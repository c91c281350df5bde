// The backend interface and the registry that selects one at run time.
//
// A backend implements the three stages (and dense attention for baselines) on one kind of device. Backends are
// registered explicitly by register_builtin_backends() (static self-registering objects vanish from static
// libraries), looked up by name, "auto" (best available) or the DASHATTN_BACKEND environment variable.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dashattn/params.h"
#include "dashattn/validate.h"

namespace dashattn {

struct Probe {
  bool available = false;
  std::string reason;  // why not, when unavailable; a device description when available
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// One region of a batched device-to-device copy (Backend::copy_regions).
struct CopyRegion {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;          // "cpu", "cuda", "hip"
  virtual DeviceType device_type() const = 0;
  virtual int priority() const = 0;               // higher wins under "auto"
  virtual Probe probe() const = 0;                // never throws, never aborts

  // Empty when the backend can run these (already validated) params, else what it cannot do. The same function
  // guards every entry point, so selection and execution cannot disagree.
  virtual std::string unsupported_reason(const ForwardParams& p) const = 0;

  virtual void summarize(const SummarizeParams& p) = 0;
  virtual void route(const RouteParams& p) = 0;
  virtual void attend(const AttendParams& p) = 0;
  virtual void dense_attention(const DenseParams& p) = 0;
  // Stage 0 (sp) and Stage 1 (rp) of one step, where no query of rp routes a chunk that sp writes (checked by the
  // free function summarize_and_route): a decode step's new chunk is its own query's diagonal chunk. A GPU backend
  // may run them side by side; the default runs summarize, then route.
  virtual void summarize_and_route(const SummarizeParams& sp, const RouteParams& rp);

  // Whole forward. The default composes the three stages over a workspace carved by plan_workspace(), followed
  // by the backend's Stage-2 scratch (attend_scratch_bytes); workspace_size() is the sum of the two.
  virtual void forward(const ForwardParams& p);
  virtual size_t workspace_size(const ForwardParams& p) const;

  // Memory on the backend's device, for the convenience API (Decoder, CLI, bindings). Kernels never allocate.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
  // Scratch for one forward() that was given no workspace, in the order of `stream`: work enqueued on it after
  // acquire_scratch may use the bytes, and release_scratch (after the call's work is enqueued) gives them back.
  // The default allocates, then waits for the stream before freeing (a host synchronization per call); a GPU
  // backend hands them out from a stream-ordered pool instead, so that the call neither waits nor allocates.
  virtual void* acquire_scratch(size_t bytes, void* stream);
  virtual void release_scratch(void* ptr, void* stream) noexcept;
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) = 0;
  virtual void memset_zero(void* dst, size_t bytes, void* stream) = 0;
  virtual void synchronize(void* stream) = 0;
  // Device-to-device copies of many small regions that do not overlap (a decode step's new keys and values into
  // their cache rows or pages: two per sequence, or per page run). The default calls copy() once per region; a GPU
  // backend copies them in one launch, where one copy call per region cost more than the step's kernels.
  virtual void copy_regions(const CopyRegion* regions, size_t count, void* stream);

 protected:
  // Scratch Stages 1 and 2 may use inside forward() (a GPU backend's split-KV partials, and what its Stage 1
  // hands to its Stage 2 beside the routing outputs), so that the whole forward runs from the caller's workspace
  // without allocating. Both stages of one forward() get the same bytes, Stage 1 first. The default needs none
  // and calls route() and attend().
  virtual size_t attend_scratch_bytes(const ProblemShape& s) const;
  virtual void route_with_scratch(const RouteParams& p, const ProblemShape& s, void* scratch, size_t bytes);
  virtual void attend_with_scratch(const AttendParams& p, const ProblemShape& s, void* scratch, size_t bytes);
  // Stage 0 (sp), Stage 1 (`stage1`) and Stage 2 (`stage2`), called by forward() when neither later stage reads
  // what Stage 0 writes: a decode step's new chunk is its own query's diagonal chunk, which routing never scores
  // and Stage 2 reads only as keys. A GPU backend may run Stage 0 beside the other stages; by the time this
  // returns, all of it is ordered before any later work on the caller's stream. The default runs them in order.
  virtual void summarize_beside(const SummarizeParams& sp, const std::function<void()>& stage1,
                                const std::function<void()>& stage2);
};

class Registry {
 public:
  // The process-wide registry with the built-in backends registered.
  static Registry& instance();

  void add(std::unique_ptr<Backend> backend);  // replaces a backend of the same name
  Backend* find(const std::string& name) const;  // nullptr when unknown
  std::vector<Backend*> all() const;            // in registration order

  // "cpu", "cuda", "hip" or "auto"; an empty name reads DASHATTN_BACKEND, then "auto". Throws
  // BackendUnavailable naming the backend and the probe's reason.
  Backend& select(const std::string& name = "") const;
  // The available backend of highest priority whose device matches, or nullptr.
  Backend* best_for(DeviceType device) const;

  // The backend's probe, taken once per process and cached: device availability does not change while a program
  // runs, and a GPU probe (device properties) costs more than a decode step, which selects a backend per call.
  Probe probe(const Backend& backend) const;

 private:
  struct Entry {
    std::unique_ptr<Backend> backend;
    mutable std::shared_ptr<const Probe> probe;  // filled on first use
  };
  std::vector<Entry> backends_;
  mutable std::mutex probe_mutex_;
};

// Registers the backends compiled into this build (called once by Registry::instance()).
void register_builtin_backends(Registry& registry);

// Names of the backends compiled into this build, e.g. {"cpu", "cuda"}.
std::vector<std::string> compiled_backends();

}  // namespace dashattn
