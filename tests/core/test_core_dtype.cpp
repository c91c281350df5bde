// bf16 / f16 conversions against independent decodings and a nearest-value search with ties to even.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dashattn/dtype.h"

namespace {

using namespace dashattn;

double float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Independent decodings from the bit fields.
double decode_bf16(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 7) & 0xff, mant = h & 0x7f;
  double v;
  if (exp == 0xff) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(mant, -126 - 7);
  else v = std::ldexp(128 + mant, exp - 127 - 7);
  return sign ? -v : v;
}

double decode_f16(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0x1f) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(mant, -14 - 10);
  else v = std::ldexp(1024 + mant, exp - 15 - 10);
  return sign ? -v : v;
}

bool is_nan16(uint16_t h, int exp_bits) {
  const int mant_bits = 15 - exp_bits;
  const int exp = (h >> mant_bits) & ((1 << exp_bits) - 1);
  return exp == (1 << exp_bits) - 1 && (h & ((1 << mant_bits) - 1)) != 0;
}

// Nearest representable 16-bit value of |f| among the ascending non-negative codes 0..max_code (+inf beyond),
// ties to the even code. `decode` gives each code's value; overflow rounds as if the exponent were unbounded.
uint16_t nearest_code(double a, const std::vector<double>& table, double overflow_step) {
  const double max_finite = table.back();
  if (a >= max_finite + overflow_step / 2) {
    // Past the halfway point to the next (unrepresentable) value: ±inf, except an exact tie with an odd max.
    const uint16_t max_code = static_cast<uint16_t>(table.size() - 1);
    if (a == max_finite + overflow_step / 2 && (max_code & 1) == 0) return max_code;
    return static_cast<uint16_t>(table.size());  // the infinity code follows the largest finite one
  }
  const auto it = std::lower_bound(table.begin(), table.end(), a);
  if (it == table.begin()) return 0;
  const size_t hi = static_cast<size_t>(it - table.begin());
  if (hi == table.size()) return static_cast<uint16_t>(hi - 1);
  const size_t lo = hi - 1;
  const double dlo = a - table[lo], dhi = table[hi] - a;
  if (dlo < dhi) return static_cast<uint16_t>(lo);
  if (dhi < dlo) return static_cast<uint16_t>(hi);
  return static_cast<uint16_t>((lo & 1) == 0 ? lo : hi);
}

struct Tables {
  std::vector<double> bf16, f16;  // non-negative finite values by code
  Tables() {
    for (uint32_t h = 0; h < 0x7f80; ++h) bf16.push_back(decode_bf16(static_cast<uint16_t>(h)));
    for (uint32_t h = 0; h < 0x7c00; ++h) f16.push_back(decode_f16(static_cast<uint16_t>(h)));
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

uint16_t expected_bf16(float f) {
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7f80;
  return sign | nearest_code(a, tables().bf16, std::ldexp(1.0, 127 - 7));
}

uint16_t expected_f16(float f) {
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7c00;
  return sign | nearest_code(a, tables().f16, std::ldexp(1.0, 15 - 10));
}

// Checks one float against both conversions; returns the number of mismatches.
int check_float(float f) {
  int bad = 0;
  const uint16_t b = float_to_bf16(f), h = float_to_f16(f);
  if (std::isnan(f)) {
    bad += is_nan16(b, 8) ? 0 : 1;
    bad += is_nan16(h, 5) ? 0 : 1;
    return bad;
  }
  bad += b == expected_bf16(f) ? 0 : 1;
  bad += h == expected_f16(f) ? 0 : 1;
  return bad;
}

}  // namespace

TEST_CASE("bf16 and f16 decode every code exactly") {
  int bad = 0;
  for (uint32_t c = 0; c <= 0xffff; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    const double want_b = decode_bf16(h), want_h = decode_f16(h);
    const double got_b = bf16_to_float(h), got_h = f16_to_float(h);
    if (std::isnan(want_b) ? !std::isnan(got_b) : got_b != want_b || std::signbit(got_b) != std::signbit(want_b)) ++bad;
    if (std::isnan(want_h) ? !std::isnan(got_h) : got_h != want_h || std::signbit(got_h) != std::signbit(want_h)) ++bad;
    // Every non-NaN code survives a round trip through float.
    if (!std::isnan(want_b) && float_to_bf16(bf16_to_float(h)) != h) ++bad;
    if (!std::isnan(want_h) && float_to_f16(f16_to_float(h)) != h) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("float to bf16/f16 rounds to nearest, ties to even, on a sweep of float bit patterns") {
  int bad = 0;
  int64_t checked = 0;
  // A stride coprime with 2^32 visits every exponent and many mantissas of both signs.
  for (uint64_t u = 0; u < (1ull << 32); u += 997) {
    bad += check_float(static_cast<float>(float_of_bits(static_cast<uint32_t>(u))));
    ++checked;
  }
  MESSAGE(checked << " float patterns checked");
  CHECK(bad == 0);
}

TEST_CASE("exact ties and their neighbours round correctly") {
  int bad = 0;
  // bf16: halfway between two codes means the low 16 bits are 0x8000.
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    const uint32_t mid = (h << 16) | 0x8000u;
    for (uint32_t u : {mid - 1, mid, mid + 1, mid | 0x80000000u, (mid + 1) | 0x80000000u})
      bad += check_float(static_cast<float>(float_of_bits(u)));
  }
  // f16: midpoints between consecutive finite codes, all exactly representable in float.
  const std::vector<double>& t = tables().f16;
  for (size_t c = 0; c + 1 < t.size(); ++c) {
    const float mid = static_cast<float>(0.5 * (t[c] + t[c + 1]));
    REQUIRE(static_cast<double>(mid) == 0.5 * (t[c] + t[c + 1]));
    for (float f : {std::nextafter(mid, 0.0f), mid, std::nextafter(mid, 1e9f), -mid})
      bad += check_float(f);
  }
  CHECK(bad == 0);
}

TEST_CASE("special values") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(float_to_bf16(inf) == 0x7f80);
  CHECK(float_to_bf16(-inf) == 0xff80);
  CHECK(float_to_f16(inf) == 0x7c00);
  CHECK(float_to_f16(-inf) == 0xfc00);
  CHECK(is_nan16(float_to_bf16(nan), 8));
  CHECK(is_nan16(float_to_f16(nan), 5));
  CHECK(is_nan16(float_to_bf16(-nan), 8));
  // A signalling NaN whose payload sits only in the low 16 bits must not become infinity in bf16.
  CHECK(is_nan16(float_to_bf16(static_cast<float>(float_of_bits(0x7f800001u))), 8));
  CHECK(float_to_bf16(0.0f) == 0x0000);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  CHECK(float_to_f16(-0.0f) == 0x8000);
  // f16 range: 65504 is the largest finite value; 65520 is the tie with infinity and goes to (even) infinity.
  CHECK(float_to_f16(65504.0f) == 0x7bff);
  CHECK(float_to_f16(65519.99f) == 0x7bff);
  CHECK(float_to_f16(65520.0f) == 0x7c00);
  CHECK(float_to_f16(1e10f) == 0x7c00);
  // f16 subnormals: the smallest is 2^-24; half of it ties to zero (even), a bit more rounds up.
  CHECK(float_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(float_to_f16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(float_to_f16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_f16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 ulp: tie between 1 and 2, even is 2
  CHECK(f16_to_float(0x03ff) == static_cast<float>(std::ldexp(1023.0, -24)));
  // bf16 has the subnormals of float down to 2^-133; the largest float rounds to infinity.
  CHECK(bf16_to_float(float_to_bf16(std::ldexp(1.0f, -130))) == std::ldexp(1.0f, -130));
  CHECK(float_to_bf16(std::ldexp(1.0f, -133)) == 0x0001);
  CHECK(float_to_bf16(std::ldexp(1.0f, -134)) == 0x0000);  // half the smallest: tie to even zero
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  // Known values.
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(3.140625f) == 0x4049);
  CHECK(float_to_f16(1.0f) == 0x3c00);
  CHECK(float_to_f16(-2.0f) == 0xc000);
  CHECK(float_to_f16(0.1f) == 0x2e66);
}

TEST_CASE("load, store and round_to_dtype agree with the conversions") {
  const float values[] = {0.0f, -1.5f, 3.3333333f, 1e-6f, -65000.0f, 1.0009765625f};
  for (float v : values) {
    unsigned char buf[8];
    store_from_float(buf, DType::kBF16, v);
    CHECK(load_as_float(buf, DType::kBF16) == bf16_to_float(float_to_bf16(v)));
    CHECK(round_to_dtype(v, DType::kBF16) == bf16_to_float(float_to_bf16(v)));
    store_from_float(buf, DType::kF16, v);
    CHECK(load_as_float(buf, DType::kF16) == f16_to_float(float_to_f16(v)));
    CHECK(round_to_dtype(v, DType::kF16) == f16_to_float(float_to_f16(v)));
    store_from_float(buf, DType::kF32, v);
    CHECK(load_as_float(buf, DType::kF32) == v);
    CHECK(round_to_dtype(v, DType::kF32) == v);
    store_from_float(buf, DType::kF64, v);
    CHECK(load_as_float(buf, DType::kF64) == v);
  }
}

TEST_CASE("dtype names and sizes") {
  CHECK(dtype_size(DType::kF32) == 4);
  CHECK(dtype_size(DType::kF16) == 2);
  CHECK(dtype_size(DType::kBF16) == 2);
  CHECK(dtype_size(DType::kF64) == 8);
  CHECK(dtype_size(DType::kI32) == 4);
  CHECK(dtype_size(DType::kU32) == 4);
  CHECK(dtype_size(DType::kU8) == 1);
  CHECK(is_attention_dtype(DType::kBF16));
  CHECK_FALSE(is_attention_dtype(DType::kF64));
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kU32, DType::kU8}) {
    DType parsed = DType::kU8;
    REQUIRE(parse_dtype(dtype_name(t), &parsed));
    CHECK(parsed == t);
  }
  DType t = DType::kF32;
  CHECK(parse_dtype("bfloat16", &t));
  CHECK(t == DType::kBF16);
  CHECK(parse_dtype("float16", &t));
  CHECK(t == DType::kF16);
  CHECK(parse_dtype("float32", &t));
  CHECK(t == DType::kF32);
  CHECK_FALSE(parse_dtype("int4", &t));
  CHECK_FALSE(parse_dtype("", &t));
  CHECK(std::string(dtype_name(DType::kBF16)) == "bf16");
}
