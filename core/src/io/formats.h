// The per-format readers and writers on byte sources and sinks; the public functions wrap these.
#pragma once

#include <string>

#include "byte_io.h"

namespace dashattn::io::detail {

TensorFile read_safetensors_from(const ByteSource& src);
void write_safetensors_to(const TensorFile& file, ByteSink& sink, const std::string& target);

Tensor read_npy_from(const ByteSource& src, const std::string& tensor_name);
// The complete .npy header (magic through the final '\n') numpy.save writes for t; throws IoError for bf16.
std::string npy_header(const Tensor& t, const std::string& target);
void write_npy_to(const Tensor& t, ByteSink& sink, const std::string& target);

TensorFile read_npz_from(const ByteSource& src);
void write_npz_to(const TensorFile& file, ByteSink& sink, const std::string& target);

}  // namespace dashattn::io::detail
