#include "bench_runner/bench_run.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>
#include <random>
#include <span>

#include "base/check.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "engine/runner.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"

namespace rotor::bench {
namespace {

std::string IsoNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n, int n_vocab) {
  std::uniform_int_distribution<int32_t> dist(0, n_vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = dist(rng);
  return v;
}

double StdDev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (v.size() - 1));
}

}  // namespace

BenchWork EstimateWork(const BenchModel& bm, const BenchCase& c, int kv_cells) {
  const ModelConfig& mc = bm.model->config();
  const double attn_flops_per_key = 4.0 * mc.n_layer * mc.n_head * mc.head_dim;
  const double kv_bytes_per_token =
      static_cast<double>(mc.n_layer) * mc.n_head_kv *
      static_cast<double>(KvHeadBytes(c.kv.types.k, mc.head_dim) + KvHeadBytes(c.kv.types.v, mc.head_dim));
  const int64_t cap = std::max(kv_cells, 1);
  const BenchTest& t = c.test;
  BenchWork w;
  const int64_t n = int64_t{t.n_prompt} + t.n_gen;  // the prompt's tokens, then the generated
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = t.n_depth + i;  // text index of the token
    w.flops += attn_flops_per_key * static_cast<double>(std::min(index + 1, cap));
  }
  w.flops += 2.0 * static_cast<double>(bm.layer_matmul_params) * n;
  const double weight_bytes = static_cast<double>(bm.model->weight_bytes());
  const double seqs = c.n_seq;
  if (t.n_prompt > 0) {
    w.flops += 2.0 * static_cast<double>(bm.output_matmul_params);
    const int64_t step = c.prefill_step > 0 ? c.prefill_step : t.n_prompt;
    for (int64_t b = 0; b < t.n_prompt; b += step)  // per chunk: the weights, each cache before it
      w.bytes += weight_bytes + seqs * kv_bytes_per_token * std::min(t.n_depth + b, cap);
  }
  w.flops += 2.0 * static_cast<double>(bm.output_matmul_params) * t.n_gen;
  for (int64_t i = t.n_prompt; i < n; ++i)
    w.bytes += weight_bytes + seqs * kv_bytes_per_token * std::min(t.n_depth + i, cap);
  w.flops *= seqs;  // the weights are read once per pass (bytes above), the work is per sequence
  return w;
}

BenchStats ComputeStats(const BenchResult& r, int64_t n_tokens) {
  BenchStats s;
  std::vector<double> ns(r.samples_ns.begin(), r.samples_ns.end());
  for (double x : ns) s.samples_ts.push_back(x > 0 ? n_tokens * 1e9 / x : 0);
  s.avg_ns = Mean(ns);
  s.stddev_ns = StdDev(ns);
  s.avg_ts = Mean(s.samples_ts);
  s.stddev_ts = StdDev(s.samples_ts);
  return s;
}

struct BenchCaseRun::State {
  State(const BenchModel& bm, const BenchCase& c, ThreadPool& pool)
      : bm(bm),
        c(c),
        kv_pool(bm.model->kv_shape(c.n_ctx), KvPoolOptions{.model_id = bm.model->identity()}),
        // Every sequence's chunk in one pass.
        chunk(c.prefill_step > 0 ? c.prefill_step : std::max({c.test.n_prompt, c.test.n_depth, 1})),
        runner(*bm.model, pool,
               RunnerOptions{.prefill_step = chunk,
                             .max_seqs = c.n_seq,
                             .max_tokens = chunk * c.n_seq,
                             .n_ctx = c.n_ctx}),
        feeds(c.n_seq) {
    for (Feed& f : feeds) feed_ptrs.push_back(&f);
  }

  // Each sequence's feed, stepped together until all are done.
  template <typename MakeFeed>
  Status Run(MakeFeed make_feed) {
    for (int s = 0; s < c.n_seq; ++s) feeds[s] = make_feed(caches[s].get());
    while (!feeds[0].done()) RETURN_IF_ERROR(runner.Step(feed_ptrs));
    for (const Feed& f : feeds) RETURN_IF_ERROR(f.status);
    return Status::Ok();
  }

  // The test itself, one timed unit per call: the whole prompt and the
  // logits of its last token (pp), or one pass of one token of every
  // sequence (tg: n_gen calls); pg is the prompt's unit, then tg's. Returns true when the test is
  // done; its time (the sum of its units) is then in `elapsed_ns`.
  Result<bool> StepTest() {
    const BenchTest& t = c.test;
    if (next == 0) elapsed_ns = 0;
    Timer timer;
    if (next < t.n_prompt) {
      const auto prompt = std::span<const int32_t>(test_tokens).first(t.n_prompt);
      RETURN_IF_ERROR(Run([&](KvCache* cache) { return Feed::Prompt(cache, prompt); }));
      next = t.n_prompt;
    } else {
      RETURN_IF_ERROR(Run([&](KvCache* cache) {
        return Feed::Continue(cache, std::span<const int32_t>(test_tokens).subspan(next, 1));
      }));
      ++next;
    }
    elapsed_ns += timer.ElapsedNs();
    const bool done = next == t.n_prompt + t.n_gen;
    if (done) next = 0;
    return done;
  }

  // The depth as a prompt with no logits, in every sequence's cache.
  Status Fill() {
    const int n_seq = c.n_seq;
    const int n_depth = c.test.n_depth;
    if (c.shared_prefix) {
      // The first sequence computes the depth; the others take its whole
      // blocks and compute only the rest.
      kv_pool.DropCached();
      const int64_t hits = kv_pool.stats().hit_tokens;
      std::vector<Feed> fill(n_seq);
      for (int s = 0; s < n_seq; ++s) {
        const int64_t cached = s == 0 ? 0 : caches[s]->AttachPrefix(depth_tokens, n_depth);
        fill[s] = Feed{.cache = caches[s].get(),
                       .tokens = std::span<const int32_t>(depth_tokens).subspan(cached),
                       .n_prompt = n_depth - cached,
                       .logits_from = n_depth - cached};
        Feed* one[1] = {&fill[s]};
        while (!fill[s].done()) RETURN_IF_ERROR(runner.Step(one));
        RETURN_IF_ERROR(fill[s].status);
      }
      r.prefix_hit_tokens = kv_pool.stats().hit_tokens - hits;
    } else {
      RETURN_IF_ERROR(Run([&](KvCache* cache) {
        return Feed{
            .cache = cache, .tokens = depth_tokens, .n_prompt = n_depth, .logits_from = n_depth};
      }));
    }
    r.kv_blocks = kv_pool.stats().blocks_used;
    r.kv_bytes = r.kv_blocks * static_cast<int64_t>(kv_pool.BlockBytes(c.kv.types));
    return Status::Ok();
  }

  const BenchModel& bm;
  const BenchCase c;
  BenchResult r;
  KvBlockPool kv_pool;  // one block pool for the case's sequences, as a server's
  std::vector<std::unique_ptr<KvCache>> caches;  // [n_seq], declared after the pool they draw on
  int chunk;
  Runner runner;
  std::vector<int32_t> depth_tokens;  // [n_depth]
  std::vector<int32_t> test_tokens;   // [n_prompt + n_gen]
  std::vector<Feed> feeds;            // [n_seq]
  std::vector<Feed*> feed_ptrs;       // [n_seq]
  int next = 0;                       // the test's next token (0: not started)
  int64_t elapsed_ns = 0;             // of the test's units so far
};

BenchCaseRun::BenchCaseRun(std::unique_ptr<State> state) : s_(std::move(state)) {}
BenchCaseRun::~BenchCaseRun() = default;

Result<std::unique_ptr<BenchCaseRun>> BenchCaseRun::Start(const BenchModel& bm, const BenchCase& c,
                                                          uint64_t seed, ThreadPool& pool,
                                                          bool scoped_rss,
                                                          const BenchProgress& progress) {
  CHECK_EQ(pool.size(), c.threads);
  BenchResult r;
  r.test_time = IsoNow();
  // The peak of this case: cache, activations and the weights it touches.
  r.peak_rss_scoped = scoped_rss && ResetPeakRss();
  auto st = std::make_unique<State>(bm, c, pool);
  const Model& model = *bm.model;
  const ModelConfig& mc = model.config();
  for (int s = 0; s < c.n_seq; ++s) {
    ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                     KvCache::Create(model.kv_shape(c.n_ctx), c.kv, &st->kv_pool));
    if (!c.shared_prefix) cache->DisablePublishing();
    st->caches.push_back(std::move(cache));
  }
  r.kv = st->caches[0]->config();
  r.kv_bytes_per_token = static_cast<int64_t>(mc.n_layer) * mc.n_head_kv *
                         static_cast<int64_t>(KvHeadBytes(r.kv.types.k, mc.head_dim) +
                                              KvHeadBytes(r.kv.types.v, mc.head_dim));
  r.work = EstimateWork(bm, c, r.kv.size);
  st->r = std::move(r);
  std::mt19937_64 rng(seed);
  st->depth_tokens = RandomTokens(rng, c.test.n_depth, mc.n_vocab);
  st->test_tokens = RandomTokens(rng, c.test.n_prompt + c.test.n_gen, mc.n_vocab);

  if (c.warmup) {
    if (progress) progress("warm-up", 0);  // the test at depth 0
    for (auto& cache : st->caches) cache->Clear();
    for (bool done = false; !done;) {
      ASSIGN_OR_RETURN(done, st->StepTest());
    }
  }
  return std::unique_ptr<BenchCaseRun>(new BenchCaseRun(std::move(st)));
}

Status BenchCaseRun::Fill(int rep, const BenchProgress& progress) {
  CHECK_EQ(s_->next, 0);
  for (auto& cache : s_->caches) cache->Clear();
  if (s_->c.test.n_depth == 0) return Status::Ok();
  if (progress) progress("fill", rep);
  return s_->Fill();
}

Result<bool> BenchCaseRun::Step() {
  ASSIGN_OR_RETURN(bool done, s_->StepTest());
  if (done) s_->r.samples_ns.push_back(s_->elapsed_ns);
  return done;
}

Status BenchCaseRun::Repetition(int rep, const BenchProgress& progress) {
  RETURN_IF_ERROR(Fill(rep, progress));
  if (progress) progress("run", rep);
  for (bool done = false; !done;) {
    ASSIGN_OR_RETURN(done, Step());
  }
  return Status::Ok();
}

BenchResult BenchCaseRun::Finish() {
  s_->r.peak_rss_bytes = PeakRssBytes();
  return s_->r;
}

Result<BenchResult> RunBenchCase(const BenchModel& bm, const BenchCase& c, int repetitions,
                                 uint64_t seed, const BenchProgress& progress) {
  ThreadPool pool(c.threads);
  ASSIGN_OR_RETURN(std::unique_ptr<BenchCaseRun> run,
                   BenchCaseRun::Start(bm, c, seed, pool, /*scoped_rss=*/true, progress));
  for (int rep = 1; rep <= repetitions; ++rep) RETURN_IF_ERROR(run->Repetition(rep, progress));
  return run->Finish();
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

}  // namespace rotor::bench
