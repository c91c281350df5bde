#include "decode/decode_rows.h"

#include <cstring>

namespace dashattn::decode_test {

ref::HostTensor slice_rows(const ref::HostTensor& t, int64_t begin, int64_t count) {
  const TensorView& v = t.view;
  ref::HostTensor out = ref::make_host_tensor(v.dtype, {v.shape[0], count, v.shape[2], v.shape[3]});
  const int64_t es = dtype_size(v.dtype);
  for (int64_t b = 0; b < v.shape[0]; ++b)
    for (int64_t i = 0; i < count; ++i)
      for (int64_t h = 0; h < v.shape[2]; ++h)
        std::memcpy(out.bytes.data() + out.view.offset(b, i, h, 0) * es,
                    t.bytes.data() + v.offset(b, begin + i, h, 0) * es, static_cast<size_t>(v.shape[3] * es));
  return out;
}

}  // namespace dashattn::decode_test
