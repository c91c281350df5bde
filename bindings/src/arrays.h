// DLPack arrays (through nanobind's nb::ndarray) to libdashattn tensor views, plus the small argument objects the
// extension functions share (method parameters, batch layout, backend choice).
//
// Nothing here copies data: a view points into the caller's array with the caller's strides. The pure-Python
// layer allocates outputs in the caller's framework and passes them in, so the extension never has to know
// which framework an array came from.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "dashattn/dashattn.h"

namespace dashattn::python {

namespace nb = nanobind;

// Any dtype, rank, device and strides; read-only arrays are accepted for inputs.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// How the attention tensors (q, k, v, o) of one call are laid out. The library's logical order is [b, n, h, d];
// kBhnd is the same data described with the middle axes swapped (strides permuted, no copy).
enum class Layout { kBnhd, kBhnd };
Layout parse_layout(const std::string& name);

// Options that change how arrays are read.
struct ViewOptions {
  Layout layout = Layout::kBnhd;
  // NumPy has no bfloat16: a uint16 array is read as bf16 bits when this is set (ml_dtypes arrays are passed as
  // their uint16 view by the Python layer).
  bool u16_is_bf16 = false;
};

// A plain view (dims as given). An invalid (None) array gives an undefined view.
TensorView plain_view(const nb::ndarray<nb::ro>& a, const char* name, const ViewOptions& opt = {});
TensorView plain_view(const nb::ndarray<>& a, const char* name, const ViewOptions& opt = {});
// An attention tensor ([b, n, h, d] / [b, h, n, d], or rank-3 packed [total, h, d] / [h, total, d]).
TensorView attention_view(const nb::ndarray<nb::ro>& a, const char* name, const ViewOptions& opt);
TensorView attention_view(const nb::ndarray<>& a, const char* name, const ViewOptions& opt);

Device device_of(int dlpack_device_type, int device_id, const char* name);

// The batch layout of a call; holds the integer arrays so their memory outlives the call.
struct PyBatch {
  InArray cu_seqlens_q, cu_seqlens_k, seqlens_q, seqlens_k;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  // Paged K/V: int32 [b, max_pages] (FlashAttention's block_table); its row stride becomes block_table_stride.
  InArray block_table;

  bool is_varlen() const { return cu_seqlens_q.is_valid() || cu_seqlens_k.is_valid(); }
  bool is_paged() const { return block_table.is_valid(); }
  // Pointers into the arrays after checking dtype (int32), rank, contiguity, length and device.
  BatchLayout layout(const Device& device) const;
  // The block table against the page pool k (logical [pages, P, h_kv, d]) and the sequences it serves: a row per
  // sequence, each as wide as max_seqlen_k needs (sequences: a padded batch's b; a packed batch counts its own).
  // The core only sees a pointer and a stride, so the array's own extent is checked here. No-op without a table.
  void check_block_table(const TensorView& k, int64_t sequences) const;
};

// Parses the method enums from their names (ValueError on unknown names, listing the valid ones).
PriorMode parse_prior(const std::string& name);
EntmaxSolver parse_solver(const std::string& name);
const char* solver_name(EntmaxSolver s);

// The backend for arrays on `device`: "auto" picks the best available one for that device; a named backend
// must exist, be available and run on that device.
Backend& pick_backend(const std::string& name, const Device& device);

void* stream_pointer(uintptr_t stream);

// Registration of the extension's parts (one function per source file).
void bind_ops(nb::module_& m);
void bind_decoder(nb::module_& m);

}  // namespace dashattn::python
