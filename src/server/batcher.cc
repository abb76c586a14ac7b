#include "server/batcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <new>

namespace rotor::serve {

std::vector<StreamEvent> RequestStream::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()),
                               std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

std::vector<StreamEvent> RequestStream::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()),
                               std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void RequestStream::Push(StreamEvent e) {
  std::shared_ptr<std::function<void()>> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
    notify = notify_;
  }
  cv_.notify_one();
  if (notify) (*notify)();
}

void RequestStream::SetNotify(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  notify_ = fn ? std::make_shared<std::function<void()>>(std::move(fn)) : nullptr;
}

Batcher::Batcher(Engine& engine, const Options& options) : engine_(engine), options_(options) {
  Scheduler::Options so;
  so.max_seqs = options.parallel;
  so.prefill_step = options.prefill_step;
  // Admission is bounded here (parallel + max_queue in flight), not by the scheduler.
  so.max_queue = options.parallel + options.max_queue + 1;
  scheduler_ = std::make_unique<Scheduler>(engine, so);
  slots_.resize(options.parallel);
  started_ = std::chrono::steady_clock::now();
  stats_.kv = engine.kv_pool().stats();  // the engine thread is not running yet
  stats_.kv_block_cells = engine.kv_pool().block_cells();
}

Batcher::~Batcher() { Stop(); }

void Batcher::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Loop(); });
}

void Batcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Requests that never reached the engine thread (or when it never ran).
  std::vector<Job> left;
  std::vector<std::shared_ptr<Task>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(inbox_);
    tasks.swap(tasks_);
    in_flight_ -= static_cast<int64_t>(left.size());
  }
  for (Job& j : left)
    j.stream->Push({StreamEvent::Kind::kError, "the server is shutting down", {}, 0, 0, 503});
  for (const auto& t : tasks) t->ran.set_value(false);
}

bool Batcher::RunOnEngineThread(std::function<void()> fn) {
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  std::future<bool> ran = task->ran.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    tasks_.push_back(task);
  }
  cv_.notify_one();
  return ran.get();
}

bool Batcher::Submit(SeqRequest request, std::shared_ptr<RequestStream> stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || in_flight_ >= options_.parallel + options_.max_queue) return false;
    ++in_flight_;
    inbox_.push_back(Job{std::move(request), std::move(stream)});
  }
  cv_.notify_one();
  return true;
}

bool Batcher::Submit(std::vector<SeqRequest> requests,
                     const std::vector<std::shared_ptr<RequestStream>>& streams) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto n = static_cast<int64_t>(requests.size());
    if (stopping_ || in_flight_ + n > options_.parallel + options_.max_queue) return false;
    in_flight_ += n;
    for (size_t i = 0; i < requests.size(); ++i)
      inbox_.push_back(Job{std::move(requests[i]), streams[i]});
  }
  cv_.notify_one();
  return true;
}

void Batcher::Cancel(std::shared_ptr<RequestStream> stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(std::move(stream));
  }
  cv_.notify_one();
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  const auto now = std::chrono::steady_clock::now();
  int64_t prompt = 0, generated = 0;
  for (const StepCount& c : recent_) {
    if (now - c.at > kRateWindow) continue;
    prompt += c.prompt_tokens;
    generated += c.generated_tokens;
  }
  const double window = std::chrono::duration<double>(std::min<std::chrono::steady_clock::duration>(
                                                          kRateWindow, now - started_))
                            .count();
  if (window > 0) {
    s.prompt_tps = prompt / window;
    s.gen_tps = generated / window;
  }
  return s;
}

void Batcher::Loop() {
  for (;;) {
    std::vector<Job> jobs;
    std::vector<std::shared_ptr<RequestStream>> cancels;
    std::vector<std::shared_ptr<Task>> tasks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty() ||
               !scheduler_->Idle();
      });
      if (stopping_) break;
      jobs.swap(inbox_);
      cancels.swap(cancels_);
      tasks.swap(tasks_);
    }
    step_prompt_ = step_generated_ = 0;
    try {
      Iterate(jobs, cancels, tasks);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "rotor serve: out of memory on the engine thread\n");
      EndAll("out of memory on the engine thread; retry later", 503);
    }
  }
  EndAll("the server is shutting down", 503);
  Publish(0, 0);
}

void Batcher::Iterate(std::vector<Job>& jobs,
                      const std::vector<std::shared_ptr<RequestStream>>& cancels,
                      const std::vector<std::shared_ptr<Task>>& tasks) {
  {
    for (Job& j : jobs) AddJob(std::move(j));
    for (const auto& s : cancels)
      if (!s->ended_ && s->seq_id_ != 0) scheduler_->Cancel(s->seq_id_);
    for (const auto& t : tasks) {
      t->fn();
      t->ran.set_value(true);
    }
    if (!scheduler_->Idle()) {
      Status st = Status::Ok();
      int status = 500;
      // An allocation that fails in a step (K/V blocks as sequences grow,
      // the forward pass's scratch) leaves that step half done for every
      // sequence in it: those end with a 503 that names the cause, their
      // memory is freed, and the server goes on with the next requests.
      try {
        st = scheduler_->Step();
      } catch (const std::bad_alloc&) {
        st = Errorf("out of memory in a decoding step ({} sequences running, K/V memory {} "
                    "MiB in use); lower -c, --kv-memory or --parallel, or retry later",
                    scheduler_->n_running(), engine_.kv_pool().stats().bytes >> 20);
        status = 503;
      }
      if (!st.ok()) {
        // Not attributable to one request: end them all, keep serving.
        std::fprintf(stderr, "rotor serve: engine step failed: %s\n", st.message().c_str());
        EndAll(status == 503 ? st.message() : "internal error: " + st.message(), status);
      }
    }
    Publish(step_prompt_, step_generated_);
  }
}

void Batcher::AddJob(Job job) {
  std::shared_ptr<RequestStream> stream = job.stream;
  stream->n_prompt_ = static_cast<int64_t>(job.request.tokens.size());
  Result<KvConfig> kv = engine_.Validate(job.request.options, job.request.spelling);
  if (kv.ok()) stream->kv_ = *kv;  // else Add says why
  Result<SeqId> id = Status::Error("");
  try {
    id = scheduler_->Add(std::move(job.request),
                         [this, stream](const SeqEvent& e) { OnEvent(stream, e); });
  } catch (const std::bad_alloc&) {
    stream->ended_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    stream->Push({StreamEvent::Kind::kError,
                  fmt::format("out of memory while admitting the request (a context of {} "
                              "tokens; lower -c or --parallel); retry later",
                              engine_.n_ctx()),
                  {}, 0, 0, 503});
    return;
  }
  if (!id.ok()) {
    stream->ended_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    stream->Push({StreamEvent::Kind::kError, id.message(), {}, 0, 0, 400});
    return;
  }
  stream->seq_id_ = *id;
  TakeSlot(stream);
  active_.push_back(std::move(stream));
}

void Batcher::TakeSlot(const std::shared_ptr<RequestStream>& stream) {
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    if (slots_[i].busy) continue;
    slots_[i].busy = true;
    stream->slot_ = i;
    return;
  }
  slot_queue_.push_back(stream);
}

void Batcher::LeaveSlot(const std::shared_ptr<RequestStream>& stream,
                        const GenerateResult* result) {
  const int i = stream->slot_;
  if (i < 0) {
    std::erase(slot_queue_, stream);
    return;
  }
  stream->slot_ = -1;
  Slot& slot = slots_[i];
  if (result != nullptr) {
    slot.tokens = result->prompt_tokens;
    slot.tokens.insert(slot.tokens.end(), result->tokens.begin(), result->tokens.end());
    slot.kv = stream->kv_;
  }
  slot.busy = false;
  if (slot_queue_.empty()) return;
  std::shared_ptr<RequestStream> next = std::move(slot_queue_.front());
  slot_queue_.pop_front();
  TakeSlot(next);
}

void Batcher::OnEvent(const std::shared_ptr<RequestStream>& stream, const SeqEvent& e) {
  if (!e.finished) {
    if (e.token >= 0) {
      ++step_generated_;
      if (!stream->saw_token_) step_prompt_ += stream->n_prompt_;
      stream->saw_token_ = true;
    }
    if (stream->ended_) return;
    if (e.logprobs != nullptr) {
      StreamEvent ev{StreamEvent::Kind::kText, std::string(e.text), {}, 0, 0, 0};
      ev.token = e.token;
      ev.logprobs = *e.logprobs;
      stream->Push(std::move(ev));
    } else if (!e.text.empty()) {
      stream->Push({StreamEvent::Kind::kText, std::string(e.text), {}, 0, 0, 0});
    }
    return;
  }
  std::erase(active_, stream);
  const GenerateResult& r = *e.result;
  LeaveSlot(stream, r.finish == FinishReason::kError ? nullptr : &r);
  // The request could not run (its prompt does not fit: 400) or its memory
  // could not be had (503; the other sequences go on).
  if (r.finish == FinishReason::kError) {
    if (stream->ended_) return;
    stream->ended_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    stream->Push({StreamEvent::Kind::kError, r.error, {}, 0, 0, r.out_of_memory ? 503 : 400});
    return;
  }
  if (!stream->saw_token_ && r.finish != FinishReason::kCancelled)
    step_prompt_ += stream->n_prompt_;
  if (stream->ended_) return;  // already ended with an error
  stream->ended_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    if (r.finish == FinishReason::kCancelled) ++stats_.cancelled;
  }
  stream->Push({StreamEvent::Kind::kDone,
                {},
                r.finish,
                static_cast<int64_t>(r.prompt_tokens.size()),
                static_cast<int64_t>(r.tokens.size()),
                200,
                r.cached_tokens});
}

void Batcher::EndAll(const std::string& message, int status) {
  const std::vector<std::shared_ptr<RequestStream>> all = active_;
  for (const auto& s : all) {
    if (s->ended_) continue;
    s->ended_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    s->Push({StreamEvent::Kind::kError, message, {}, 0, 0, status});
    scheduler_->Cancel(s->seq_id_);
  }
  // Cancelled running sequences leave (and free their caches) at this Step.
  if (!scheduler_->Idle()) {
    try {
      (void)scheduler_->Step();
    } catch (const std::bad_alloc&) {
      // Admitting a waiting request failed; the cancelled ones left first.
    }
  }
  std::vector<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) return;
    left.swap(inbox_);
    in_flight_ -= static_cast<int64_t>(left.size());
  }
  for (Job& j : left) j.stream->Push({StreamEvent::Kind::kError, message, {}, 0, 0, status});
}

void Batcher::Publish(int64_t prompt_tokens, int64_t generated_tokens) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = static_cast<int64_t>(scheduler_->n_running());
  stats_.queued = std::max<int64_t>(0, in_flight_ - stats_.running);
  stats_.kv_cells = scheduler_->kv_cells_used();
  stats_.kv = engine_.kv_pool().stats();
  stats_.kv_block_cells = engine_.kv_pool().block_cells();
  stats_.preempted = scheduler_->n_preempted();
  stats_.prompt_tokens += prompt_tokens;
  stats_.generated_tokens += generated_tokens;
  if (prompt_tokens > 0 || generated_tokens > 0)
    recent_.push_back(StepCount{now, prompt_tokens, generated_tokens});
  while (!recent_.empty() && now - recent_.front().at > kRateWindow) recent_.pop_front();
}

}  // namespace rotor::serve
