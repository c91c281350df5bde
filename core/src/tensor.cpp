#include "dashattn/tensor.h"

#include <sstream>

namespace dashattn {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string TensorView::shape_string() const {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < rank; ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  int64_t st = 1;
  for (int k = v.rank - 1; k >= 0; --k) {
    v.stride[k] = st;
    st *= v.shape[k];
  }
  return v;
}

TensorView from_bhnd(void* data, DType dtype, int64_t b, int64_t h, int64_t n, int64_t d, Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.rank = 4;
  v.shape = {b, n, h, d};
  v.stride = {h * n * d, d, n * d, 1};
  return v;
}

}  // namespace dashattn
