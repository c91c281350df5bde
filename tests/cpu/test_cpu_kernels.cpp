// The CPU backend's SIMD kernels on every instruction set, against scalar loops written here. Conversions and
// the two matrix kernels are checked bitwise: the matrix kernels promise one MulAdd chain per output element,
// whatever the row/column blocking, which is what Stage 1 and Stage 2 rely on to agree on routing weights.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/simd_kernels.h"
#include "cpu/cpu_targets.h"
#include "dashattn/dtype.h"
#include "hwy/aligned_allocator.h"

using namespace dashattn;
using dashattn_test::for_each_cpu_target;
using dashattn_test::target_has_fma;

namespace {

std::vector<float> random_floats(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

hwy::AlignedFreeUniquePtr<float[]> aligned_copy(const std::vector<float>& v) {
  auto p = hwy::AllocateAligned<float>(v.size());
  std::memcpy(p.get(), v.data(), v.size() * sizeof(float));
  return p;
}

float chain_step(float a, float b, float acc, bool fused) { return fused ? std::fma(a, b, acc) : a * b + acc; }

}  // namespace

TEST_CASE("load_row converts every bf16 and f16 bit pattern exactly") {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for_each_cpu_target([&](int64_t) {
    std::vector<float> got(all.size() + 3);
    for (DType t : {DType::kBF16, DType::kF16}) {
      INFO(std::string(dtype_name(t)));
      // Odd length and offset exercise the scalar tail.
      cpu::load_row(all.data() + 1, t, static_cast<int64_t>(all.size() - 1), got.data());
      int bad = 0;
      for (size_t i = 1; i < all.size(); ++i) {
        const float want = t == DType::kBF16 ? bf16_to_float(all[i]) : f16_to_float(all[i]);
        const float g = got[i - 1];
        const bool same = std::isnan(want) ? std::isnan(g) : float_bits(g) == float_bits(want);
        bad += same ? 0 : 1;
      }
      CHECK(bad == 0);
    }
    const std::vector<float> src = random_floats(37, 3);
    cpu::load_row(src.data(), DType::kF32, 37, got.data());
    CHECK(std::memcmp(got.data(), src.data(), 37 * sizeof(float)) == 0);
  });
}

TEST_CASE("store_row rounds like store_from_float, ties, NaN, inf and subnormals included") {
  std::vector<float> src = random_floats(1000, 7, 3.0f);
  // Exact bf16 ties (lower half exactly 0x8000) with even and odd upper halves, specials, f16 edge values.
  const uint32_t ties[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7f8000u, 0x7f7fffffu};
  for (uint32_t u : ties) src.push_back(bits_float(u));
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), bits_float(0xff812345u), 65504.0f, 65520.0f, 1e-7f,
                  -3e-8f, 6.1e-5f, 1e-40f, 1e38f}) {
    src.push_back(f);
  }
  for_each_cpu_target([&](int64_t) {
    for (float factor : {1.0f, 0.37f}) {
      for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
        INFO(std::string(dtype_name(t)) << " factor " << factor);
        for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, static_cast<int64_t>(src.size())}) {
          std::vector<unsigned char> got(static_cast<size_t>(n) * 4), want(static_cast<size_t>(n) * 4);
          cpu::store_row(src.data(), n, factor, t, got.data());
          for (int64_t i = 0; i < n; ++i) store_from_float(want.data() + i * dtype_size(t), t, src[i] * factor);
          CHECK(std::memcmp(got.data(), want.data(), static_cast<size_t>(n * dtype_size(t))) == 0);
        }
      }
    }
  });
}

TEST_CASE("dot_row and scale_row") {
  for_each_cpu_target([&](int64_t) {
    for (int64_t n : {1, 7, 16, 64, 100, 128, 512}) {
      const std::vector<float> a = random_floats(n, 11 + n), b = random_floats(n, 13 + n);
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += static_cast<double>(a[i]) * b[i];
      CHECK(std::fabs(cpu::dot_row(a.data(), b.data(), n) - want) <= 1e-5 * (1.0 + std::sqrt(double(n))));
      std::vector<float> scaled(n);
      cpu::scale_row(a.data(), n, 0.125f, scaled.data());
      for (int64_t i = 0; i < n; ++i) CHECK(scaled[i] == a[i] * 0.125f);
    }
  });
}

TEST_CASE("matmul_bt: every element is one MulAdd chain over the depth, for every block shape") {
  for_each_cpu_target([&](int64_t target) {
    const bool fused = target_has_fma(target);
    for (int depth : {1, 5, 64, 129}) {
      for (int rows : {1, 2, 3, 4, 5, 8, 9, 17}) {
        for (int cols : {16, 32, 48, 64, 80, 144}) {
          const int64_t stride = cols + 32;  // a wider table, as when scoring a prefix of the chunks
          const std::vector<float> a = random_floats(static_cast<size_t>(rows) * depth, 100 + depth + rows);
          const auto bt = aligned_copy(random_floats(static_cast<size_t>(depth * stride), 200 + cols + depth));
          std::vector<const float*> a_rows(rows);
          for (int r = 0; r < rows; ++r) a_rows[r] = a.data() + static_cast<size_t>(r) * depth;
          auto s = hwy::AllocateAligned<float>(static_cast<size_t>(rows) * cols);
          cpu::matmul_bt(a_rows.data(), rows, depth, bt.get(), stride, cols, s.get(), cols);
          int mismatches = 0;
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < cols; ++c) {
              float acc = 0.0f;
              for (int t = 0; t < depth; ++t) acc = chain_step(a_rows[r][t], bt[t * stride + c], acc, fused);
              mismatches += float_bits(acc) == float_bits(s[r * cols + c]) ? 0 : 1;
            }
          }
          INFO("depth " << depth << " rows " << rows << " cols " << cols);
          CHECK(mismatches == 0);
        }
      }
    }
  });
}

TEST_CASE("accumulate_pv: rescaled accumulator plus one MulAdd chain over the keys") {
  for_each_cpu_target([&](int64_t target) {
    const bool fused = target_has_fma(target);
    for (int width : {16, 64, 128, 144}) {
      for (int rows : {1, 3, 4, 6, 9}) {
        for (int keys : {1, 13, 64}) {
          const int64_t v_stride = width;
          const auto v = aligned_copy(random_floats(static_cast<size_t>(keys) * width, 5 + keys + width));
          const std::vector<float> p = random_floats(static_cast<size_t>(rows) * keys, 9 + rows);
          std::vector<float> o0 = random_floats(static_cast<size_t>(rows) * width, 21 + rows + width);
          std::vector<float> rescale = random_floats(rows, 31 + rows);
          // Row 0 is fresh: rescale 0 over uninitialized (here NaN) memory must start from zero.
          rescale[0] = 0.0f;
          std::fill(o0.begin(), o0.begin() + width, std::numeric_limits<float>::quiet_NaN());
          auto o = aligned_copy(o0);
          std::vector<float*> o_rows(rows);
          std::vector<const float*> p_rows(rows);
          for (int r = 0; r < rows; ++r) {
            o_rows[r] = o.get() + static_cast<size_t>(r) * width;
            p_rows[r] = p.data() + static_cast<size_t>(r) * keys;
          }
          cpu::accumulate_pv(o_rows.data(), rescale.data(), p_rows.data(), rows, v.get(), v_stride, keys, width);
          int mismatches = 0;
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < width; ++c) {
              float acc = rescale[r] == 0.0f ? 0.0f : o0[r * width + c] * rescale[r];
              for (int j = 0; j < keys; ++j) acc = chain_step(p_rows[r][j], v[j * v_stride + c], acc, fused);
              mismatches += float_bits(acc) == float_bits(o[r * width + c]) ? 0 : 1;
            }
          }
          INFO("width " << width << " rows " << rows << " keys " << keys);
          CHECK(mismatches == 0);
        }
      }
    }
  });
}

TEST_CASE("softmax_step: bias, masked columns, running max and sum") {
  for_each_cpu_target([&](int64_t) {
    const int rows = 5, cols = 48;
    const float kScale = 0.75f;
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows) * cols, 77, 4.0f);
    const std::vector<int> valid = {48, 1, 33, 47, 20};
    const std::vector<float> bias = {0.0f, -2.5f, 1.25f, 0.0f, -80.0f};
    for (bool with_bias : {false, true}) {
      for (bool fresh : {true, false}) {
        auto s = aligned_copy(logits);
        std::vector<float> row_max(rows), row_sum(rows), rescale(rows);
        for (int r = 0; r < rows; ++r) {
          row_max[r] = fresh ? -std::numeric_limits<float>::infinity() : 3.0f - r;
          row_sum[r] = fresh ? 0.0f : 2.0f + r;
        }
        const std::vector<float> max0 = row_max, sum0 = row_sum;
        cpu::softmax_step(s.get(), cols, rows, cols, kScale, with_bias ? bias.data() : nullptr, valid.data(),
                          row_max.data(), row_sum.data(), rescale.data());
        for (int r = 0; r < rows; ++r) {
          INFO("row " << r << " bias " << with_bias << " fresh " << fresh);
          // The scaled, biased logit is rounded to float first (one fused rounding), as the kernel stores it.
          const float b = with_bias ? bias[r] : 0.0f;
          auto biased = [&](int j) {
            return static_cast<double>(b != 0.0f ? std::fma(logits[r * cols + j], kScale, b) : logits[r * cols + j] * kScale);
          };
          double m = max0[r];
          for (int j = 0; j < valid[r]; ++j) m = std::max(m, biased(j));
          CHECK(row_max[r] == doctest::Approx(m).epsilon(1e-6));
          const double sc = std::exp(static_cast<double>(max0[r]) - m);
          CHECK(rescale[r] == doctest::Approx(sc).epsilon(1e-6));
          double sum = sum0[r] * sc;
          for (int j = 0; j < cols; ++j) {
            const double want = j < valid[r] ? std::exp(biased(j) - m) : 0.0;
            sum += want;
            if (j >= valid[r]) {
              CHECK(s[r * cols + j] == 0.0f);
            } else {
              CHECK(s[r * cols + j] == doctest::Approx(want).epsilon(2e-6).scale(1e-30));
            }
          }
          CHECK(row_sum[r] == doctest::Approx(sum).epsilon(1e-5));
        }
      }
    }
  });
}

TEST_CASE("prefix_softmax: bitwise matmul_bt over the padded visible columns, then softmax_step") {
  for_each_cpu_target([&](int64_t) {
    const float kScale = 0.088f;
    for (int chunk_pad : {64, 128}) {
      for (int depth : {64, 128}) {
        for (int rows : {1, 4, 6, 8}) {
          for (int valid : {1, 15, 16, 17, 40, 63, 64, 100}) {
            if (valid > chunk_pad) continue;
            const auto q = aligned_copy(random_floats(static_cast<size_t>(rows) * depth, 3 + rows + depth));
            const auto kt = aligned_copy(random_floats(static_cast<size_t>(depth) * chunk_pad, 7 + depth));
            std::vector<const float*> a_rows(rows);
            for (int r = 0; r < rows; ++r) a_rows[r] = q.get() + static_cast<size_t>(r) * depth;
            // A running state with one fresh row.
            std::vector<float> max0(rows), sum0(rows);
            for (int r = 0; r < rows; ++r) {
              max0[r] = r == 0 ? -std::numeric_limits<float>::infinity() : 0.5f * r;
              sum0[r] = r == 0 ? 0.0f : 1.0f + r;
            }
            const int cols = static_cast<int>(cpu::pad_floats(valid));
            auto want = hwy::AllocateAligned<float>(static_cast<size_t>(rows) * chunk_pad);
            auto got = hwy::AllocateAligned<float>(static_cast<size_t>(rows) * chunk_pad);
            std::vector<float> want_max = max0, want_sum = sum0, want_rescale(rows);
            const std::vector<int> valid_rows(rows, valid);
            cpu::matmul_bt(a_rows.data(), rows, depth, kt.get(), chunk_pad, cols, want.get(), chunk_pad);
            cpu::softmax_step(want.get(), chunk_pad, rows, cols, kScale, nullptr, valid_rows.data(), want_max.data(),
                              want_sum.data(), want_rescale.data());
            std::vector<float> got_max = max0, got_sum = sum0, got_rescale(rows);
            cpu::prefix_softmax(a_rows.data(), rows, depth, valid, kt.get(), chunk_pad, kScale, got_max.data(),
                                got_sum.data(), got_rescale.data(), got.get(), chunk_pad);
            INFO("chunk_pad " << chunk_pad << " depth " << depth << " rows " << rows << " valid " << valid);
            int mismatches = 0;
            for (int r = 0; r < rows; ++r) {
              mismatches += float_bits(want_max[r]) == float_bits(got_max[r]) ? 0 : 1;
              mismatches += float_bits(want_sum[r]) == float_bits(got_sum[r]) ? 0 : 1;
              mismatches += float_bits(want_rescale[r]) == float_bits(got_rescale[r]) ? 0 : 1;
              for (int c = 0; c < cols; ++c) {
                mismatches += float_bits(want[r * chunk_pad + c]) == float_bits(got[r * chunk_pad + c]) ? 0 : 1;
              }
            }
            CHECK(mismatches == 0);
          }
        }
      }
    }
  });
}
