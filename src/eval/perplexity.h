// Scoring a text through a KV-cache policy.
//
// - Chunked perplexity as llama.cpp's llama-perplexity computes it: the text is
//   tokenized once (BOS in front when the vocabulary adds one), cut into
//   non-overlapping chunks of n_ctx tokens, the first token of each chunk is
//   replaced by BOS, the cache is emptied, and each chunk is scored on its
//   second half (logits of positions n_ctx/2 .. n_ctx-2 predicting the next
//   token).
// - A stream: one run of T tokens with no reset, every token's log-likelihood.
// - KL divergence of a policy against saved full-cache distributions (the "KL
//   base" file, format in docs/EVALUATION.md).
//
// Tokens run through a Runner (runner.h): in each chunk the unscored first
// half is the prompt (KvCache::ExpectPrompt; snapkv compresses it at its end)
// and the scored half is teacher-forced as if it were generated; in a stream
// the first min(n, n_ctx) tokens are the prompt. Memory is one ubatch of
// logits (prefill step x n_vocab) whatever the length.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "engine/runner.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace rotor {

// ---- Statistics, with llama.cpp's uncertainty estimates.

struct MeanError {
  double mean = 0;
  double error = 0;  // one standard error; 0 when it cannot be estimated
};
// Mean of a sample from its sum and sum of squares; error sqrt(var / (n - 1)).
MeanError MeanAndError(double sum, double sum2, int64_t count);
// Linear interpolation between the closest ranks of sorted values, fraction in [0, 1].
double Percentile(std::span<const float> sorted, double fraction);

// Negative log-likelihoods of predicted tokens.
struct NllStats {
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  void Add(double nll) {
    sum += nll;
    sum2 += nll * nll;
    ++count;
  }
  double Ppl() const;       // exp(mean nll)
  double PplError() const;  // ppl * standard error of the mean nll (error propagation)
};

// -log softmax(logits)[target], as llama.cpp: max-shifted, exponentials summed in double.
double TokenNll(std::span<const float> logits, int32_t target);
// Index of the largest logit (the first one on ties).
int32_t ArgMax(std::span<const float> logits);

// Tokens of a text as llama-perplexity sees them: BOS in front if the
// vocabulary adds one, no EOS.
std::vector<int32_t> TokenizeForScoring(const Tokenizer& tokenizer, std::string_view text);

// ---- KL base file: the full cache's distributions, to compare policies with.

struct KlBaseInfo {
  std::string model;               // description of the model file (for messages)
  uint64_t model_fingerprint = 0;  // ModelFingerprint of the file
  std::string text;                // name of the text file (for messages)
  std::string kv;                  // the cache that produced it
  int32_t n_vocab = 0;
  int32_t n_ctx = 0;
  int32_t n_chunks = 0;
  std::vector<int32_t> tokens;  // [n_chunks * n_ctx] the evaluated tokens, before BOS replacement
};

// A cheap identity of a model file: its size, its first MiB and 64 samples of 4 KiB.
Result<uint64_t> ModelFingerprint(const std::string& path);

// One scored position of the base, as read back.
struct KlBaseRow {
  float nll = 0;               // exact -log p(target)
  int32_t top1 = 0;            // most likely token
  float lo = 0, step = 0;      // log p(token i) = lo + step * code[i]
  std::vector<uint16_t> code;  // [n_vocab]
  std::vector<double> p;       // [n_vocab] exp(lo + step * code[i]), decoded once by NextRow
  double p_sum = 0;            // their sum (1 within the codes' rounding)
};

class KlBaseWriter {
 public:
  static Result<std::unique_ptr<KlBaseWriter>> Create(const std::string& path,
                                                      const KlBaseInfo& info);
  ~KlBaseWriter();
  Status AddRow(std::span<const float> logits, int32_t target);
  Status Close();  // errors if not every row was written

 private:
  KlBaseWriter() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t rows_left_ = 0;
  std::vector<unsigned char> buf_;
};

class KlBaseReader {
 public:
  static Result<std::unique_ptr<KlBaseReader>> Open(const std::string& path);
  ~KlBaseReader();
  const KlBaseInfo& info() const { return info_; }
  Status NextRow(KlBaseRow* row);

 private:
  KlBaseReader() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  KlBaseInfo info_;
  int64_t rows_left_ = 0;
  int64_t rows_read_ = 0;
  std::vector<unsigned char> buf_;
};

// A policy against the base.
struct KlStats {
  NllStats nll;       // the policy
  NllStats nll_base;  // the base
  double sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0;
  int64_t same_top = 0;
  std::vector<float> kld;  // per scored position

  // One position: the policy's logits against the base's row. Returns the
  // policy's -log p(target).
  double Add(std::span<const float> logits, int32_t target, const KlBaseRow& base);
  int64_t count() const { return nll.count; }
  MeanError Kld() const { return MeanAndError(sum_kld, sum_kld2, count()); }
  MeanError SameTop() const;                    // fraction of positions with the base's top token
  MeanError LogPplRatio() const;                // mean ln(PPL / PPL(base)), covariance included
  double KldPercentile(double fraction) const;  // sorts a copy
};

// ---- Chunked perplexity.

struct PerplexityOptions {
  int n_ctx = 512;    // tokens per chunk
  int n_chunks = -1;  // -1: every whole chunk of the text
  KvConfig kv;
};

struct PerplexityResult {
  int n_chunks = 0;
  int first = 0;                    // first scored row of a chunk (n_ctx / 2)
  std::vector<double> running_ppl;  // after each chunk
  NllStats nll;
  std::vector<float> token_nll;  // [n_chunks * (n_ctx - 1 - first)] per scored position
  std::unique_ptr<KlStats> kl;   // when compared against a base
};

// Chunks a text of n_tokens holds; errors when it holds none.
Result<int> CountChunks(int64_t n_tokens, int n_ctx, int n_chunks);

struct PerplexityHooks {
  KlBaseWriter* write_base = nullptr;    // record every scored row
  KlBaseReader* compare_base = nullptr;  // compare every scored row
  std::function<void(int chunk, const PerplexityResult& so_far)> on_chunk;
  std::function<void(int64_t tokens_done)> on_tokens;
};

Result<PerplexityResult> ChunkedPerplexity(Runner& runner, int32_t bos,
                                           std::span<const int32_t> tokens,
                                           const PerplexityOptions& options,
                                           const PerplexityHooks& hooks = {});

// ---- Stream.

struct StreamOptions {
  int n_ctx = 512;  // the cache's context (a full cache must hold every token)
  KvConfig kv;
};

// nll[i] = -log p(tokens[i + 1] | tokens[0..i]) for i in [0, n - 1), in one
// pass through one cache (no resets).
Result<std::vector<float>> StreamNll(
    Runner& runner, std::span<const int32_t> tokens, const StreamOptions& options,
    const std::function<void(int64_t tokens_done)>& on_tokens = {});

// Perplexity per window of `window` predicted positions: window k covers the
// tokens at positions [k * window, (k + 1) * window) (position 0, BOS, is never
// predicted). nll as StreamNll returns it.
struct WindowPpl {
  int64_t begin = 0, end = 0;  // positions [begin, end)
  int64_t n = 0;               // tokens scored in it
  double ppl = 0;
};
std::vector<WindowPpl> WindowPerplexity(std::span<const float> nll, int64_t window);

}  // namespace rotor
