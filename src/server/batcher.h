// The engine thread of `rotor serve`: it alone owns the Scheduler (which is
// not thread-safe) and loops Step() while there is work. HTTP handler threads
// hand requests in through a mutex-protected inbox and read what their
// sequence produces from their own RequestStream (a queue with a condition
// variable). Cancellations travel through the inbox as well, so a cancelled
// sequence leaves, and its KV cache is freed, at the next Step; so do tasks
// that must touch the engine's KV pool (RunOnEngineThread: slot files).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/scheduler.h"

namespace rotor::serve {

struct StreamEvent {
  enum class Kind { kText, kDone, kError };
  Kind kind = Kind::kText;
  std::string text;                             // kText: whole UTF-8 characters; kError: message
  FinishReason finish = FinishReason::kLength;  // kDone
  int64_t prompt_tokens = 0;                    // kDone
  int64_t completion_tokens = 0;                // kDone
  int status = 500;                             // kError: the HTTP status it maps to
  int64_t cached_tokens = 0;                    // kDone: prompt tokens from the prefix cache
  // kText of a request with logprobs: one event per generated token (its
  // text may be empty), with the token and its log-probabilities.
  int32_t token = -1;
  std::optional<TokenLogprobs> logprobs = std::nullopt;
};

// What one request's sequence reports, from the engine thread to its handler.
class RequestStream {
 public:
  // Waits up to `timeout` for events and takes all that are queued.
  std::vector<StreamEvent> Wait(std::chrono::milliseconds timeout);
  // Takes all that are queued, without waiting.
  std::vector<StreamEvent> Take();
  void Push(StreamEvent e);
  // Called after every Push, from the pushing thread, without the stream's
  // lock held (nullptr: none).
  void SetNotify(std::function<void()> fn);

 private:
  friend class Batcher;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::shared_ptr<std::function<void()>> notify_;
  // Engine thread only.
  SeqId seq_id_ = 0;
  int64_t n_prompt_ = 0;
  bool ended_ = false;
  bool saw_token_ = false;
  int slot_ = -1;  // the slot it holds (-1: none yet)
  KvConfig kv_;    // resolved
};

class Batcher {
 public:
  struct Options {
    int parallel = 4;    // sequences decoding at once
    int max_queue = 64;  // requests waiting beyond those
    int prefill_step = kDefaultPrefillStep;
  };
  struct Stats {
    int64_t queued = 0;    // accepted, not decoding yet
    int64_t running = 0;   // decoding (the scheduler's running sequences)
    int64_t kv_cells = 0;  // KV cells the running sequences hold
    KvBlockPool::Stats kv;  // the engine's K/V block pool
    int64_t kv_block_cells = 0;
    int64_t preempted = 0;  // sequences sent back to the queue to free K/V memory
    int64_t prompt_tokens = 0, generated_tokens = 0, cancelled = 0;  // totals
    double prompt_tps = 0, gen_tps = 0;  // over the last kRateWindow of wall time
  };
  static constexpr std::chrono::seconds kRateWindow{10};
  // Slots, as llama-server's /slots name them: ids 0..parallel-1. A request
  // holds the lowest free one from the time the engine thread takes it until
  // it ends (requests beyond --parallel wait for one in arrival order, as the
  // scheduler admits them); a slot remembers the text (prompt and generated
  // tokens) and the KV config of the last request that held it.
  struct Slot {
    std::vector<int32_t> tokens;
    KvConfig kv;  // resolved
    bool busy = false;
  };

  Batcher(Engine& engine, const Options& options);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  void Start();
  // Ends every request still in flight with an error and joins the engine
  // thread; later Submits are refused.
  void Stop();

  // Queues a request; false when parallel + max_queue requests are already in
  // flight (or the batcher is stopped).
  bool Submit(SeqRequest request, std::shared_ptr<RequestStream> stream);
  // Queues several requests (one per stream, in order: a request's choices)
  // all or none.
  bool Submit(std::vector<SeqRequest> requests,
              const std::vector<std::shared_ptr<RequestStream>>& streams);
  // The request's sequence leaves at the next Step (a no-op once it ended).
  void Cancel(std::shared_ptr<RequestStream> stream);
  Stats stats() const;
  // Runs fn on the engine thread between two steps, where it may use the
  // engine's KV pool and slots(), and waits for it; false when the batcher
  // has stopped (fn did not run).
  bool RunOnEngineThread(std::function<void()> fn);
  // Engine thread only (inside RunOnEngineThread).
  std::vector<Slot>& slots() { return slots_; }

 private:
  struct Job {
    SeqRequest request;
    std::shared_ptr<RequestStream> stream;
  };
  struct StepCount {
    std::chrono::steady_clock::time_point at;
    int64_t prompt_tokens, generated_tokens;
  };
  void Loop();
  void AddJob(Job job);
  void OnEvent(const std::shared_ptr<RequestStream>& stream, const SeqEvent& e);
  void EndAll(const std::string& message, int status);
  void TakeSlot(const std::shared_ptr<RequestStream>& stream);
  // The request ended: its slot remembers `result`'s text (if any) and goes
  // to the next request waiting for one.
  void LeaveSlot(const std::shared_ptr<RequestStream>& stream, const GenerateResult* result);
  struct Task {
    std::function<void()> fn;
    std::promise<bool> ran;
  };
  // One turn of Loop: new jobs, cancellations, tasks, a step.
  void Iterate(std::vector<Job>& jobs, const std::vector<std::shared_ptr<RequestStream>>& cancels,
               const std::vector<std::shared_ptr<Task>>& tasks);
  void Publish(int64_t prompt_tokens, int64_t generated_tokens);

  Engine& engine_;
  Options options_;
  std::unique_ptr<Scheduler> scheduler_;                // engine thread only
  std::vector<std::shared_ptr<RequestStream>> active_;  // engine thread only
  int64_t step_prompt_ = 0, step_generated_ = 0;        // engine thread: counted during a Step
  std::vector<Slot> slots_;                             // engine thread only
  std::deque<std::shared_ptr<RequestStream>> slot_queue_;  // engine thread: waiting for a slot
  std::thread thread_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::vector<Job> inbox_;
  std::vector<std::shared_ptr<RequestStream>> cancels_;
  std::vector<std::shared_ptr<Task>> tasks_;
  int64_t in_flight_ = 0;
  bool stopping_ = false;
  Stats stats_;
  std::deque<StepCount> recent_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace rotor::serve
