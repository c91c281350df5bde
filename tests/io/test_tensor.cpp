// The owning Tensor and the TensorFile container.
#include <algorithm>
#include <cstring>

#include "io/io_test_support.h"

using dashattn::DType;
using dashattn::io::Tensor;
using dashattn::io::TensorFile;

TEST_CASE("Tensor allocates zeroed row-major storage and views it contiguously") {
  Tensor t("q", DType::kBF16, {2, 3, 4});
  CHECK(t.numel() == 24);
  CHECK(t.nbytes() == 48);
  CHECK(std::all_of(t.bytes().begin(), t.bytes().end(), [](uint8_t b) { return b == 0; }));
  const dashattn::TensorView v = t.view();
  CHECK(v.data == t.data());
  CHECK(v.dtype == DType::kBF16);
  CHECK(v.device.type == dashattn::DeviceType::kCpu);
  CHECK(v.rank == 3);
  CHECK(v.shape[0] == 2);
  CHECK(v.shape[2] == 4);
  CHECK(v.stride[0] == 12);
  CHECK(v.stride[1] == 4);
  CHECK(v.stride[2] == 1);
}

TEST_CASE("Tensor of rank 0 is one element; empty tensors view a null pointer") {
  Tensor scalar("s", DType::kF64, {});
  CHECK(scalar.numel() == 1);
  CHECK(scalar.nbytes() == 8);
  CHECK(scalar.view().rank == 0);
  CHECK(scalar.view().data != nullptr);
  Tensor empty("e", DType::kF32, {3, 0});
  CHECK(empty.numel() == 0);
  CHECK(empty.view().data == nullptr);
}

TEST_CASE("Tensor rejects negative and overflowing shapes and mismatched byte counts") {
  CHECK_THROWS_AS(Tensor("x", DType::kF32, {2, -1}), dashattn::InvalidArgument);
  CHECK_THROWS_AS(Tensor("x", DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}), dashattn::InvalidArgument);
  CHECK_THROWS_AS(Tensor("x", DType::kF64, {int64_t{1} << 61}), dashattn::InvalidArgument);
  CHECK_THROWS_AS(Tensor("x", DType::kU8, {0, int64_t{1} << 40, int64_t{1} << 40}), dashattn::InvalidArgument);
  CHECK_THROWS_AS(Tensor("x", DType::kF32, {2, 2}, std::vector<uint8_t>(15)), dashattn::InvalidArgument);
  CHECK_NOTHROW(Tensor("x", DType::kF32, {2, 2}, std::vector<uint8_t>(16)));
}

TEST_CASE("Tensor::view refuses ranks above 4, naming the tensor") {
  Tensor t("deep", DType::kU8, {1, 2, 1, 2, 1});
  try {
    (void)t.view();
    FAIL("rank 5 must not be viewable");
  } catch (const dashattn::InvalidArgument& e) {
    CHECK(e.argument() == "deep");
    CHECK(std::string(e.what()).find("rank 5") != std::string::npos);
  }
}

TEST_CASE("Tensor::from_view copies strided views into row-major order") {
  // A [2, 3] f32 matrix stored transposed: element (i, j) lives at j * 2 + i.
  float storage[6] = {0, 3, 1, 4, 2, 5};
  dashattn::TensorView v;
  v.data = storage;
  v.dtype = DType::kF32;
  v.rank = 2;
  v.shape = {2, 3, 0, 0};
  v.stride = {1, 2, 0, 0};
  const Tensor t = Tensor::from_view("t", v);
  REQUIRE(t.shape() == std::vector<int64_t>{2, 3});
  float out[6];
  std::memcpy(out, t.data(), sizeof out);
  for (int i = 0; i < 6; ++i) CHECK(out[i] == static_cast<float>(i));

  // A [b, n, h, d] view of a [b, h, n, d] buffer (from_bhnd) comes out in [b, n, h, d] order.
  uint16_t bhnd[2 * 3 * 4] = {};
  for (int i = 0; i < 24; ++i) bhnd[i] = static_cast<uint16_t>(i);
  const Tensor p = Tensor::from_view("p", dashattn::from_bhnd(bhnd, DType::kF16, 1, 2, 3, 4));
  REQUIRE(p.shape() == std::vector<int64_t>{1, 3, 2, 4});
  const auto* got = reinterpret_cast<const uint16_t*>(p.data());
  for (int n = 0; n < 3; ++n)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < 4; ++d) CHECK(got[(n * 2 + h) * 4 + d] == bhnd[(h * 3 + n) * 4 + d]);

  dashattn::TensorView gpu = v;
  gpu.device.type = dashattn::DeviceType::kCuda;
  CHECK_THROWS_AS(Tensor::from_view("g", gpu), dashattn::InvalidArgument);
}

TEST_CASE("TensorFile keeps insertion order, unique names, and reports missing tensors") {
  TensorFile f;
  f.add(io_test::make_tensor("k", DType::kF32, {2}));
  f.add(io_test::make_tensor("q", DType::kF32, {2}));
  CHECK_THROWS_AS(f.add(io_test::make_tensor("q", DType::kF16, {1})), dashattn::InvalidArgument);
  REQUIRE(f.size() == 2);
  CHECK(f.tensors()[0].name() == "k");
  CHECK(f.tensors()[1].name() == "q");
  f.set(io_test::make_tensor("k", DType::kU8, {5}));
  CHECK(f.size() == 2);
  CHECK(f.at("k").dtype() == DType::kU8);
  CHECK(f.find("v") == nullptr);
  try {
    (void)f.at("v");
    FAIL("missing tensor must throw");
  } catch (const dashattn::InvalidArgument& e) {
    CHECK(e.argument() == "v");
    CHECK(std::string(e.what()).find("k, q") != std::string::npos);
  }
}

TEST_CASE("TensorFile lookups stay fast and messages short for large files") {
  TensorFile f;
  for (int i = 0; i < 5000; ++i) f.add(Tensor("layer" + std::to_string(i), DType::kU8, {1}));
  CHECK(f.at("layer4999").name() == "layer4999");
  try {
    (void)f.at("layer5000");
    FAIL("missing tensor must throw");
  } catch (const dashattn::InvalidArgument& e) {
    const std::string msg = e.what();
    CHECK(msg.find("(5000 tensors)") != std::string::npos);
    CHECK(msg.size() < 400);
  }
}
