// Explicit registration of the backends compiled into this build. CMake defines DASHATTN_HAVE_<NAME> on this
// file only, for each backend it builds.
#include "dashattn/backend.h"

namespace dashattn {

#if defined(DASHATTN_HAVE_CPU)
void register_cpu_backend(Registry& registry);
#endif
#if defined(DASHATTN_HAVE_CUDA)
void register_cuda_backend(Registry& registry);
#endif
#if defined(DASHATTN_HAVE_HIP)
void register_hip_backend(Registry& registry);
#endif

void register_builtin_backends(Registry& registry) {
#if defined(DASHATTN_HAVE_CPU)
  register_cpu_backend(registry);
#endif
#if defined(DASHATTN_HAVE_CUDA)
  register_cuda_backend(registry);
#endif
#if defined(DASHATTN_HAVE_HIP)
  register_hip_backend(registry);
#endif
  (void)registry;
}

}  // namespace dashattn
