#include "dashattn/decoder.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "dashattn/dashattn.h"
#include "kv_page_pool.h"

namespace dashattn {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// New keys/values are appended with one copy per sequence, so each sequence's [t, h, d] block must be dense.
void require_row_dense(const std::string& name, const TensorView& t, int64_t b, int64_t steps, int64_t h, int64_t d,
                       DType dtype, const Device& dev) {
  if (!t.defined()) throw InvalidArgument(name, "a tensor with non-null data", "null data");
  if (t.rank != 4 || t.shape[0] != b || t.shape[1] != steps || t.shape[2] != h || t.shape[3] != d) {
    throw InvalidArgument(name + ".shape", "[" + str(b) + ", " + str(steps) + ", " + str(h) + ", " + str(d) + "]",
                          t.shape_string());
  }
  if (t.dtype != dtype) throw InvalidArgument(name + ".dtype", dtype_name(dtype), dtype_name(t.dtype));
  if (t.device != dev) throw InvalidArgument(name + ".device", "the decoder's device", device_type_name(t.device.type));
  if (t.stride[3] != 1 || t.stride[2] != d || (steps > 1 && t.stride[1] != h * d)) {
    throw InvalidArgument(name + ".stride", "dense [t, h, d] rows per sequence (strides [*, h*d, d, 1])",
                          "[" + str(t.stride[0]) + ", " + str(t.stride[1]) + ", " + str(t.stride[2]) + ", " +
                              str(t.stride[3]) + "]");
  }
}

// 0 (contiguous) or a positive multiple of 64 and of the chunk size: the page rule of BatchLayout::block_table.
void check_page_size(int64_t page_size, int64_t chunk) {
  if (page_size == 0 || is_valid_page_size(page_size, chunk)) return;
  throw InvalidArgument("page_size",
                        "0 (contiguous caches) or a positive multiple of 64 and of chunk_size = " + str(chunk) +
                            " (a multiple of " + str(std::lcm<int64_t>(64, chunk)) + ")",
                        str(page_size));
}

// Each sequence's count of new tokens in a step of t = `steps` rows: new_tokens[i], checked to lie in [0, t], or t
// for every sequence when new_tokens is null.
std::vector<int64_t> token_counts(const int32_t* new_tokens, int64_t batch, int64_t steps) {
  std::vector<int64_t> counts(static_cast<size_t>(batch), steps);
  if (new_tokens == nullptr) return counts;
  for (int64_t i = 0; i < batch; ++i) {
    if (new_tokens[i] < 0 || new_tokens[i] > steps) {
      throw InvalidArgument("new_tokens[" + str(i) + "]", "a count in [0, " + str(steps) + "] (t = q.shape[1])",
                            str(new_tokens[i]));
    }
    counts[i] = new_tokens[i];
  }
  return counts;
}

}  // namespace

Decoder::Decoder(Backend& backend, const DecoderConfig& config, const TensorView& summary_query)
    : backend_(backend), config_(config), summary_query_(summary_query) {
  validate_method(config.method);
  if (config.batch < 1) throw InvalidArgument("batch", ">= 1", str(config.batch));
  if (config.h_kv < 1 || config.h_q < 1 || config.h_q % config.h_kv != 0) {
    throw InvalidArgument("h_kv", "a divisor of h_q = " + str(config.h_q), str(config.h_kv));
  }
  if (config.d < 1) throw InvalidArgument("d", ">= 1", str(config.d));
  if (!is_attention_dtype(config.dtype)) throw InvalidArgument("dtype", "f32, f16 or bf16", dtype_name(config.dtype));
  check_page_size(config.page_size, config.method.chunk_size);
  const Probe probe = Registry::instance().probe(backend);
  if (!probe.available) throw BackendUnavailable(backend.name(), probe.reason);
  lengths_.assign(static_cast<size_t>(config.batch), 0);
  if (config.page_size > 0) pages_ = std::make_unique<detail::KvPagePool>(backend, config);
  try {
    reserve(std::max<int64_t>(config.initial_capacity, config.method.chunk_size));
  } catch (...) {
    // The destructor does not run for a constructor that throws: the pool frees itself, the rest is freed here.
    backend_.deallocate(k_);
    backend_.deallocate(v_);
    backend_.deallocate(s_);
    throw;
  }
}

Decoder::~Decoder() {
  try {
    backend_.synchronize(stream);
  } catch (...) {
  }
  backend_.deallocate(k_);
  backend_.deallocate(v_);
  backend_.deallocate(s_);
  backend_.deallocate(seqlens_);
  backend_.deallocate(workspace_);
}

TensorView Decoder::cache_view(void* data, int64_t rows, int64_t cap_rows) const {
  TensorView t = make_view(data, config_.dtype, {config_.batch, rows, config_.h_kv, config_.d},
                           Device{backend_.device_type(), config_.device_index});
  t.stride[0] = cap_rows * config_.h_kv * config_.d;
  return t;
}

// keys() / values(): a strided view of a contiguous cache; a paged decoder's rows are reached through its table.
TensorView Decoder::contiguous_cache(const std::string& name, void* data) const {
  if (pages_) {
    throw InvalidArgument(name, "a contiguous decoder (page_size = 0); a paged decoder's " + name + " are " +
                                    (name == "keys" ? "key_pages()" : "value_pages()") +
                                    " read through block_table() (or gathered)",
                          "page_size = " + str(config_.page_size));
  }
  return cache_view(data, length(), capacity_);
}
TensorView Decoder::keys() const { return contiguous_cache("keys", k_); }
TensorView Decoder::values() const { return contiguous_cache("values", v_); }
TensorView Decoder::summaries() const {
  return cache_view(s_, summarized_chunks(), capacity_ / config_.method.chunk_size);
}

// Derived from the lengths, so that they cannot disagree with them.
int64_t Decoder::length() const { return *std::max_element(lengths_.begin(), lengths_.end()); }
int64_t Decoder::summarized_chunks() const {
  return num_complete_chunks(*std::min_element(lengths_.begin(), lengths_.end()), config_.method.chunk_size);
}

const detail::KvPagePool& Decoder::pages(const char* accessor) const {
  if (!pages_) throw InvalidArgument(accessor, "a paged decoder (page_size > 0)", "page_size = 0 (contiguous caches)");
  return *pages_;
}
int64_t Decoder::num_pages() const { return pages_ ? pages_->num_pages() : 0; }
int64_t Decoder::free_pages() const { return pages_ ? pages_->free_pages() : 0; }
TensorView Decoder::key_pages() const { return pages("key_pages").key_pages(); }
TensorView Decoder::value_pages() const { return pages("value_pages").value_pages(); }
TensorView Decoder::block_table() const { return pages("block_table").table(); }

void Decoder::reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  const int64_t chunk = config_.method.chunk_size;
  // Geometric growth keeps appends amortized O(1); capacity stays a multiple of the chunk size. A paged decoder
  // grows only the summary cache here (its pool grows page by page).
  int64_t cap = std::max<int64_t>(tokens, capacity_ * 2);
  cap = (cap + chunk - 1) / chunk * chunk;
  const int64_t row = config_.h_kv * config_.d * dtype_size(config_.dtype);  // bytes per token per sequence
  const int64_t b = config_.batch;
  const bool contiguous = !pages_;
  void* nk = contiguous ? backend_.allocate(static_cast<size_t>(b * cap * row)) : nullptr;
  void* nv = contiguous ? backend_.allocate(static_cast<size_t>(b * cap * row)) : nullptr;
  void* ns = backend_.allocate(static_cast<size_t>(b * (cap / chunk) * row));
  for (int64_t i = 0; i < b; ++i) {
    // Each sequence's own rows: those past its length were never written.
    if (contiguous && lengths_[i] > 0) {
      backend_.copy(static_cast<char*>(nk) + i * cap * row, static_cast<char*>(k_) + i * capacity_ * row,
                    static_cast<size_t>(lengths_[i] * row), CopyKind::kDeviceToDevice, stream);
      backend_.copy(static_cast<char*>(nv) + i * cap * row, static_cast<char*>(v_) + i * capacity_ * row,
                    static_cast<size_t>(lengths_[i] * row), CopyKind::kDeviceToDevice, stream);
    }
    // Each sequence's own summaries: a ragged step starts Stage 0 at every sequence's complete chunks, so chunks
    // past the shortest sequence's must survive the growth too.
    const int64_t summaries = num_complete_chunks(lengths_[i], chunk);
    if (summaries > 0) {
      backend_.copy(static_cast<char*>(ns) + i * (cap / chunk) * row,
                    static_cast<char*>(s_) + i * (capacity_ / chunk) * row, static_cast<size_t>(summaries * row),
                    CopyKind::kDeviceToDevice, stream);
    }
  }
  backend_.synchronize(stream);
  backend_.deallocate(k_);
  backend_.deallocate(v_);
  backend_.deallocate(s_);
  k_ = nk;
  v_ = nv;
  s_ = ns;
  capacity_ = cap;
}

void Decoder::reserve_workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return;
  // A step in flight may still use the old workspace. Growth is geometric, so this wait happens a few times in a
  // decoder's life, not per step.
  const size_t grown = std::max(bytes, 2 * workspace_bytes_);
  backend_.synchronize(stream);
  backend_.deallocate(workspace_);
  workspace_ = nullptr;  // an allocation that throws leaves the decoder without one, to be retried next step
  workspace_bytes_ = 0;
  workspace_ = backend_.allocate(grown);
  workspace_bytes_ = grown;
}

void Decoder::check_sequence(const char* argument, int64_t seq) const {
  if (seq < 0 || seq >= config_.batch) {
    throw InvalidArgument(argument, "a sequence index in [0, " + str(config_.batch) + ")", str(seq));
  }
}

// Rows [0, rows) of sequence src copied over sequence dst's in a per-sequence cache of cap_rows rows each.
void Decoder::copy_sequence_rows(void* cache, int64_t cap_rows, int64_t src, int64_t dst, int64_t rows) {
  if (rows == 0) return;
  const int64_t row = config_.h_kv * config_.d * dtype_size(config_.dtype);
  char* base = static_cast<char*>(cache);
  backend_.copy(base + dst * cap_rows * row, base + src * cap_rows * row, static_cast<size_t>(rows * row),
                CopyKind::kDeviceToDevice, stream);
}

// A paged decoder's table goes to the device at once, so that block_table() shows the change before the next step.
void Decoder::reset(int64_t seq) {
  check_sequence("seq", seq);
  empty_sequence(seq);
  if (pages_) pages_->upload_table(stream);
}

void Decoder::empty_sequence(int64_t seq) {
  if (pages_) pages_->release(seq);
  lengths_[seq] = 0;
}

void Decoder::fork(int64_t src, int64_t dst) {
  check_sequence("src", src);
  check_sequence("dst", dst);
  if (src == dst) return;
  const int64_t keys = lengths_[src];
  // dst is empty first, so that if a copy below fails the decoder holds a shorter dst, never a mixed one.
  empty_sequence(dst);
  if (pages_) {
    pages_->share_prefix(src, dst, keys, stream);
    pages_->upload_table(stream);  // one upload for the release and the shared prefix
  } else {
    copy_sequence_rows(k_, capacity_, src, dst, keys);
    copy_sequence_rows(v_, capacity_, src, dst, keys);
  }
  const int64_t chunk = config_.method.chunk_size;
  copy_sequence_rows(s_, capacity_ / chunk, src, dst, num_complete_chunks(keys, chunk));
  lengths_[dst] = keys;
}

// Each sequence's new rows of k and v after its own length: two regions per sequence, copied in one call (one
// copy call per region cost a b = 24 decode step more than its kernels; bench/gpu/decoder_step.cu).
void Decoder::append_contiguous(const TensorView& k, const TensorView& v, const std::vector<int64_t>& counts) {
  const int64_t row = config_.h_kv * config_.d * dtype_size(config_.dtype);
  const int64_t es = dtype_size(config_.dtype);
  std::vector<CopyRegion> regions;
  regions.reserve(static_cast<size_t>(2 * config_.batch));
  for (int64_t i = 0; i < config_.batch; ++i) {
    if (counts[i] == 0) continue;
    const size_t bytes = static_cast<size_t>(counts[i] * row);
    regions.push_back({static_cast<char*>(k_) + (i * capacity_ + lengths_[i]) * row,
                       static_cast<const char*>(k.data) + i * k.stride[0] * es, bytes});
    regions.push_back({static_cast<char*>(v_) + (i * capacity_ + lengths_[i]) * row,
                       static_cast<const char*>(v.data) + i * v.stride[0] * es, bytes});
  }
  backend_.copy_regions(regions.data(), regions.size(), stream);
}

// Copies a ragged step's per-sequence query counts, key lengths and summarized chunks to the device ([3, b] int32:
// seqlens_q, seqlens_k, then each sequence's complete chunks before the step, so that Stage 0 summarizes only the
// chunks the step completes) on the decoder's stream. The host source is a member: it must outlive an asynchronous
// copy.
void Decoder::upload_seqlens(const std::vector<int64_t>& counts, const std::vector<int64_t>& ends) {
  const int64_t b = config_.batch;
  if (seqlens_ == nullptr) seqlens_ = backend_.allocate(static_cast<size_t>(3 * b) * sizeof(int32_t));
  host_seqlens_.resize(static_cast<size_t>(3 * b));
  for (int64_t i = 0; i < b; ++i) {
    host_seqlens_[i] = static_cast<int32_t>(counts[i]);
    host_seqlens_[b + i] = static_cast<int32_t>(ends[i]);
    host_seqlens_[2 * b + i] = static_cast<int32_t>(num_complete_chunks(lengths_[i], config_.method.chunk_size));
  }
  backend_.copy(seqlens_, host_seqlens_.data(), host_seqlens_.size() * sizeof(int32_t), CopyKind::kHostToDevice,
                stream);
}

void Decoder::step(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                   const TensorView& lse, const RoutingView& routing, const int32_t* new_tokens) {
  const Device dev{backend_.device_type(), config_.device_index};
  if (!q.defined() || q.rank != 4) throw InvalidArgument("q", "rank 4 [b, t, h_q, d]", q.shape_string());
  const int64_t steps = q.shape[1];
  if (steps < 1) throw InvalidArgument("q.shape[1]", ">= 1 new token", str(steps));
  require_row_dense("k", k, config_.batch, steps, config_.h_kv, config_.d, config_.dtype, dev);
  require_row_dense("v", v, config_.batch, steps, config_.h_kv, config_.d, config_.dtype, dev);
  const std::vector<int64_t> counts = token_counts(new_tokens, config_.batch, steps);

  // A step is ragged when its sequences end at different lengths or some rows of q are padding: forward() then
  // takes per-sequence lengths. A uniform step is the plain padded batch of equal lengths.
  std::vector<int64_t> ends(counts.size());
  bool ragged = false;
  for (size_t i = 0; i < counts.size(); ++i) {
    ends[i] = lengths_[i] + counts[i];
    ragged = ragged || counts[i] != steps || lengths_[i] != lengths_[0];
  }
  // The padded key length: the longest sequence, and at least t so that q's rows fit (n_q <= n_k).
  const int64_t n_k = std::max(steps, *std::max_element(ends.begin(), ends.end()));
  if ((pages_ || ragged) && n_k > std::numeric_limits<int>::max()) {
    // A paged forward takes the key length as BatchLayout::max_seqlen_k, an int; per-sequence lengths are int32.
    throw InvalidArgument("q.shape[1]", "at most " + str(std::numeric_limits<int>::max() - length()) +
                                            " new tokens (a paged cache or sequences of different lengths hold "
                                            "< 2^31 keys per sequence)", str(steps));
  }

  reserve(n_k);
  ForwardParams p;
  if (pages_) {
    // Rows of a step that does not commit stay in their pages and are rewritten by the next step: a retry reads
    // the same pages.
    pages_->reserve(ends, n_k, stream);
    pages_->append(k, v, lengths_, counts, stream);
    pages_->upload_table(stream);
    pages_->describe(&p, n_k);
  } else {
    append_contiguous(k, v, counts);
    p.k = cache_view(k_, n_k, capacity_);
    p.v = cache_view(v_, n_k, capacity_);
  }
  if (ragged) {
    upload_seqlens(counts, ends);
    p.batch.seqlens_q = static_cast<const int32_t*>(seqlens_);
    p.batch.seqlens_k = static_cast<const int32_t*>(seqlens_) + config_.batch;
    p.summaries_valid_per_seq = static_cast<const int32_t*>(seqlens_) + 2 * config_.batch;
  }
  p.q = q;
  p.summary_query = summary_query_;
  p.summaries = cache_view(s_, capacity_ / config_.method.chunk_size, capacity_ / config_.method.chunk_size);
  // The shortest sequence's complete chunks; a ragged step also passes each sequence's own (upload_seqlens), so
  // Stage 0 summarizes only the chunks this step completes.
  p.summaries_valid = summarized_chunks();
  p.o = o;
  p.lse = lse;
  p.routing = routing;
  p.method = config_.method;
  p.stream = stream;
  // The step runs on the decoder's own workspace (workspace_size() also validates the arguments, before anything
  // is launched).
  reserve_workspace(workspace_size(backend_, p));
  p.workspace = workspace_;
  p.workspace_bytes = workspace_bytes_;
  // If forward throws (bad q or o), the lengths are not advanced: the appended rows are not committed and the
  // caller can retry with corrected arguments.
  forward(backend_, p);
  lengths_ = ends;
}

}  // namespace dashattn
