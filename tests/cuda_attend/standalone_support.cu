// What the backend front end (cuda_backend.cu) provides to the kernels, for the nvcc-only standalone build.
#include <string>

#include "cuda_internal.cuh"

namespace dashattn::cuda {
bool head_dim_instantiated(int64_t d) { return d == 64 || d == 128 || d == 256; }
std::string instantiated_head_dims() { return "64, 128, 256"; }
}  // namespace dashattn::cuda
