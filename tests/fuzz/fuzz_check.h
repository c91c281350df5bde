// Shared by the fuzz targets: whatever a reader accepts must survive a write and a second read unchanged.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "dashattn/io/tensor_file.h"

namespace dashattn::fuzz {

[[noreturn]] inline void round_trip_failed(const char* what) {
  std::fprintf(stderr, "round trip changed the data: %s\n", what);
  std::abort();
}

// Order-insensitive: the safetensors writer stores tensors by element size.
inline void check_same_tensors(const io::TensorFile& a, const io::TensorFile& b) {
  if (a.size() != b.size()) round_trip_failed("tensor count");
  if (a.metadata != b.metadata) round_trip_failed("metadata");
  for (const io::Tensor& t : a) {
    const io::Tensor* u = b.find(t.name());
    if (u == nullptr) round_trip_failed("tensor missing");
    if (*u != t) round_trip_failed("tensor differs");
    if (t.rank() <= kMaxRank && t.view().numel() != t.numel()) round_trip_failed("view size");
  }
}

}  // namespace dashattn::fuzz
