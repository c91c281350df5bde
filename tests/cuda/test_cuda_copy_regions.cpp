// Backend::copy_regions on the CUDA backend (the Decoder's batched append): every region's bytes arrive, and nothing
// outside the regions is touched, for regions of any size and alignment and for more regions than one launch takes.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "cuda_test_support.h"

namespace dashattn::cuda_test {

TEST_CASE("cuda copy_regions: sizes, alignments and several launches") {
  Backend& be = cuda_backend();
  // Sizes 0 .. (a few pieces past a 4 KB block, one region of 1 MB); source and destination offsets 16-byte aligned
  // or not, so that both the vector and the byte path run; 300 regions, more than one launch's 128.
  const std::vector<size_t> sizes{0, 1, 15, 16, 17, 512, 4096 + 3, 1 << 20};
  struct Planned {
    size_t src, dst, bytes;
  };
  std::vector<Planned> plan;
  size_t src_end = 0, dst_end = 0;
  for (int i = 0; i < 300; ++i) {
    const size_t bytes = sizes[size_t(i) % sizes.size()] + (i % 3 == 2 ? 0 : size_t(i % 5));
    const size_t shift = i % 4 == 0 ? 0 : size_t(i % 7);  // breaks the 16-byte alignment of some regions
    plan.push_back({src_end + shift, dst_end + 2 * shift, bytes});
    src_end += shift + bytes + 32;
    dst_end += 2 * shift + bytes + 48;
  }
  std::vector<unsigned char> src(src_end), dst(dst_end, 0xa5);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  DeviceBuffer d_src(src.size()), d_dst(dst.size());
  be.copy(d_src.get(), src.data(), src.size(), CopyKind::kHostToDevice, nullptr);
  be.copy(d_dst.get(), dst.data(), dst.size(), CopyKind::kHostToDevice, nullptr);
  std::vector<CopyRegion> regions;
  for (const Planned& p : plan) {
    regions.push_back({static_cast<char*>(d_dst.get()) + p.dst, static_cast<const char*>(d_src.get()) + p.src,
                       p.bytes});
  }
  be.copy_regions(regions.data(), regions.size(), nullptr);
  std::vector<unsigned char> got(dst.size());
  be.copy(got.data(), d_dst.get(), got.size(), CopyKind::kDeviceToHost, nullptr);
  be.synchronize(nullptr);
  std::vector<unsigned char> want = dst;
  for (const Planned& p : plan)
    for (size_t j = 0; j < p.bytes; ++j) want[p.dst + j] = src[p.src + j];
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  CHECK(wrong == 0);
}

}  // namespace dashattn::cuda_test
