// safetensors: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// then the data. Offsets are relative to the end of the header and must tile the data exactly: no holes, no
// overlaps, nothing left over (as the reference library validates).
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "byte_io.h"
#include "formats.h"

namespace dashattn::io {
namespace detail {
namespace {

using nlohmann::json;

struct DtypeName {
  DType dtype;
  const char* name;
};
constexpr DtypeName kDtypeNames[] = {{DType::kF32, "F32"}, {DType::kF16, "F16"}, {DType::kBF16, "BF16"},
                                     {DType::kF64, "F64"}, {DType::kI32, "I32"}, {DType::kU32, "U32"},
                                     {DType::kU8, "U8"}};
// Valid safetensors dtypes that dashattn has no type for: named in the error rather than called unknown.
constexpr const char* kUnsupportedDtypes[] = {"BOOL", "I8",      "I16",     "U16",     "I64",     "U64",
                                              "C64",  "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2",
                                              "F4"};

const char* safetensors_dtype(DType t) {
  for (const auto& d : kDtypeNames)
    if (d.dtype == t) return d.name;
  return "?";
}

DType parse_dtype_field(const std::string& source, const std::string& tensor, const json& value) {
  const std::string where = "tensor '" + tensor + "': ";
  if (!value.is_string()) fail(source, where + "\"dtype\" must be a string, got " + value.dump());
  const auto& s = value.get_ref<const std::string&>();
  for (const auto& d : kDtypeNames)
    if (s == d.name) return d.dtype;
  for (const char* u : kUnsupportedDtypes) {
    if (s == u) fail(source, where + "dtype " + s + " is not supported (supported: F32, F16, BF16, F64, I32, U32, U8)");
  }
  fail(source, where + "unknown dtype \"" + s + "\"");
}

std::vector<int64_t> parse_shape_field(const std::string& source, const std::string& tensor, const json& value) {
  const std::string where = "tensor '" + tensor + "': ";
  if (!value.is_array()) fail(source, where + "\"shape\" must be an array of integers, got " + value.dump());
  if (value.size() > kMaxFileRank) {
    fail(source, where + "rank " + std::to_string(value.size()) + " exceeds " + std::to_string(kMaxFileRank));
  }
  std::vector<int64_t> shape;
  for (const json& dim : value) {
    if (dim.is_number_unsigned()) {
      const uint64_t u = dim.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) fail(source, where + "shape entry " + dim.dump() + " is too large");
      shape.push_back(static_cast<int64_t>(u));
    } else if (dim.is_number_integer()) {
      fail(source, where + "shape entry " + dim.dump() + " is negative");
    } else {
      fail(source, where + "shape entry " + dim.dump() + " is not an integer");
    }
  }
  return shape;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& source, const std::string& name, const json& value, uint64_t data_size) {
  const std::string where = "tensor '" + name + "': ";
  if (!value.is_object()) fail(source, where + "entry must be a JSON object, got " + value.dump());
  for (const auto& field : value.items()) {
    if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets") {
      fail(source, where + "unexpected field \"" + field.key() + "\"");
    }
  }
  for (const char* required : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(required)) fail(source, where + "missing field \"" + required + "\"");
  }
  Entry e;
  e.name = name;
  e.dtype = parse_dtype_field(source, name, value["dtype"]);
  e.shape = parse_shape_field(source, name, value["shape"]);
  int64_t numel = 0;
  uint64_t nbytes = 0;
  if (!checked_numel(e.shape, &numel) || !checked_nbytes(numel, e.dtype, &nbytes)) {
    fail(source, where + "shape " + shape_to_string(e.shape) + " overflows 64-bit sizes");
  }
  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail(source, where + "\"data_offsets\" must be [begin, end] with non-negative integers, got " + offsets.dump());
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end) fail(source, where + "data_offsets " + range + " are reversed");
  if (e.end > data_size) {
    fail(source, where + "data_offsets " + range + " exceed the " + std::to_string(data_size) +
                     " data bytes after the header (truncated file?)");
  }
  if (e.end - e.begin != nbytes) {
    fail(source, where + "data_offsets " + range + " span " + std::to_string(e.end - e.begin) +
                     " bytes but shape " + shape_to_string(e.shape) + " of " + safetensors_dtype(e.dtype) +
                     " needs " + std::to_string(nbytes));
  }
  return e;
}

// Parses the header, rejecting duplicate keys (which a plain JSON parse would silently collapse) and nesting
// deeper than the format ever needs.
json parse_header_json(const std::string& source, const std::string& text) {
  constexpr int kMaxDepth = 8;
  std::vector<std::set<std::string>> keys_per_object;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxDepth) fail(source, "header JSON nests deeper than " + std::to_string(kMaxDepth) + " levels");
    if (event == json::parse_event_t::object_start) keys_per_object.emplace_back();
    if (event == json::parse_event_t::object_end && !keys_per_object.empty()) keys_per_object.pop_back();
    if (event == json::parse_event_t::key && !keys_per_object.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!keys_per_object.back().insert(key).second) {
        fail(source, std::string(depth == 1 ? "duplicate tensor name" : "duplicate field") + " \"" + key +
                         "\" in header");
      }
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, callback, /*allow_exceptions=*/false);
  } catch (const json::exception& e) {
    fail(source, std::string("header is not valid JSON: ") + e.what());
  }
  if (j.is_discarded()) fail(source, "header is not valid JSON");
  if (!j.is_object()) fail(source, "header must be a JSON object, got a JSON " + std::string(j.type_name()));
  return j;
}

}  // namespace

TensorFile read_safetensors_from(const ByteSource& src) {
  const std::string& source = src.name();
  if (src.size() < 8) {
    fail(source, "too short for safetensors: " + std::to_string(src.size()) + " bytes, the header length needs 8");
  }
  uint8_t prefix[8];
  src.read(0, prefix, 8);
  const uint64_t header_len = load_le64(prefix);
  if (header_len > kMaxSafetensorsHeaderBytes) {
    fail(source, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                     std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (header_len > src.size() - 8) {
    fail(source, "truncated: header length " + std::to_string(header_len) + " but only " +
                     std::to_string(src.size() - 8) + " bytes follow");
  }
  std::string text(header_len, '\0');
  src.read(8, text.data(), header_len);
  if (text.empty() || text[0] != '{') fail(source, "header must start with '{' (a JSON object)");
  const json header = parse_header_json(source, text);

  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = src.size() - data_begin;
  TensorFile file;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) fail(source, "\"__metadata__\" must be an object of strings");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string()) {
          fail(source, "\"__metadata__\" value of \"" + m.key() + "\" must be a string, got " + m.value().dump());
        }
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(source, item.key(), item.value(), data_size));
  }

  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < expected) {
      fail(source, "tensor '" + e.name + "': data overlaps tensor '" + previous->name + "'");
    }
    if (e.begin > expected) {
      fail(source, "tensor '" + e.name + "': hole of " + std::to_string(e.begin - expected) +
                       " bytes before its data (offsets must be contiguous)");
    }
    expected = e.end;
    previous = &e;
  }
  if (expected != data_size) {
    fail(source, std::to_string(data_size - expected) + " bytes after the last tensor's data are not described");
  }

  for (Entry& e : entries) {
    std::vector<uint8_t> bytes = src.read_vector(data_begin + e.begin, static_cast<size_t>(e.end - e.begin));
    file.add(Tensor(std::move(e.name), e.dtype, std::move(e.shape), std::move(bytes)));
  }
  return file;
}

void write_safetensors_to(const TensorFile& file, ByteSink& sink, const std::string& target) {
  std::vector<const Tensor*> order;
  for (const Tensor& t : file) {
    if (t.name() == "__metadata__") fail(target, "\"__metadata__\" is reserved and cannot name a tensor");
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Tensor* a, const Tensor* b) { return dtype_size(a->dtype()) > dtype_size(b->dtype()); });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : file.metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const Tensor* t : order) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype(t->dtype());
    entry["shape"] = t->shape();
    entry["data_offsets"] = {offset, offset + t->nbytes()};
    header[t->name()] = std::move(entry);
    offset += t->nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(target, std::string("tensor names and metadata must be valid UTF-8: ") + e.what());
  }
  // Padding with spaces keeps the data (and so every tensor, given the order above) 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string prefix;
  append_le(prefix, text.size(), 8);
  sink.write(prefix);
  sink.write(text);
  for (const Tensor* t : order) sink.write(t->data(), t->nbytes());
}

}  // namespace detail

TensorFile parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  return detail::read_safetensors_from(detail::MemorySource(data, size, source));
}

TensorFile read_safetensors(const std::string& path) {
  return detail::read_safetensors_from(detail::FileSource(path));
}

std::vector<uint8_t> serialize_safetensors(const TensorFile& file) {
  detail::VectorSink sink;
  detail::write_safetensors_to(file, sink, "<memory>");
  return std::move(sink.bytes);
}

void write_safetensors(const std::string& path, const TensorFile& file) {
  detail::FileSink sink(path);
  detail::write_safetensors_to(file, sink, path);
  sink.commit();
}

}  // namespace dashattn::io
