// Decode attention (one query token) over a full cache at depth d, keys stored
// rotated (cached) or not (deferred, rotated in the kernel), K/V in f32 or f16,
// in pool blocks of 16 cells (the default) or other sizes, 0 = one block for
// the whole cache (the contiguous layout of a cache before paging).
// Reports the KV bytes read per second; compare the modes in the same run.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "attention/attention.h"
#include "attention/fold.h"
#include "base/cpu.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "kv/kv_quant.h"

namespace rotor {
namespace {

struct Shape {
  int n_head, n_head_kv, head_dim;
};
constexpr Shape kStories110M{12, 12, 64};
constexpr Shape kLlama1B{32, 8, 64};
constexpr Shape kLlama8B{32, 8, 128};

// `tokens` query tokens (a ubatch: causal among themselves) at depth d,
// in tiles of at most max_tile tokens.
void RunAttention(benchmark::State& state, Shape s, RopeK rope_k, KvType type, int tokens,
                  int max_tile) {
  const int depth = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  int block = static_cast<int>(state.range(2));
  // Layers of the model: a pool block holds every layer's rows of its cells,
  // so a layer's K and V are read in strides of the whole block.
  const int n_layer = state.range(3) > 0 ? static_cast<int>(state.range(3)) : 1;
  ops::RopeConfig rope{s.head_dim, s.head_dim, 10000.f};
  KvShape shape{n_layer, s.n_head_kv, s.head_dim, depth + tokens, rope};
  if (block == 0)
    for (block = 1; block < depth + tokens;) block *= 2;
  KvBlockPool blocks(shape, KvPoolOptions{.block_cells = block});
  KvConfig cfg;
  cfg.rope_k = rope_k;
  cfg.types = KvTypes{type, type};
  auto cache = std::move(KvCache::Create(shape, cfg, &blocks)).value();
  const int row = s.n_head_kv * s.head_dim;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  {  // fill the cache with depth tokens of random K/V
    std::vector<float> k(static_cast<size_t>(depth) * row), v(k.size());
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    KvPlan plan;
    (void)cache->Plan(depth, &plan);
    (void)cache->Prepare(plan);
    for (int l = 0; l < n_layer; ++l) cache->Write(l, plan, k.data(), v.data(), row);
    cache->Commit(plan);
  }
  // [tokens, n_head, head_dim] queries and outputs; [tokens, n_head_kv, head_dim] K and V.
  std::vector<float> q(static_cast<size_t>(tokens) * s.n_head * s.head_dim),
      k(static_cast<size_t>(tokens) * row), v(k.size()), out(q.size());
  for (auto& x : q) x = dist(rng);
  for (auto& x : k) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  ThreadPool pool(threads);
  AttentionScratch scratch(threads, s.n_head, s.n_head_kv, s.head_dim);
  scratch.set_max_tile(max_tile);
  RopeDistanceTable table(rope, depth + tokens + 64);
  KvPlan plan;
  (void)cache->Plan(tokens, &plan);
  (void)cache->Prepare(plan);
  // Each call reads the next layer, as a model's decode does: with 12
  // layers the K/V read comes from memory, not from the L3 cache.
  std::vector<KvLayerView> views;
  for (int l = 0; l < n_layer; ++l) views.push_back(cache->View(l));
  AttentionArgs a;
  a.q = q.data(), a.k = k.data(), a.v = v.data();
  a.q_stride = static_cast<int64_t>(s.n_head) * s.head_dim;
  a.kv_stride = row;
  a.n_head = s.n_head, a.n_head_kv = s.n_head_kv, a.head_dim = s.head_dim;
  a.plan = &plan;
  a.rope = &table;
  a.out = out.data();
  a.out_stride = a.q_stride;
  int layer = 0;
  for (auto _ : state) {
    a.cache = &views[layer];
    layer = layer + 1 == n_layer ? 0 : layer + 1;
    Attend(pool, a, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes =
      2.0 * depth * s.n_head_kv * static_cast<double>(KvHeadBytes(type, s.head_dim));
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["tok/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DecodeAttention(benchmark::State& state, Shape s, RopeK rope_k, KvType type) {
  RunAttention(state, s, rope_k, type, 1, AttentionScratch::kTileTokens);
}

// Prefill at depth: 256 query tokens over depth cells, one layer, in tiles
// of range(4) tokens (0: no tiles, each token by the one-token folds, as
// before tiles). The tok/s of the tiled rows against 0 in the same run is
// the tiles' gain.
void BM_PrefillAttention(benchmark::State& state, Shape s, RopeK rope_k, KvType type) {
  RunAttention(state, s, rope_k, type, 256, static_cast<int>(state.range(4)));
}
void PrefillArgs(benchmark::internal::Benchmark* b) {
  for (int tile : {0, 8, 16, 32}) b->Args({8192, 2, kKvBlockCells, 1, tile});
  b->UseRealTime();
}
#define PREFILL_CASES(name, shape, T)                                                      \
  BENCHMARK_CAPTURE(BM_PrefillAttention, prefill_##name, shape, RopeK::kCached, KvType::T) \
      ->Apply(PrefillArgs);
PREFILL_CASES(stories110m_f16, kStories110M, kF16)
PREFILL_CASES(stories110m_q8_0, kStories110M, kQ8_0)
PREFILL_CASES(stories110m_q4_0, kStories110M, kQ4_0)
PREFILL_CASES(stories110m_q5_0, kStories110M, kQ5_0)
PREFILL_CASES(llama1b_f16, kLlama1B, kF16)
PREFILL_CASES(llama1b_q8_0, kLlama1B, kQ8_0)
// Deferred keys: rotated in the tiles relative to each block's first key.
#define PREFILL_DEFERRED_CASES(name, shape, T)                                             \
  BENCHMARK_CAPTURE(BM_PrefillAttention, prefill_deferred_##name, shape, RopeK::kDeferred, \
                    KvType::T)                                                             \
      ->Apply(PrefillArgs);
PREFILL_DEFERRED_CASES(stories110m_f16, kStories110M, kF16)
PREFILL_DEFERRED_CASES(stories110m_q8_0, kStories110M, kQ8_0)
PREFILL_DEFERRED_CASES(stories110m_q4_0, kStories110M, kQ4_0)
PREFILL_DEFERRED_CASES(stories110m_q5_0, kStories110M, kQ5_0)
PREFILL_DEFERRED_CASES(llama1b_q8_0, kLlama1B, kQ8_0)

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int depth : {512, 2048, 8192, 32768})      // 32768: past L3
      b->Args({depth, threads, kKvBlockCells, 1});  // every row has the 4 arguments the body reads
  b->UseRealTime();
}

// Paged against contiguous, and the block size: depth x threads x block cells.
void BlockArgs(benchmark::internal::Benchmark* b) {
  for (int depth : {512, 8192})
    for (int block : {0, 16, 64, 256}) b->Args({depth, 2, block, 1});
  b->UseRealTime();
}
// Paged against contiguous with the model's layers in each block (12: the
// 110M shape): depth 8192, 2 threads, block cells x layers.
void LayerArgs(benchmark::internal::Benchmark* b) {
  for (int layers : {1, 12})
    for (int block : {0, 16, 64, 256}) b->Args({8192, 2, block, layers});
  b->UseRealTime();
}
BENCHMARK_CAPTURE(BM_DecodeAttention, layers_stories110m_cached_f16, kStories110M, RopeK::kCached,
                  KvType::kF16)
    ->Apply(LayerArgs);
// The types at depth 8192 with the 12 layers in each block of 16 cells, one
// layer per call in turn: the K/V come from memory, as in the model's decode
// (the rows above with 1 layer fit in the L3 cache at depth 8192).
void DramArgs(benchmark::internal::Benchmark* b) {
  b->Args({8192, 2, kKvBlockCells, 12});
  b->UseRealTime();
}
#define DRAM_CASES(name, T)                                                                   \
  BENCHMARK_CAPTURE(BM_DecodeAttention, dram_stories110m_cached_##name, kStories110M,         \
                    RopeK::kCached, KvType::T)                                                \
      ->Apply(DramArgs);                                                                      \
  BENCHMARK_CAPTURE(BM_DecodeAttention, dram_llama1b_cached_##name, kLlama1B, RopeK::kCached, \
                    KvType::T)                                                                \
      ->Apply(DramArgs);                                                                      \
  BENCHMARK_CAPTURE(BM_DecodeAttention, dram_stories110m_deferred_##name, kStories110M,       \
                    RopeK::kDeferred, KvType::T)                                              \
      ->Apply(DramArgs);                                                                      \
  BENCHMARK_CAPTURE(BM_DecodeAttention, dram_llama1b_deferred_##name, kLlama1B,               \
                    RopeK::kDeferred, KvType::T)                                              \
      ->Apply(DramArgs);
DRAM_CASES(f16, kF16)
DRAM_CASES(q8_0, kQ8_0)
DRAM_CASES(q4_0, kQ4_0)
BENCHMARK_CAPTURE(BM_DecodeAttention, blocks_llama1b_cached_f16, kLlama1B, RopeK::kCached,
                  KvType::kF16)
    ->Apply(BlockArgs);
BENCHMARK_CAPTURE(BM_DecodeAttention, blocks_llama1b_deferred_f16, kLlama1B, RopeK::kDeferred,
                  KvType::kF16)
    ->Apply(BlockArgs);

BENCHMARK_CAPTURE(BM_DecodeAttention, stories110m_cached, kStories110M, RopeK::kCached,
                  KvType::kF32)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_DecodeAttention, stories110m_deferred, kStories110M, RopeK::kDeferred,
                  KvType::kF32)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_DecodeAttention, stories110m_cached_f16, kStories110M, RopeK::kCached,
                  KvType::kF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_DecodeAttention, stories110m_deferred_f16, kStories110M, RopeK::kDeferred,
                  KvType::kF16)
    ->Apply(Args);
// The block types and bf16 (issue #20), decode at depth: the integer K path
// (cached) and the decoded one (deferred).
#define KV_TYPE_CASES(name, T)                                                                   \
  BENCHMARK_CAPTURE(BM_DecodeAttention, stories110m_cached_##name, kStories110M, RopeK::kCached, \
                    KvType::T)                                                                   \
      ->Apply(Args);                                                                             \
  BENCHMARK_CAPTURE(BM_DecodeAttention, stories110m_deferred_##name, kStories110M,               \
                    RopeK::kDeferred, KvType::T)                                                 \
      ->Apply(Args);                                                                             \
  BENCHMARK_CAPTURE(BM_DecodeAttention, llama1b_cached_##name, kLlama1B, RopeK::kCached,         \
                    KvType::T)                                                                   \
      ->Apply(Args);
KV_TYPE_CASES(bf16, kBF16)
KV_TYPE_CASES(q8_0, kQ8_0)
KV_TYPE_CASES(q4_0, kQ4_0)
KV_TYPE_CASES(q5_0, kQ5_0)

// One ISA forced (clamped to what the CPU runs: SkipWithError above it), the
// 110M shape at depth 4096, 1 thread: the folds against each other in one run
// (--benchmark_filter=isa_). ROTOR_ISA=scalar|avx2|avx512 forces every row.
void BM_DecodeAttentionIsa(benchmark::State& state, Shape s, RopeK rope_k, KvType type, Isa isa) {
  if (isa > BestIsa()) {
    state.SkipWithError("this CPU does not run the ISA");
    return;
  }
  const Isa saved = ActiveIsa();
  SetIsa(isa);
  BM_DecodeAttention(state, s, rope_k, type);
  SetIsa(saved);
}
void IsaArgs(benchmark::internal::Benchmark* b) {
  b->Args({4096, 1, kKvBlockCells, 1});
  b->UseRealTime();
}
#define ISA_CASES(name, rope, T)                                                                \
  BENCHMARK_CAPTURE(BM_DecodeAttentionIsa, isa_stories110m_##name##_scalar, kStories110M, rope, \
                    KvType::T, Isa::kScalar)                                                    \
      ->Apply(IsaArgs);                                                                         \
  BENCHMARK_CAPTURE(BM_DecodeAttentionIsa, isa_stories110m_##name##_avx2, kStories110M, rope,   \
                    KvType::T, Isa::kAvx2)                                                      \
      ->Apply(IsaArgs);                                                                         \
  BENCHMARK_CAPTURE(BM_DecodeAttentionIsa, isa_stories110m_##name##_avx512, kStories110M, rope, \
                    KvType::T, Isa::kAvx512)                                                    \
      ->Apply(IsaArgs);
ISA_CASES(cached_f32, RopeK::kCached, kF32)
ISA_CASES(deferred_f32, RopeK::kDeferred, kF32)
ISA_CASES(cached_f16, RopeK::kCached, kF16)
ISA_CASES(deferred_f16, RopeK::kDeferred, kF16)
ISA_CASES(cached_bf16, RopeK::kCached, kBF16)
ISA_CASES(cached_q8_0, RopeK::kCached, kQ8_0)
ISA_CASES(deferred_q8_0, RopeK::kDeferred, kQ8_0)
ISA_CASES(cached_q5_0, RopeK::kCached, kQ5_0)
ISA_CASES(cached_q4_0, RopeK::kCached, kQ4_0)
ISA_CASES(deferred_q4_0, RopeK::kDeferred, kQ4_0)
// The GQA shape (4 query heads per KV head), AVX2: the folds' sharing of a
// KV head's decoded keys and values among its query heads.
#define GQA_ISA_CASE(name, T)                                                          \
  BENCHMARK_CAPTURE(BM_DecodeAttentionIsa, isa_llama1b_cached_##name##_avx2, kLlama1B, \
                    RopeK::kCached, KvType::T, Isa::kAvx2)                             \
      ->Apply(IsaArgs);
GQA_ISA_CASE(f16, kF16)
GQA_ISA_CASE(q8_0, kQ8_0)
GQA_ISA_CASE(q4_0, kQ4_0)
// Deferred block-type keys on AVX-512 (pair products) in the GQA shapes:
// head size 64 (2 blocks a head) and 128 (Llama 3 8B's: 4 blocks).
#define PAIR_ISA_CASE(shape_name, shape, name, T)                                              \
  BENCHMARK_CAPTURE(BM_DecodeAttentionIsa, isa_##shape_name##_deferred_##name##_avx512, shape, \
                    RopeK::kDeferred, KvType::T, Isa::kAvx512)                                 \
      ->Apply(IsaArgs);
PAIR_ISA_CASE(llama1b, kLlama1B, q8_0, kQ8_0)
PAIR_ISA_CASE(llama1b, kLlama1B, q4_0, kQ4_0)
PAIR_ISA_CASE(llama8b, kLlama8B, q8_0, kQ8_0)
PAIR_ISA_CASE(llama8b, kLlama8B, q4_0, kQ4_0)

BENCHMARK_CAPTURE(BM_DecodeAttention, llama1b_cached, kLlama1B, RopeK::kCached, KvType::kF32)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_DecodeAttention, llama1b_deferred, kLlama1B, RopeK::kDeferred, KvType::kF32)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_DecodeAttention, llama1b_cached_f16, kLlama1B, RopeK::kCached, KvType::kF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_DecodeAttention, llama1b_deferred_f16, kLlama1B, RopeK::kDeferred,
                  KvType::kF16)
    ->Apply(Args);

// The query quantized to q8_0 for the integer scores of block-type keys
// (attn::QuantizeQuery: once per decode step, layer and thread): heads x
// head_dim in blocks of qblock. Shapes: 110M (12 x 64), 1B (32 x 64),
// stories260K (8 x 8, blocks of 8).
void BM_QuantizeQuery(benchmark::State& state) {
  const int n_head = static_cast<int>(state.range(0)), hd = static_cast<int>(state.range(1));
  const int n = n_head * hd;
  std::vector<float> q(n);  // [n_head, hd]
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  for (float& v : q) v = dist(rng);
  std::vector<int8_t> q8(n);  // [n_head, hd]
  std::vector<float> q8d(n);  // [n_head, hd / 8 * 8] (as FoldState's)
  std::vector<int32_t> q8s(n / 8);  // [n_head, hd / qblock] block sums
  attn::FoldState s;
  s.n_head = s.n_head_kv = n_head, s.head_dim = hd;
  s.q = q.data(), s.q8 = q8.data(), s.q8d = q8d.data(), s.q8s = q8s.data();
  for (auto _ : state) {
    s.q8_of = nullptr;
    attn::QuantizeQuery(s, static_cast<int>(state.range(2)));
    benchmark::DoNotOptimize(q8.data());
    benchmark::DoNotOptimize(q8d.data());
  }
}
BENCHMARK(BM_QuantizeQuery)->Args({12, 64, 32})->Args({32, 64, 32})->Args({8, 8, 8});

}  // namespace
}  // namespace rotor
