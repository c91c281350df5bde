#include "arrays.h"

#include <string>
#include <utility>

namespace dashattn::python {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// DLPack device codes (dlpack.h): the ones a libdashattn backend can address.
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLROCM = 10, kDLROCMHost = 11, kDLCUDAManaged = 13;

std::string dlpack_dtype_name(const nb::dlpack::dtype& t) {
  std::string base;
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Int: base = "int"; break;
    case nb::dlpack::dtype_code::UInt: base = "uint"; break;
    case nb::dlpack::dtype_code::Float: base = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: base = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: base = "complex"; break;
    case nb::dlpack::dtype_code::Bool: base = "bool"; break;
    default: base = "dtype_code_" + std::to_string(t.code) + "_"; break;
  }
  std::string name = base + std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

DType dtype_of(const nb::dlpack::dtype& t, const char* name, bool u16_is_bf16) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Float && t.bits == 32) return DType::kF32;
    if (code == Code::Float && t.bits == 16) return DType::kF16;
    if (code == Code::Float && t.bits == 64) return DType::kF64;
    if (code == Code::Bfloat && t.bits == 16) return DType::kBF16;
    if (code == Code::Int && t.bits == 32) return DType::kI32;
    if (code == Code::UInt && t.bits == 32) return DType::kU32;
    if (code == Code::UInt && t.bits == 8) return DType::kU8;
    if (code == Code::UInt && t.bits == 16 && u16_is_bf16) return DType::kBF16;
  }
  throw InvalidArgument(std::string(name) + ".dtype", "float32, float16, bfloat16, int32 or uint32 (per argument)",
                        dlpack_dtype_name(t));
}

template <typename Array>
TensorView make_view(const Array& a, const char* name, const ViewOptions& opt) {
  TensorView t;
  if (!a.is_valid()) return t;
  if (a.ndim() > static_cast<size_t>(kMaxRank)) {
    throw InvalidArgument(name, "rank <= 4", "rank " + str(static_cast<int64_t>(a.ndim())));
  }
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = dtype_of(a.dtype(), name, opt.u16_is_bf16);
  t.device = device_of(a.device_type(), a.device_id(), name);
  t.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < t.rank; ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.stride[i] = a.stride(i);
  }
  return t;
}

TensorView permute_layout(TensorView t, const char* name, Layout layout) {
  if (!t.defined() || layout == Layout::kBnhd) return t;
  // [b, h, n, d] -> logical [b, n, h, d]; packed [h, total, d] -> [total, h, d].
  int a = -1;
  if (t.rank == 4) a = 1;
  if (t.rank == 3) a = 0;
  if (a < 0) {
    throw InvalidArgument(name, "rank 4 [b, h, n, d] (or rank 3 [h, total, d]) for layout 'bhnd'",
                          "rank " + str(t.rank) + " " + t.shape_string());
  }
  std::swap(t.shape[a], t.shape[a + 1]);
  std::swap(t.stride[a], t.stride[a + 1]);
  return t;
}

// Checks an int32 batch array (dtype, rank, length, contiguity, device) and returns its data pointer; device
// memory is never read here.
const int32_t* int_array(const InArray& a, const char* name, int64_t want_len, const Device& device) {
  if (!a.is_valid()) return nullptr;
  const TensorView t = make_view(a, name, {});
  if (t.dtype != DType::kI32) throw InvalidArgument(std::string(name) + ".dtype", "int32", dtype_name(t.dtype));
  if (t.rank != 1) throw InvalidArgument(name, "a rank-1 array", "rank " + str(t.rank) + " " + t.shape_string());
  if (want_len >= 0 && t.shape[0] != want_len) {
    throw InvalidArgument(std::string(name) + ".shape", "[" + str(want_len) + "]", t.shape_string());
  }
  if (t.shape[0] > 1 && t.stride[0] != 1) {
    throw InvalidArgument(std::string(name) + ".stride", "[1] (contiguous)", "[" + str(t.stride[0]) + "]");
  }
  if (t.device != device) {
    throw InvalidArgument(std::string(name) + ".device",
                          std::string(device_type_name(device.type)) + ":" + str(device.index) + " (the device of q)",
                          std::string(device_type_name(t.device.type)) + ":" + str(t.device.index));
  }
  return static_cast<const int32_t*>(t.data);
}

// Checks the block table (int32, rank 2, rows contiguous, on the device) and returns its data and row stride.
const int32_t* table_array(const InArray& a, const Device& device, int64_t* row_stride) {
  const TensorView t = make_view(a, "block_table", {});
  if (t.dtype != DType::kI32) throw InvalidArgument("block_table.dtype", "int32", dtype_name(t.dtype));
  if (t.rank != 2) {
    throw InvalidArgument("block_table", "a rank-2 [b, max_pages] array",
                          "rank " + str(t.rank) + " " + t.shape_string());
  }
  if (t.shape[1] > 1 && t.stride[1] != 1) {
    throw InvalidArgument("block_table.stride[1]", "1 (each row contiguous)", str(t.stride[1]));
  }
  // One row has no row stride to speak of (frameworks report anything for it): its width serves.
  *row_stride = t.shape[0] > 1 ? t.stride[0] : t.shape[1];
  if (*row_stride < t.shape[1]) {
    throw InvalidArgument("block_table.stride[0]", ">= " + str(t.shape[1]) + " (rows that do not overlap)",
                          str(*row_stride));
  }
  if (t.device != device) {
    throw InvalidArgument("block_table.device",
                          std::string(device_type_name(device.type)) + ":" + str(device.index) + " (the device of q)",
                          std::string(device_type_name(t.device.type)) + ":" + str(t.device.index));
  }
  return static_cast<const int32_t*>(t.data);
}

}  // namespace

void PyBatch::check_block_table(const TensorView& k, int64_t sequences) const {
  // The core reports a bad pool by name. A packed batch's sequences are its cu_seqlens' (num_seqs + 1 values).
  if (!is_paged() || k.rank != 4 || k.shape[1] < 1) return;
  if (is_varlen() && cu_seqlens_k.ndim() == 1) sequences = static_cast<int64_t>(cu_seqlens_k.shape(0)) - 1;
  const int64_t rows = block_table.ndim() == 2 ? static_cast<int64_t>(block_table.shape(0)) : 0;
  const int64_t width = block_table.ndim() == 2 ? static_cast<int64_t>(block_table.shape(1)) : 0;
  if (rows < sequences) {
    throw InvalidArgument("block_table.shape[0]", ">= " + str(sequences) + " (a row per sequence)", str(rows));
  }
  const int64_t need = (max_seqlen_k + k.shape[1] - 1) / k.shape[1];
  if (width < need) {
    throw InvalidArgument("block_table.shape[1]",
                          ">= ceil(max_seqlen_k / page size) = " + str(need) + " (page size " + str(k.shape[1]) + ")",
                          str(width));
  }
}

Layout parse_layout(const std::string& name) {
  if (name == "bnhd" || name == "thd") return Layout::kBnhd;
  if (name == "bhnd" || name == "htd") return Layout::kBhnd;
  throw InvalidArgument("layout", "'bnhd' ([b, n, h, d]) or 'bhnd' ([b, h, n, d])", "'" + name + "'");
}

Device device_of(int dlpack_device_type, int device_id, const char* name) {
  switch (dlpack_device_type) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost: return Device{DeviceType::kCpu, 0};
    case kDLCUDA:
    case kDLCUDAManaged: return Device{DeviceType::kCuda, device_id};
    case kDLROCM: return Device{DeviceType::kHip, device_id};
    default:
      throw InvalidArgument(std::string(name) + ".device", "CPU, CUDA or ROCm memory",
                            "DLPack device type " + std::to_string(dlpack_device_type));
  }
}

TensorView plain_view(const nb::ndarray<nb::ro>& a, const char* name, const ViewOptions& opt) {
  return make_view(a, name, opt);
}
TensorView plain_view(const nb::ndarray<>& a, const char* name, const ViewOptions& opt) {
  return make_view(a, name, opt);
}
TensorView attention_view(const nb::ndarray<nb::ro>& a, const char* name, const ViewOptions& opt) {
  return permute_layout(make_view(a, name, opt), name, opt.layout);
}
TensorView attention_view(const nb::ndarray<>& a, const char* name, const ViewOptions& opt) {
  return permute_layout(make_view(a, name, opt), name, opt.layout);
}

BatchLayout PyBatch::layout(const Device& device) const {
  BatchLayout b;
  if (is_varlen()) {
    if (!cu_seqlens_q.is_valid() || !cu_seqlens_k.is_valid()) {
      throw InvalidArgument(cu_seqlens_q.is_valid() ? "cu_seqlens_k" : "cu_seqlens_q",
                            "an int32 array of num_seqs + 1 prefix sums (cu_seqlens_q and cu_seqlens_k go together)",
                            "None");
    }
    const int64_t n = static_cast<int64_t>(cu_seqlens_q.ndim() == 1 ? cu_seqlens_q.shape(0) : 0);
    if (n < 2) throw InvalidArgument("cu_seqlens_q", "num_seqs + 1 >= 2 prefix sums", str(n) + " values");
    b.cu_seqlens_q = int_array(cu_seqlens_q, "cu_seqlens_q", n, device);
    b.cu_seqlens_k = int_array(cu_seqlens_k, "cu_seqlens_k", n, device);
    b.num_seqs = static_cast<int>(n - 1);
    b.max_seqlen_q = max_seqlen_q;
    b.max_seqlen_k = max_seqlen_k;
  }
  b.seqlens_q = int_array(seqlens_q, "seqlens_q", -1, device);
  b.seqlens_k = int_array(seqlens_k, "seqlens_k", -1, device);
  if (is_paged()) {
    // A page pool has no sequence axis: the padded key length comes from max_seqlen_k (the core requires it).
    b.block_table = table_array(block_table, device, &b.block_table_stride);
    b.max_seqlen_k = max_seqlen_k;
  }
  return b;
}

PriorMode parse_prior(const std::string& name) {
  PriorMode m;
  if (!parse_prior_mode(name.c_str(), &m)) {
    throw InvalidArgument("prior", "'estimate_diagonal', 'raw' or 'none'", "'" + name + "'");
  }
  return m;
}

EntmaxSolver parse_solver(const std::string& name) {
  if (name == "exact") return EntmaxSolver::kExact;
  if (name == "reference") return EntmaxSolver::kReference;
  throw InvalidArgument("solver", "'exact' or 'reference'", "'" + name + "'");
}

const char* solver_name(EntmaxSolver s) { return s == EntmaxSolver::kExact ? "exact" : "reference"; }

Backend& pick_backend(const std::string& name, const Device& device) {
  Registry& reg = Registry::instance();
  if (name.empty() || name == "auto") {
    if (Backend* b = reg.best_for(device.type)) return *b;
    std::string why;
    for (Backend* b : reg.all()) {
      if (b->device_type() != device.type) continue;
      why += std::string(why.empty() ? "" : "; ") + b->name() + ": " + b->probe().reason;
    }
    if (why.empty()) {
      why = std::string("no backend for ") + device_type_name(device.type) + " arrays is compiled into this build (compiled: " +
            DASHATTN_COMPILED_BACKENDS + ")";
    }
    throw BackendUnavailable("auto", why);
  }
  Backend& b = reg.select(name);
  if (b.device_type() != device.type) {
    throw InvalidArgument("backend", std::string("a backend for ") + device_type_name(device.type) +
                                         " arrays (the arrays' device)",
                          "'" + name + "', which runs on " + device_type_name(b.device_type()) + " arrays");
  }
  return b;
}

void* stream_pointer(uintptr_t stream) { return reinterpret_cast<void*>(stream); }

}  // namespace dashattn::python
