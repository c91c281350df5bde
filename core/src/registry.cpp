#include <cstdlib>
#include <mutex>

#include "dashattn/backend.h"
#include "dashattn/error.h"
#include "dashattn/version.h"

namespace dashattn {

Registry& Registry::instance() {
  static Registry* registry = [] {
    auto* r = new Registry();  // never destroyed: backends may be used from static destructors of callers
    register_builtin_backends(*r);
    return r;
  }();
  return *registry;
}

void Registry::add(std::unique_ptr<Backend> backend) {
  std::lock_guard<std::mutex> lock(probe_mutex_);
  for (auto& e : backends_) {
    if (std::string(e.backend->name()) == backend->name()) {
      e.backend = std::move(backend);
      e.probe.reset();
      return;
    }
  }
  backends_.push_back(Entry{std::move(backend), nullptr});
}

Backend* Registry::find(const std::string& name) const {
  for (const auto& e : backends_) {
    if (name == e.backend->name()) return e.backend.get();
  }
  return nullptr;
}

std::vector<Backend*> Registry::all() const {
  std::vector<Backend*> out;
  for (const auto& e : backends_) out.push_back(e.backend.get());
  return out;
}

Probe Registry::probe(const Backend& backend) const {
  std::lock_guard<std::mutex> lock(probe_mutex_);
  for (const auto& e : backends_) {
    if (e.backend.get() != &backend) continue;
    if (!e.probe) e.probe = std::make_shared<const Probe>(backend.probe());
    return *e.probe;
  }
  return backend.probe();  // not registered here: nothing to cache
}

Backend* Registry::best_for(DeviceType device) const {
  Backend* best = nullptr;
  for (const auto& e : backends_) {
    Backend* b = e.backend.get();
    if (b->device_type() != device || !probe(*b).available) continue;
    if (!best || b->priority() > best->priority()) best = b;
  }
  return best;
}

Backend& Registry::select(const std::string& requested) const {
  std::string name = requested;
  if (name.empty()) {
    const char* env = std::getenv("DASHATTN_BACKEND");
    name = (env && *env) ? env : "auto";
  }
  if (name == "auto") {
    Backend* best = nullptr;
    for (const auto& e : backends_) {
      Backend* b = e.backend.get();
      if (probe(*b).available && (!best || b->priority() > best->priority())) best = b;
    }
    if (!best) throw BackendUnavailable("auto", "no backend is available in this build");
    return *best;
  }
  Backend* b = find(name);
  if (!b) {
    throw BackendUnavailable(name, std::string("not compiled into this build (compiled: ") +
                                       DASHATTN_COMPILED_BACKENDS + "; names: cpu, cuda, hip, auto)");
  }
  const Probe pr = probe(*b);
  if (!pr.available) throw BackendUnavailable(name, pr.reason);
  return *b;
}

std::vector<std::string> compiled_backends() {
  std::vector<std::string> out;
  std::string all = DASHATTN_COMPILED_BACKENDS;
  size_t start = 0;
  while (start < all.size()) {
    size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    if (comma > start) out.push_back(all.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace dashattn
