// Stage 2 and dense attention: pack K/V once, then run the shared tile engine.
#include "backends/cpu/attention_engine.h"
#include "backends/cpu/cpu_stages.h"
#include "dashattn/validate.h"

namespace dashattn {
namespace cpu {
namespace {

// The packed K/V of the calling thread, kept between calls so repeated calls (layers, decode steps) reuse the
// allocation instead of faulting in fresh pages each time.
PackedKv& thread_packed_kv() {
  static thread_local PackedKv kv;
  return kv;
}

}  // namespace

void attend(const AttendParams& params) {
  const AttendParams p = normalize_attend(params);
  const ProblemShape shape = attend_shape(p);
  AttentionJob job;
  job.q = p.q;
  job.o = p.o;
  job.lse = p.lse;
  job.seqs = make_sequences(p.batch, p.q, p.k);
  job.h_q = shape.h_q;
  job.h_kv = shape.h_kv;
  job.group = shape.group;
  job.d = shape.d;
  job.chunk = shape.chunk;
  job.scale = shape.scale;
  job.mask = p.routing.mask;
  job.prior = p.method.prior;
  job.tau = p.routing.tau;
  job.mu = p.routing.mu;
  job.summaries = p.summaries;
  job.method = p.method;
  PackedKv& kv = thread_packed_kv();
  kv.pack(p.k, p.v, job.seqs, job.chunk);
  job.kv = &kv;
  run_attention(job);
}

void dense_attention(const DenseParams& params) {
  const DenseParams p = normalize_dense(params);
  AttentionJob job;
  job.q = p.q;
  job.o = p.o;
  job.lse = p.lse;
  job.seqs = make_sequences(p.batch, p.q, p.k);
  job.h_q = p.q.shape[2];
  job.h_kv = p.k.shape[2];
  job.group = job.h_q / job.h_kv;
  job.d = p.q.shape[3];
  // Dense attention has no chunks; the tile engine still walks 64-key blocks, the size Stage 2 is tuned for.
  job.chunk = 64;
  job.scale = p.scale > 0 ? p.scale : routing_inv_sqrt_d(job.d);
  PackedKv& kv = thread_packed_kv();
  kv.pack(p.k, p.v, job.seqs, job.chunk);
  job.kv = &kv;
  run_attention(job);
}

}  // namespace cpu
}  // namespace dashattn
