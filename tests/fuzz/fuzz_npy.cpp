// libFuzzer target: parse_npy on arbitrary bytes. Only dashattn::Error may escape the reader; anything it accepts
// must write and read back identically.
#include "dashattn/error.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dashattn::io::TensorFile file;
  try {
    file.add(dashattn::io::parse_npy(data, size, "fuzz.npy", "x"));
  } catch (const dashattn::Error&) {
    return 0;
  }
  const std::vector<uint8_t> bytes = dashattn::io::serialize_npy(file.at("x"));
  dashattn::io::TensorFile back;
  back.add(dashattn::io::parse_npy(bytes.data(), bytes.size(), "round trip", "x"));
  dashattn::fuzz::check_same_tensors(file, back);
  return 0;
}
