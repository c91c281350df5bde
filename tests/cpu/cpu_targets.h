// Runs a test body once per instruction set this build compiled the CPU kernels for and this machine supports.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "backends/cpu/simd_kernels.h"
#include "hwy/targets.h"

namespace dashattn_test {

// True for the targets whose Highway MulAdd is a fused multiply-add (one rounding).
inline bool target_has_fma(int64_t target) {
  return target == HWY_AVX2 || target == HWY_AVX3 || target == HWY_AVX3_DL;
}

template <typename Fn>
void for_each_cpu_target(const Fn& fn) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = hwy::TargetName(target);
    INFO("target " << name);
    // The dispatch must really follow the mock, or every later check would test one target many times.
    REQUIRE(std::string(dashattn::cpu::simd_target_name()) == name);
    fn(target);
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace dashattn_test
