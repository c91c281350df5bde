// libFuzzer target: parse_npz (the zip reader and, per member, the .npy reader) on arbitrary bytes. Only
// dashattn::Error may escape the reader; anything it accepts must write and read back identically.
#include "dashattn/error.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dashattn::io::TensorFile file;
  try {
    file = dashattn::io::parse_npz(data, size, "fuzz.npz");
  } catch (const dashattn::Error&) {
    return 0;
  }
  const std::vector<uint8_t> bytes = dashattn::io::serialize_npz(file);
  dashattn::fuzz::check_same_tensors(file, dashattn::io::parse_npz(bytes.data(), bytes.size()));
  return 0;
}
