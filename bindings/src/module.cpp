// dashattn._core: the nanobind extension module. This file holds what every entry point shares: the mapping of
// libdashattn's typed errors to Python exceptions, the Method and Batch argument objects, backend introspection
// and device memory for frameworks the Python layer cannot allocate in.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "arrays.h"

namespace dashattn::python {
namespace {

// Invalid arguments about a dtype are TypeErrors in Python; the core names such arguments "<name>.dtype".
bool is_dtype_argument(const std::string& argument) {
  const std::string suffix = ".dtype";
  return argument == "dtype" ||
         (argument.size() > suffix.size() && argument.compare(argument.size() - suffix.size(), suffix.size(), suffix) == 0);
}

const char* exception_class_name(const Error& e) {
  switch (e.code()) {
    case ErrorCode::kInvalidArgument: return is_dtype_argument(e.argument()) ? "DTypeError" : "InvalidArgumentError";
    case ErrorCode::kUnsupported: return "UnsupportedError";
    case ErrorCode::kBackendUnavailable: return "BackendUnavailableError";
    case ErrorCode::kIo: return "DashattnIOError";
    case ErrorCode::kOutOfMemory: return "OutOfMemoryError";
    case ErrorCode::kInternal: return "InternalError";
  }
  return "DashattnError";
}

void raise_python(const Error& e) {
  // The exception classes live in the pure-Python module dashattn.errors so users can import them without the
  // extension; they subclass ValueError / TypeError / RuntimeError as documented.
  nb::object errors = nb::module_::import_("dashattn.errors");
  nb::object cls = errors.attr(exception_class_name(e));
  nb::object exc = cls(nb::str(e.what()));
  exc.attr("code") = nb::str(error_code_name(e.code()));
  exc.attr("argument") = nb::str(e.argument().c_str());
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    try {
      raise_python(e);
    } catch (nb::python_error& pe) {
      pe.restore();  // importing dashattn.errors failed: report that instead
    }
  }
}

MethodParams make_method(int chunk_size, float alpha, float gamma, float sigma, float scale, const std::string& prior,
                         const std::string& solver) {
  MethodParams m;
  m.chunk_size = chunk_size;
  m.alpha = alpha;
  m.gamma = gamma;
  m.sigma = sigma;
  m.scale = scale;
  m.prior = parse_prior(prior);
  m.solver = parse_solver(solver);
  return m;
}

nb::list backend_list() {
  nb::list out;
  for (Backend* b : Registry::instance().all()) {
    const Probe pr = b->probe();
    nb::dict d;
    d["name"] = b->name();
    d["device"] = device_type_name(b->device_type());
    d["priority"] = b->priority();
    d["available"] = pr.available;
    d[pr.available ? "description" : "reason"] = pr.reason;
    out.append(d);
  }
  return out;
}

// Frees memory from Backend::allocate when the last array referring to it goes away.
struct DeviceBuffer {
  Backend* backend;
  void* ptr;
};

// Uninitialized memory on the device of a backend, as a DLPack-exportable array; the Python layer hands it to a
// framework with from_dlpack() when it cannot allocate in that framework itself.
nb::ndarray<nb::array_api> empty_array(const std::vector<int64_t>& shape, const std::string& dtype_name_str, const std::string& device,
                     int device_id, const std::string& backend) {
  DType dt;
  if (!parse_dtype(dtype_name_str, &dt)) throw InvalidArgument("dtype", "a dtype name such as 'f32'", dtype_name_str);
  DeviceType type;
  if (device == "cpu") {
    type = DeviceType::kCpu;
  } else if (device == "cuda") {
    type = DeviceType::kCuda;
  } else if (device == "hip") {
    type = DeviceType::kHip;
  } else {
    throw InvalidArgument("device", "'cpu', 'cuda' or 'hip'", "'" + device + "'");
  }
  Backend& be = pick_backend(backend, Device{type, device_id});
  size_t count = 1;
  std::vector<size_t> dims;
  for (int64_t s : shape) {
    if (s < 0) throw InvalidArgument("shape", "non-negative sizes", std::to_string(s));
    dims.push_back(static_cast<size_t>(s));
    count *= static_cast<size_t>(s);
  }
  const size_t bytes = count * static_cast<size_t>(dtype_size(dt));
  void* ptr = be.allocate(bytes > 0 ? bytes : 1);
  auto* holder = new DeviceBuffer{&be, ptr};
  nb::capsule owner(holder, [](void* p) noexcept {
    auto* h = static_cast<DeviceBuffer*>(p);
    h->backend->deallocate(h->ptr);
    delete h;
  });
  nb::dlpack::dtype dl;
  switch (dt) {
    case DType::kF32: dl = nb::dtype<float>(); break;
    case DType::kF64: dl = nb::dtype<double>(); break;
    case DType::kI32: dl = nb::dtype<int32_t>(); break;
    case DType::kU32: dl = nb::dtype<uint32_t>(); break;
    case DType::kU8: dl = nb::dtype<uint8_t>(); break;
    case DType::kF16: dl = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}; break;
    case DType::kBF16: dl = {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1}; break;
  }
  const int dl_device = type == DeviceType::kCpu ? 1 : (type == DeviceType::kCuda ? 2 : 10);
  return nb::ndarray<nb::array_api>(ptr, dims.size(), dims.data(), owner, nullptr, dl, dl_device, type == DeviceType::kCpu ? 0 : device_id);
}

}  // namespace
}  // namespace dashattn::python

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  using namespace nb::literals;
  using namespace dashattn;
  using namespace dashattn::python;

  m.doc() = "libdashattn extension module; use the `dashattn` package, which wraps it.";
  nb::register_exception_translator(&translate);

  m.attr("__version__") = DASHATTN_VERSION_STRING;
  m.attr("compiled_backends") = nb::cast(dashattn::compiled_backends());
  m.def("backends", &backend_list, "Every backend compiled into this build with its availability.");
  m.def("empty", &empty_array, "shape"_a, "dtype"_a, "device"_a = "cpu", "device_id"_a = 0, "backend"_a = "auto",
        "Uninitialized memory from a backend's allocator, exported through DLPack.");

  nb::class_<MethodParams>(m, "Method", "Method parameters (chunk size, entmax alpha, gamma, sigma, prior, ...).")
      .def(nb::new_(&make_method), "chunk_size"_a = 64, "alpha"_a = 1.5f, "gamma"_a = 1.0f, "sigma"_a = 1e8f,
           "scale"_a = 0.0f, "prior"_a = "estimate_diagonal", "solver"_a = "exact")
      .def_rw("chunk_size", &MethodParams::chunk_size)
      .def_rw("alpha", &MethodParams::alpha)
      .def_rw("gamma", &MethodParams::gamma)
      .def_rw("sigma", &MethodParams::sigma)
      .def_rw("scale", &MethodParams::scale)
      .def_prop_rw(
          "prior", [](const MethodParams& p) { return std::string(prior_mode_name(p.prior)); },
          [](MethodParams& p, const std::string& v) { p.prior = parse_prior(v); })
      .def_prop_rw(
          "solver", [](const MethodParams& p) { return std::string(solver_name(p.solver)); },
          [](MethodParams& p, const std::string& v) { p.solver = parse_solver(v); })
      .def("validate", [](const MethodParams& p) { validate_method(p); }, "Raises if a parameter is out of range.")
      .def("__repr__", [](const MethodParams& p) {
        return "Method(chunk_size=" + std::to_string(p.chunk_size) + ", alpha=" + std::to_string(p.alpha) +
               ", gamma=" + std::to_string(p.gamma) + ", sigma=" + std::to_string(p.sigma) +
               ", scale=" + std::to_string(p.scale) + ", prior='" + prior_mode_name(p.prior) + "', solver='" +
               solver_name(p.solver) + "')";
      });

  nb::class_<PyBatch>(m, "Batch",
                      "Batch layout: packed varlen (cu_seqlens), or padded with per-sequence lengths and optionally "
                      "paged K/V (block_table with max_seqlen_k).")
      .def(
          "__init__",
          [](PyBatch* self, const InArray& cu_q, const InArray& cu_k, int max_q, int max_k, const InArray& sq,
             const InArray& sk, const InArray& table) {
            new (self) PyBatch{cu_q, cu_k, sq, sk, max_q, max_k, table};
          },
          nb::arg("cu_seqlens_q").none() = nb::none(), nb::arg("cu_seqlens_k").none() = nb::none(),
          "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0, nb::arg("seqlens_q").none() = nb::none(),
          nb::arg("seqlens_k").none() = nb::none(), nb::arg("block_table").none() = nb::none())
      .def_prop_ro("is_varlen", &PyBatch::is_varlen)
      .def_prop_ro("is_paged", &PyBatch::is_paged)
      .def_ro("max_seqlen_q", &PyBatch::max_seqlen_q)
      .def_ro("max_seqlen_k", &PyBatch::max_seqlen_k);

  bind_ops(m);
  bind_decoder(m);
}
