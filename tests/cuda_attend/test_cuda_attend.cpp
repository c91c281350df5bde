// Stage-2 kernels (sparse prefill over routed chunks + diagonal, split-KV decode, dense baseline) against the
// float64 reference: every tiling, GQA ratio, chunk size, head dim, dtype, layout, batch form and prior mode of
// attend_check.cu's grid.
#include <doctest/doctest.h>

#include <cstdlib>

#include "attend_check.h"

TEST_CASE("cuda stage 2 kernels match the float64 reference") {
  if (!attend_check::have_device()) {
    MESSAGE("no CUDA device: skipped");
    std::exit(77);
  }
  CHECK(attend_check::run_conformance(false) == 0);
}

TEST_CASE("cuda stage 1 bias lists name the routed chunks and their log weights") {
  if (!attend_check::have_device()) {
    MESSAGE("no CUDA device: skipped");
    std::exit(77);
  }
  CHECK(attend_check::run_route_lists_check(true) == 0);
}
