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
  for (auto& b : backends_) {
    if (std::string(b->name()) == backend->name()) {
      b = std::move(backend);
      return;
    }
  }
  backends_.push_back(std::move(backend));
}

Backend* Registry::find(const std::string& name) const {
  for (const auto& b : backends_) {
    if (name == b->name()) return b.get();
  }
  return nullptr;
}

std::vector<Backend*> Registry::all() const {
  std::vector<Backend*> out;
  for (const auto& b : backends_) out.push_back(b.get());
  return out;
}

Backend* Registry::best_for(DeviceType device) const {
  Backend* best = nullptr;
  for (const auto& b : backends_) {
    if (b->device_type() != device || !b->probe().available) continue;
    if (!best || b->priority() > best->priority()) best = b.get();
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
    for (const auto& b : backends_) {
      if (b->probe().available && (!best || b->priority() > best->priority())) best = b.get();
    }
    if (!best) throw BackendUnavailable("auto", "no backend is available in this build");
    return *best;
  }
  Backend* b = find(name);
  if (!b) {
    throw BackendUnavailable(name, std::string("not compiled into this build (compiled: ") +
                                       DASHATTN_COMPILED_BACKENDS + "; names: cpu, cuda, hip, auto)");
  }
  const Probe pr = b->probe();
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
