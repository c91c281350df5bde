// A test problem's K/V (padded or packed) as a page pool with a block table (BatchLayout::block_table), so that a
// backend's paged run can be compared bit for bit with its run on the contiguous tensors.
//
// The pool is made so that any read through a wrong translation shows: pages are handed out in a shuffled order,
// the pool holds pages no sequence owns, and every row no sequence owns (those pages, the tail of a sequence's last
// page) is NaN. Table entries past a sequence's length point at one of the NaN pages. Optionally sequences 0 and 1
// share their first page (a common prefix; share_prefix() makes their keys and values there equal first).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/reference.h"

namespace dashattn::ref {

struct PagePool {
  HostTensor k, v;             // [pages, page_size, h_kv, d]
  std::vector<int32_t> table;  // [batch, stride]
  int64_t stride = 0;
  int64_t page_size = 0;

  // The problem's batch layout with this pool's block table (max_seqlen_k = the padded n_k); `on` adds the table
  // to a given layout, with the table's data where the backend reads it (a device copy).
  BatchLayout layout(const Problem& pr) const { return on(pr.layout(), table.data(), pr); }
  BatchLayout on(BatchLayout base, const int32_t* table_data, const Problem& pr) const;
};

// Makes sequence 1's first `page_size` keys and values those of sequence 0, so that the two can share a page.
void share_prefix(Problem& pr, int64_t page_size);

// The pool holding pr's keys and values (rows below each sequence's seqlens_k) in pages of page_size rows.
// `extra_pages` NaN pages no sequence owns; the table rows are `slack` entries wider than needed; share: sequences
// 0 and 1 share their first page (call share_prefix first).
PagePool make_pool(const Problem& pr, int64_t page_size, uint64_t seed, bool share, int64_t extra_pages = 3,
                   int64_t slack = 1);

}  // namespace dashattn::ref
