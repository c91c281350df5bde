// tensorio_convert IN OUT: reads any supported tensor file and writes it in the format OUT's extension names.
// Prints "name dtype shape" for every tensor read. Exit code 1 and the error message on failure.
#include <cstdio>

#include "dashattn/error.h"
#include "dashattn/io/tensor_file.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN OUT\n", argv[0]);
    return 2;
  }
  try {
    const dashattn::io::TensorFile file = dashattn::io::read_tensor_file(argv[1]);
    for (const dashattn::io::Tensor& t : file) {
      std::string shape;
      for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      std::printf("%s %s [%s]\n", t.name().c_str(), dashattn::dtype_name(t.dtype()), shape.c_str());
    }
    dashattn::io::write_tensor_file(argv[2], file);
  } catch (const dashattn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
