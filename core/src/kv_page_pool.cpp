#include "kv_page_pool.h"

#include <algorithm>
#include <limits>
#include <string>

#include "dashattn/error.h"
#include "dashattn/paging.h"

namespace dashattn::detail {

KvPagePool::KvPagePool(Backend& backend, const DecoderConfig& config)
    : backend_(backend),
      config_(config),
      row_bytes_(config.h_kv * config.d * dtype_size(config.dtype)),
      owned_(static_cast<size_t>(config.batch), 0) {
  const int64_t page = config.page_size;
  const int64_t per_sequence = std::max<int64_t>(1, (config.initial_capacity + page - 1) / page);
  try {
    widen_table(per_sequence, nullptr);
    grow_pool(config.batch * per_sequence, nullptr);
  } catch (...) {
    backend_.deallocate(device_table_);
    throw;
  }
}

KvPagePool::~KvPagePool() {
  backend_.deallocate(k_);
  backend_.deallocate(v_);
  backend_.deallocate(device_table_);
}

TensorView KvPagePool::pool_view(void* data) const {
  return make_view(data, config_.dtype, {num_pages_, config_.page_size, config_.h_kv, config_.d},
                   Device{backend_.device_type(), config_.device_index});
}

TensorView KvPagePool::table() const {
  return make_view(device_table_, DType::kI32, {config_.batch, width_},
                   Device{backend_.device_type(), config_.device_index});
}

void KvPagePool::grow_pool(int64_t pages, void* stream) {
  // Table entries are int32.
  if (pages > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgument("page_size", "pages large enough that the pool stays below 2^31 pages",
                          std::to_string(config_.page_size));
  }
  const size_t bytes = static_cast<size_t>(pages * config_.page_size * row_bytes_);
  void* nk = backend_.allocate(bytes);
  void* nv = nullptr;
  try {
    nv = backend_.allocate(bytes);
    const size_t old_bytes = static_cast<size_t>(num_pages_ * config_.page_size * row_bytes_);
    // The new pages start as zeros: a page's rows past its sequence's length are never written, yet the next growth
    // copies them, and a copy of undefined memory is a defect the memory checkers rightly report.
    backend_.memset_zero(static_cast<char*>(nk) + old_bytes, bytes - old_bytes, stream);
    backend_.memset_zero(static_cast<char*>(nv) + old_bytes, bytes - old_bytes, stream);
    if (num_pages_ > 0) {
      // Pages keep their indices, so the table stays valid: one copy of each old pool is all a growth needs.
      backend_.copy(nk, k_, old_bytes, CopyKind::kDeviceToDevice, stream);
      backend_.copy(nv, v_, old_bytes, CopyKind::kDeviceToDevice, stream);
      // The old pools are freed below: the copies and any step still reading them must be done.
      backend_.synchronize(stream);
    }
  } catch (...) {
    backend_.deallocate(nk);
    backend_.deallocate(nv);
    throw;
  }
  backend_.deallocate(k_);
  backend_.deallocate(v_);
  k_ = nk;
  v_ = nv;
  for (int64_t page = num_pages_; page < pages; ++page) free_.push_back(static_cast<int32_t>(page));
  holders_.resize(static_cast<size_t>(pages), 0);
  num_pages_ = pages;
}

void KvPagePool::widen_table(int64_t width, void* stream) {
  const int64_t b = config_.batch;
  // Entries past a sequence's pages are never read; 0 keeps them inside the pool all the same.
  std::vector<int32_t> wider(static_cast<size_t>(b * width), 0);
  for (int64_t i = 0; i < b; ++i) {
    std::copy_n(host_table_.begin() + i * width_, owned_[i], wider.begin() + i * width);
  }
  void* device = backend_.allocate(static_cast<size_t>(b * width) * sizeof(int32_t));
  if (device_table_ != nullptr) {
    try {
      backend_.synchronize(stream);  // a step in flight may still read the old table
    } catch (...) {
      backend_.deallocate(device);
      throw;
    }
    backend_.deallocate(device_table_);
  }
  device_table_ = device;
  host_table_.swap(wider);
  width_ = width;
  table_dirty_ = true;
}

int32_t KvPagePool::take_page(void* stream) {
  if (free_.empty()) grow_pool(std::max<int64_t>(2 * num_pages_, num_pages_ + 1), stream);
  const int32_t page = free_.front();
  free_.pop_front();
  holders_[page] = 1;
  return page;
}

void KvPagePool::release(int64_t seq) {
  for (int64_t column = 0; column < owned_[seq]; ++column) {
    int32_t& entry = host_table_[seq * width_ + column];
    if (--holders_[entry] == 0) free_.push_back(entry);
    entry = 0;  // unused entries stay inside the pool
  }
  owned_[seq] = 0;
  table_dirty_ = true;
}

void KvPagePool::share_prefix(int64_t src, int64_t dst, int64_t keys, void* stream) {
  const int64_t page = config_.page_size;
  const int64_t full = keys / page, partial = keys % page;
  for (int64_t column = 0; column < full; ++column) {
    const int32_t shared = host_table_[src * width_ + column];
    ++holders_[shared];
    host_table_[dst * width_ + column] = shared;
  }
  owned_[dst] = full;
  if (partial > 0) {
    // The source keeps appending into its last page, so the fork's copy is its own.
    const int32_t from = host_table_[src * width_ + full];
    const int32_t to = take_page(stream);  // may grow the pools: page indices stay valid
    host_table_[dst * width_ + full] = to;
    owned_[dst] = full + 1;
    const size_t bytes = static_cast<size_t>(partial * row_bytes_);
    for (void* pool : {k_, v_}) {
      char* base = static_cast<char*>(pool);
      backend_.copy(base + to * page * row_bytes_, base + from * page * row_bytes_, bytes, CopyKind::kDeviceToDevice,
                    stream);
    }
  }
  table_dirty_ = true;
}

void KvPagePool::reserve(const std::vector<int64_t>& tokens, int64_t padded, void* stream) {
  const int64_t page = config_.page_size;
  const auto pages_for = [page](int64_t keys) { return (keys + page - 1) / page; };
  const int64_t longest = *std::max_element(tokens.begin(), tokens.end());
  const int64_t need = pages_for(std::max(padded, longest));
  if (need > width_) widen_table(std::max(need, 2 * width_), stream);
  // One table column at a time across the batch: a sequence's consecutive pages are not neighbours in the pool
  // (a paged read that ignored the table would show), and a growth mid-way keeps the order. A sequence stops at
  // the pages its own length needs.
  const int64_t first = *std::min_element(owned_.begin(), owned_.end());
  const int64_t last = pages_for(longest);
  for (int64_t column = first; column < last; ++column) {
    for (int64_t i = 0; i < config_.batch; ++i) {
      if (owned_[i] != column || column >= pages_for(tokens[i])) continue;
      host_table_[i * width_ + column] = take_page(stream);
      ++owned_[i];
      table_dirty_ = true;
    }
  }
}

void KvPagePool::add_row_regions(void* pool, const TensorView& src, int64_t seq, int64_t from, int64_t steps,
                                 std::vector<CopyRegion>* regions) const {
  const KeyPages pages{host_table_.data(), width_, config_.page_size};
  const char* rows = static_cast<const char*>(src.data) + seq * src.stride[0] * dtype_size(src.dtype);
  for (int64_t j = from; j < from + steps;) {
    const KeyRow at = locate_key(pages, seq, 0, 0, j);
    const int64_t count = std::min(from + steps - j, config_.page_size - at.row);  // rows left in this page
    regions->push_back({static_cast<char*>(pool) + (at.index * config_.page_size + at.row) * row_bytes_,
                        rows + (j - from) * row_bytes_, static_cast<size_t>(count * row_bytes_)});
    j += count;
  }
}

void KvPagePool::append(const TensorView& k, const TensorView& v, const std::vector<int64_t>& from,
                        const std::vector<int64_t>& counts, void* stream) {
  // Every run of rows within one page is a region, and all of them go in one call.
  std::vector<CopyRegion> regions;
  regions.reserve(static_cast<size_t>(2 * config_.batch));
  for (int64_t i = 0; i < config_.batch; ++i) {
    add_row_regions(k_, k, i, from[i], counts[i], &regions);
    add_row_regions(v_, v, i, from[i], counts[i], &regions);
  }
  backend_.copy_regions(regions.data(), regions.size(), stream);
}

void KvPagePool::upload_table(void* stream) {
  if (!table_dirty_) return;
  backend_.copy(device_table_, host_table_.data(), host_table_.size() * sizeof(int32_t), CopyKind::kHostToDevice,
                stream);
  table_dirty_ = false;
}

void KvPagePool::describe(ForwardParams* p, int64_t n_k) const {
  p->k = key_pages();
  p->v = value_pages();
  // A padded paged batch of n_k keys per sequence: max_seqlen_k is every length unless seqlens_k says otherwise.
  p->batch.block_table = static_cast<const int32_t*>(device_table_);
  p->batch.block_table_stride = width_;
  p->batch.max_seqlen_k = static_cast<int>(n_k);
}

}  // namespace dashattn::detail
