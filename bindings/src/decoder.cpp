// dashattn._core.Decoder: libdashattn's Decoder (owner of the growing K/V and chunk-summary caches, contiguous or
// paged) for Python.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"

namespace dashattn::python {
namespace {

class PyDecoder {
 public:
  PyDecoder(int64_t batch, int64_t h_q, int64_t h_kv, int64_t d, const std::string& dtype, const MethodParams& method,
            const std::string& device, int device_id, const std::string& backend, const InArray& summary_query,
            int64_t initial_capacity, int64_t page_size, bool u16_is_bf16)
      : summary_query_(summary_query), u16_is_bf16_(u16_is_bf16) {
    DecoderConfig cfg;
    cfg.batch = batch;
    cfg.h_q = h_q;
    cfg.h_kv = h_kv;
    cfg.d = d;
    if (!parse_dtype(dtype, &cfg.dtype)) throw InvalidArgument("dtype", "'f32', 'f16' or 'bf16'", "'" + dtype + "'");
    cfg.method = method;
    cfg.initial_capacity = initial_capacity;
    cfg.page_size = page_size;
    Device dev{DeviceType::kCpu, 0};
    if (device == "cuda") {
      dev = Device{DeviceType::kCuda, device_id};
    } else if (device == "hip") {
      dev = Device{DeviceType::kHip, device_id};
    } else if (device != "cpu") {
      throw InvalidArgument("device", "'cpu', 'cuda' or 'hip'", "'" + device + "'");
    }
    Backend& be = pick_backend(backend, dev);
    TensorView sq = plain_view(summary_query_, "summary_query", ViewOptions{Layout::kBnhd, u16_is_bf16});
    if (sq.defined()) {
      if (sq.device.type != dev.type) {
        throw InvalidArgument("summary_query.device", std::string(device_type_name(dev.type)) + " (the decoder's device)",
                              device_type_name(sq.device.type));
      }
      if (sq.rank != 2 || sq.shape[0] != h_kv || sq.shape[1] != d) {
        throw InvalidArgument("summary_query.shape", "[" + std::to_string(h_kv) + ", " + std::to_string(d) + "]",
                              sq.shape_string());
      }
    }
    decoder_ = std::make_unique<Decoder>(be, cfg, sq);
    device_ = dev;
    dtype_ = cfg.dtype;
  }

  void step(const InArray& q, const InArray& k, const InArray& v, const OutArray& o, const OutArray& lse,
            const OutArray& mask, const OutArray& tau, const OutArray& mu, const OutArray& active,
            const std::string& layout, uintptr_t stream, const std::optional<std::vector<int32_t>>& new_tokens) {
    // The counts are a host array of one entry per sequence; their values are checked by Decoder::step.
    if (new_tokens && new_tokens->size() != decoder_->lengths().size()) {
      throw InvalidArgument("new_tokens", std::to_string(decoder_->lengths().size()) + " counts (one per sequence)",
                            std::to_string(new_tokens->size()) + " counts");
    }
    ViewOptions opt{parse_layout(layout), u16_is_bf16_};
    const TensorView qv = attention_view(q, "q", opt), kv = attention_view(k, "k", opt),
                     vv = attention_view(v, "v", opt), ov = attention_view(o, "o", opt);
    RoutingView r;
    r.mask = plain_view(mask, "mask");
    r.tau = plain_view(tau, "tau");
    r.mu = plain_view(mu, "mu");
    r.active_chunks = plain_view(active, "active_chunks");
    const TensorView lv = plain_view(lse, "lse");
    nb::gil_scoped_release release;
    decoder_->stream = stream_pointer(stream);
    decoder_->step(qv, kv, vv, ov, lv, r, new_tokens ? new_tokens->data() : nullptr);
  }

  // A view of one cache ([b, rows, h_kv, d], a page pool or the int32 block table); it keeps this decoder alive
  // but is only valid until the next step(), which may move the cache when it grows.
  nb::ndarray<nb::array_api> cache(const TensorView& t, nb::handle self) const {
    size_t shape[4] = {};
    for (int i = 0; i < t.rank; ++i) shape[i] = static_cast<size_t>(t.shape[i]);
    nb::dlpack::dtype dl;
    if (t.dtype == DType::kF32) {
      dl = nb::dtype<float>();
    } else if (t.dtype == DType::kI32) {
      dl = nb::dtype<int32_t>();
    } else {
      const auto code = t.dtype == DType::kBF16 ? nb::dlpack::dtype_code::Bfloat : nb::dlpack::dtype_code::Float;
      dl = {static_cast<uint8_t>(code), 16, 1};
    }
    const int dl_device = device_.type == DeviceType::kCpu ? 1 : (device_.type == DeviceType::kCuda ? 2 : 10);
    return nb::ndarray<nb::array_api>(t.data, static_cast<size_t>(t.rank), shape, self, t.stride.data(), dl,
                                      dl_device, device_.index);
  }

  Decoder& decoder() { return *decoder_; }
  const Decoder& decoder() const { return *decoder_; }
  DType dtype() const { return dtype_; }

 private:
  InArray summary_query_;  // keeps the summary query's memory alive as long as the decoder reads it
  bool u16_is_bf16_ = false;
  std::unique_ptr<Decoder> decoder_;
  Device device_{};
  DType dtype_ = DType::kBF16;
};

// The method returning the decoder's view `Get` as an array (see PyDecoder::cache).
template <TensorView (Decoder::*Get)() const>
nb::ndarray<nb::array_api> cache_of(nb::handle self) {
  const PyDecoder& d = nb::cast<const PyDecoder&>(self);
  return d.cache((d.decoder().*Get)(), self);
}

}  // namespace

void bind_decoder(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<PyDecoder>(m, "Decoder", "Cached decoding over a padded batch: owns the K/V and summary caches.")
      .def(nb::init<int64_t, int64_t, int64_t, int64_t, const std::string&, const MethodParams&, const std::string&,
                    int, const std::string&, const InArray&, int64_t, int64_t, bool>(),
           "batch"_a, "h_q"_a, "h_kv"_a, "d"_a, "dtype"_a, "method"_a, "device"_a = "cpu", "device_id"_a = 0,
           "backend"_a = "auto", nb::arg("summary_query").none() = nb::none(), "initial_capacity"_a = 4096,
           "page_size"_a = 0, "u16_is_bf16"_a = false)
      .def("step", &PyDecoder::step, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "o"_a.noconvert(),
           nb::kw_only(), nb::arg("lse").none() = nb::none(), nb::arg("mask").none() = nb::none(),
           nb::arg("tau").none() = nb::none(), nb::arg("mu").none() = nb::none(),
           nb::arg("active_chunks").none() = nb::none(), "layout"_a = "bnhd", "stream"_a = 0,
           nb::arg("new_tokens").none() = nb::none(),
           "Appends up to t tokens per sequence (new_tokens[i], default t) and writes their attention outputs into o.")
      .def_prop_ro("length", [](const PyDecoder& d) { return d.decoder().length(); })
      .def_prop_ro("lengths", [](const PyDecoder& d) { return d.decoder().lengths(); })
      .def_prop_ro("capacity", [](const PyDecoder& d) { return d.decoder().capacity(); })
      .def_prop_ro("summarized_chunks", [](const PyDecoder& d) { return d.decoder().summarized_chunks(); })
      .def_prop_ro("backend", [](const PyDecoder& d) { return std::string(d.decoder().backend().name()); })
      .def_prop_ro("dtype", [](const PyDecoder& d) { return std::string(dtype_name(d.dtype())); })
      .def("keys", &cache_of<&Decoder::keys>)
      .def("values", &cache_of<&Decoder::values>)
      .def("summaries", &cache_of<&Decoder::summaries>)
      .def_prop_ro("page_size", [](const PyDecoder& d) { return d.decoder().page_size(); })
      .def_prop_ro("num_pages", [](const PyDecoder& d) { return d.decoder().num_pages(); })
      .def_prop_ro("free_pages", [](const PyDecoder& d) { return d.decoder().free_pages(); })
      // Both run on the stream of the last step (Decoder::stream), after the work queued there.
      .def("reset", [](PyDecoder& d, int64_t seq) { d.decoder().reset(seq); }, "seq"_a,
           "Ends sequence seq: its length becomes 0 and a paged decoder's pages return to the pool.")
      .def("fork", [](PyDecoder& d, int64_t src, int64_t dst) { d.decoder().fork(src, dst); }, "src"_a, "dst"_a,
           "Makes sequence dst a copy of sequence src (a paged decoder shares src's full pages).")
      .def("key_pages", &cache_of<&Decoder::key_pages>)
      .def("value_pages", &cache_of<&Decoder::value_pages>)
      .def("block_table", &cache_of<&Decoder::block_table>);
}

}  // namespace dashattn::python
