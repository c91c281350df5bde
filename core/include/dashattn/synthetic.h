// Synthetic attention problems with planted structure, for the demo, benchmarks, examples and tests.
//
// Random Gaussian queries and keys give chunk summaries that all look alike, so routing is either dense or
// arbitrary and nothing can be checked by eye. These problems plant what a real model's keys have:
//  - clustered keys: each chunk's keys scatter around a few cluster centres, which themselves scatter around the
//    chunk's own centre, so a summary is an informative description of its chunk and the routing scores of
//    different chunks differ by several units;
//  - needles: a few chunks whose keys share a strong random direction that is also added to the queries of a
//    later window of positions, so those queries should route the needle chunk whatever else they see.
// The summary query is small and random: Stage 0 is close to, but not exactly, mean pooling.
//
// Everything is generated in float from one std::mt19937_64 seed, so a problem is reproducible across runs and
// platforms (the normal deviates come from our own Box-Muller transform, not std::normal_distribution, whose
// output is implementation-defined).
#pragma once

#include <cstdint>
#include <vector>

#include "dashattn/dtype.h"
#include "dashattn/tensor.h"

namespace dashattn::synthetic {

struct Config {
  int64_t batch = 1;
  int64_t n = 4096;            // keys (and queries) per sequence
  int64_t h_q = 8;
  int64_t h_kv = 2;
  int64_t d = 64;
  int64_t chunk = 64;          // the chunk grid the structure is planted on (match MethodParams::chunk_size)
  int num_needles = 4;
  int64_t needle_queries = 32; // length of the window of queries that should retrieve each needle
  int clusters_per_chunk = 2;
  float centre_scale = 2.5f;   // std of the entries of a chunk's centre
  float cluster_spread = 0.7f; // std of a cluster centre around its chunk's centre
  float key_noise = 0.5f;      // std of a key around its centre
  float query_scale = 2.5f;    // std of a query's entries
  // Score boost, in units of <q, k>/sqrt(d), that a needle direction adds between a needle key and a query of
  // its window. The direction has norm m * needle_key_share on the keys and m / needle_key_share on the queries,
  // m = sqrt(needle_boost * sqrt(d)): a small key share keeps the needle chunk unremarkable to other queries.
  float needle_boost = 20.0f;
  float needle_key_share = 0.5f;
  float summary_query_scale = 0.05f;
  uint64_t seed = 0;
};

// A needle: the chunk that holds it and the query positions (of the same sequence, all KV heads) that should
// route it.
struct Needle {
  int64_t batch_index = 0;
  int64_t chunk = 0;
  int64_t query_begin = 0;
  int64_t query_end = 0;       // exclusive
};

struct Problem {
  Config config;
  // Row-major float host buffers: q [b, n, h_q, d], k and v [b, n, h_kv, d], summary_query [h_kv, d].
  std::vector<float> q, k, v, summary_query;
  std::vector<Needle> needles;

  // Views of the float buffers (host, f32). The problem must outlive them.
  TensorView q_view();
  TensorView k_view();
  TensorView v_view();
  TensorView summary_query_view();
};

// Throws InvalidArgument naming the field when the config is unusable (non-positive sizes, h_q % h_kv != 0, or a
// sequence too short to hold the requested needles before their query windows).
Problem generate(const Config& config);

// The buffer converted to dtype (f32, f16, bf16 or f64), round-to-nearest-even as every backend rounds, as raw
// bytes ready to copy to a device.
std::vector<uint8_t> convert(const std::vector<float>& values, DType dtype);

}  // namespace dashattn::synthetic
