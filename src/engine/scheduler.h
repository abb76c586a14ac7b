// Continuous batching: many sequences, each with its own prompt, sampling,
// stop rules and KV policy, decoded together. One Step runs one forward pass
// over one token of every decoding sequence plus prompt chunks of joining
// ones, so every weight is read once per step, not once per sequence.
//
// KV memory is the engine's block pool (kv_pool.h). With the engine's prefix
// cache on, a sequence starts from the longest cached prefix of its prompt
// (whoever computed it, even a sequence still running) unless its request
// says cache_prompt: false; one whose prompt shares whole blocks with a
// sequence still prefilling them waits until they are published rather than
// compute them twice (eight requests with one system prompt compute it once).
// A sequence joins when the
// pool has room for its prompt (after the cached prefix it starts from) plus
// a block for each running sequence; a bounded policy (sink, window, h2o,
// snapkv, tova) sets all its blocks aside when it joins and never waits; a
// full cache takes blocks as it grows, and when none is left the youngest
// such sequence goes back to the queue (its blocks stay cached, so it resumes
// by recomputing little) while the older ones go on.
//
// A Step, top to bottom: cancelled sequences leave; waiting ones join while a
// slot and their KV memory are free; the runner (runner.h) runs one
// ubatch of every running sequence's Feed (a decoding sequence's sampled
// token first, then prompt chunks of exactly `prefill_step` tokens from each
// prompt's start, whatever else is in the batch); each sequence whose feed
// is done takes the sample/stop step (sample_step.h) on its own logits with
// its own RNG. So a sequence's output is the one it gets alone.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "engine/sample_step.h"

namespace rotor {

using SeqId = int64_t;

struct SeqRequest {
  std::string prompt;  // tokenized with options.add_bos and parse_special, unless tokens is set
  std::vector<int32_t> tokens;
  GenerateOptions options;
  KvSpelling spelling = KvSpelling::kFlag;  // how KV errors name options (flags, JSON fields)
};

// Reported from Step(): each new piece of text, then once the end.
struct SeqEvent {
  SeqId id = 0;
  int32_t token = -1;     // -1 on the final event
  std::string_view text;  // text released by this token (may be empty)
  bool finished = false;
  const GenerateResult* result = nullptr;  // on the final event
  // With GenerateOptions::logprobs >= 0: the token's (sample_step.h).
  const TokenLogprobs* logprobs = nullptr;
};
using SeqCallback = std::function<void(const SeqEvent&)>;

class Scheduler {
 public:
  struct Options {
    int max_seqs = 4;                        // sequences decoding at once
    int prefill_step = kDefaultPrefillStep;  // prompt chunk size (0 = whole prompts)
    int max_queue = 1024;                    // waiting sequences beyond max_seqs
  };
  Scheduler(Engine& engine, const Options& options);
  ~Scheduler();

  // Validates and queues a sequence (a prompt that cannot fit a new cache is
  // refused here, FitsNewCache); it joins the batch at a later Step when a
  // slot and its KV reservation are free (first come, first served).
  Result<SeqId> Add(SeqRequest request, SeqCallback callback);
  // The sequence leaves at the next Step, finishing with kCancelled.
  void Cancel(SeqId id);
  // Admits waiting sequences, runs one forward pass, samples, reports. A
  // sequence whose prompt its cache refuses finishes with kError alone.
  Status Step();
  bool Idle() const { return running_.empty() && waiting_.empty(); }
  size_t n_running() const { return running_.size(); }
  size_t n_waiting() const { return waiting_.size(); }
  int64_t kv_cells_used() const;
  // Sequences sent back to the queue to free KV memory (recomputed later).
  int64_t n_preempted() const { return n_preempted_; }

 private:
  struct Seq;
  Status Admit();
  // Gives a sequence its cache: the longest cached prefix, then the rest of
  // its text as a prompt feed. False (nothing changed) when the KV pool has
  // no room for it yet.
  bool Start(Seq& s);
  // A sequence's first join: its sampler and sample/stop step.
  void Begin(Seq& s);
  // Frees KV memory when no feed could run for want of it: the youngest
  // sequence that grows without bound goes back to the queue, or, alone,
  // finishes (its context cannot grow within the budget).
  void Preempt();
  void Finish(Seq& s, FinishReason reason);
  // The sample/stop step of a sequence whose feed is done, on its logits.
  void Advance(Seq& s, const float* logits);

  Engine& engine_;
  Options options_;
  Runner runner_;
  std::vector<Feed*> feeds_;  // one step's feeds, reserved for max_seqs
  std::vector<Seq*> owners_;  // [feeds_.size()]
  SeqId next_id_ = 1;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;  // in order of admission
  int64_t n_preempted_ = 0;
};

}  // namespace rotor
