#include "engine/chat_session.h"

#include <algorithm>

#include "base/check.h"
#include "base/timer.h"
#include "engine/stop_matcher.h"

namespace rotor {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string Concat(const std::vector<ChatSegment>& segments) {
  std::string s;
  for (const ChatSegment& seg : segments) s += seg.text;
  return s;
}

// The segments without their first `n` characters.
std::vector<ChatSegment> DropFront(const std::vector<ChatSegment>& segments, size_t n) {
  std::vector<ChatSegment> out;
  for (const ChatSegment& s : segments) {
    if (n >= s.text.size() && !(n == 0 && s.text.empty())) {
      n -= s.text.size();
      continue;
    }
    out.push_back({s.text.substr(n), s.content});
    n = 0;
  }
  return out;
}

// Drops leading whitespace, whichever segments hold it.
std::vector<ChatSegment> DropLeadingSpace(const std::vector<ChatSegment>& segments) {
  const std::string text = Concat(segments);
  return DropFront(segments, text.size() - TrimLeft(text).size());
}

}  // namespace

ChatSession::ChatSession(Engine& engine, ChatOptions options)
    : engine_(engine), options_(std::move(options)) {}

Result<std::unique_ptr<ChatSession>> ChatSession::Create(Engine& engine, ChatOptions options) {
  if (options.n_predict < -1)
    return Errorf("chat: -n {} must be >= 0, or -1 for no limit", options.n_predict);
  if (options.prefill_step < 0)
    return Errorf("chat: --prefill-step {} must be >= 0", options.prefill_step);
  RETURN_IF_ERROR(ValidateSamplingParams(options.sampling));
  const KvShape shape = engine.model().config().kv_shape(engine.n_ctx());
  RETURN_IF_ERROR(ResolveKvConfig(options.kv, shape).status());

  std::unique_ptr<ChatSession> s(new ChatSession(engine, std::move(options)));
  ASSIGN_OR_RETURN(s->cache_, KvCache::Create(shape, s->options_.kv));
  const int step = s->options_.prefill_step > 0 ? s->options_.prefill_step : engine.n_ctx();
  s->forward_ = std::make_unique<Forward>(engine.model(), engine.pool(), step, engine.n_ctx());
  const int n_vocab = engine.model().config().n_vocab;
  s->logits_.resize(n_vocab);
  s->sampler_ = std::make_unique<Sampler>(s->options_.sampling, n_vocab);

  // The template's end-of-turn markup, when the vocabulary has it as one token
  // (control or user-defined, as Phi-3's "<|end|>" may be).
  const Tokenizer& tok = engine.tokenizer();
  const std::string_view eot = s->options_.chat_template.EndOfTurn();
  if (!eot.empty()) {
    std::vector<int32_t> ids = tok.Encode(eot, /*add_special=*/false, /*parse_special=*/true);
    if (ids.size() == 1) s->stop_tokens_.push_back(ids[0]);
  }
  for (std::string& stop : s->options_.chat_template.StopStrings())
    s->options_.stop.push_back(std::move(stop));
  s->Clear();
  return s;
}

void ChatSession::ResetCache() {
  cache_->Clear();
  tokens_.clear();
  after_special_ = true;
  reply_open_ = false;
  reply_header_.clear();
  reply_fed_.clear();
}

void ChatSession::Clear() {
  ResetCache();
  sampler_->Reset();
  messages_.clear();
  if (!options_.system.empty()) messages_.push_back({"system", options_.system});
}

// Three cases: an empty cache takes the whole rendering (after BOS). After a
// reply, the rendering continues from the end of the assistant header; what
// the reply ran is skipped (leading whitespace aside: the model writes its own)
// and the rest (the closing markup, or the part of it a stop string did not
// run) comes first. After Load, the rendering continues from the transcript's.
ChatSession::NewTokens ChatSession::Plan(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt, bool scratch) const {
  const Tokenizer& tok = engine_.tokenizer();
  const std::vector<ChatSegment> full =
      options_.chat_template.Render(messages, add_generation_prompt);
  std::vector<ChatSegment> rest;
  bool continued = false;
  if (!scratch && !tokens_.empty()) {
    const std::string text = Concat(full);
    if (reply_open_ && text.starts_with(reply_header_)) {
      rest = DropFront(full, reply_header_.size());
      const std::string_view fed = TrimLeft(reply_fed_);
      if (fed.empty()) {
        // No reply (or only whitespace): skip just the whitespace it ran.
        const std::string after = Concat(rest);
        size_t n = 0;
        while (n < after.size() && n < reply_fed_.size() && after[n] == reply_fed_[n]) ++n;
        rest = DropFront(rest, n);
      } else {
        rest = DropLeadingSpace(rest);
        if (Concat(rest).starts_with(fed)) {
          rest = DropFront(rest, fed.size());
        } else {
          // The reply as run differs from its rendering (trailing whitespace
          // the transcript trims): skip the rendered reply, keep its closing
          // markup.
          auto first_markup = std::find_if(rest.begin(), rest.end(),
                                           [](const ChatSegment& s) { return !s.content; });
          rest.erase(rest.begin(), first_markup);
        }
      }
      continued = true;
    } else if (!reply_open_) {
      const std::string base = options_.chat_template.Apply(messages_, false);
      if (text.starts_with(base)) {
        rest = DropFront(full, base.size());
        continued = true;
      }
    }
  }
  NewTokens out;
  out.from_scratch = !continued;
  bool after_special = continued ? after_special_ : true;
  if (!continued) {
    rest = full;
    if (tok.add_bos() && tok.bos() >= 0) out.tokens.push_back(tok.bos());
  }
  out.after_special = EncodeChatSegments(tok, rest, after_special, &out.tokens);
  return out;
}

Status ChatSession::Feed(std::span<const int32_t> tokens) {
  if (tokens.empty()) return Status::Ok();
  SeqInput seq{cache_.get(), tokens, LogitsWanted::kLast};
  Status s = forward_->Prefill(seq, options_.prefill_step, logits_.data());
  if (!s.ok()) {
    ResetCache();  // a chunk may have run: the cache no longer matches anything
    return s;
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  return Status::Ok();
}

// Whether `n` more tokens fit the cache (after clearing it, if from scratch).
bool ChatSession::Fits(int64_t n, bool from_scratch) const {
  const int64_t remaining = cache_->Remaining();
  if (remaining < 0) return true;
  return n <= (from_scratch ? int64_t{cache_->n_cells()} : remaining);
}

Result<ChatTurn> ChatSession::Send(std::string_view user, const TextCallback& on_text,
                                   const std::atomic<bool>* cancel) {
  const Tokenizer& tok = engine_.tokenizer();
  std::vector<ChatMessage> next = messages_;
  next.push_back({"user", std::string(user)});
  ChatTurn turn;
  NewTokens plan = Plan(next, /*add_generation_prompt=*/true);
  if (!Fits(static_cast<int64_t>(plan.tokens.size()), plan.from_scratch)) {
    turn.finish = FinishReason::kContext;
    turn.n_past = static_cast<int64_t>(tokens_.size());
    return turn;
  }
  if (plan.from_scratch) ResetCache();

  const int64_t start_ns = NowNs();
  RETURN_IF_ERROR(Feed(plan.tokens));
  after_special_ = plan.after_special;
  for (int32_t t : plan.tokens) sampler_->Accept(t);
  turn.n_prompt = static_cast<int64_t>(plan.tokens.size());
  messages_ = std::move(next);
  reply_header_ = options_.chat_template.Apply(messages_, true);
  reply_fed_.clear();
  reply_open_ = true;
  const int64_t first_ns = NowNs();
  turn.prompt_ns = first_ns - start_ns;

  StreamDecoder decoder(tok);
  StopMatcher stops(options_.stop);
  std::string shown;  // the reply without its leading whitespace
  bool stopped_by_caller = false;
  auto emit = [&](std::string_view text) {
    if (shown.empty()) text = TrimLeft(text);
    if (text.empty()) return;
    shown.append(text);
    if (on_text && !on_text(text)) stopped_by_caller = true;
  };
  for (;;) {
    if (options_.n_predict >= 0 && turn.n_generated >= options_.n_predict) {
      turn.finish = FinishReason::kLength;
      break;
    }
    const int32_t token = sampler_->Sample(logits_);
    if (!options_.ignore_eos &&
        (tok.IsEndOfGeneration(token) ||
         std::find(stop_tokens_.begin(), stop_tokens_.end(), token) != stop_tokens_.end())) {
      turn.finish = FinishReason::kEos;
      break;
    }
    if (cache_->Remaining() == 0) {
      turn.finish = FinishReason::kContext;
      break;
    }
    const std::string piece = decoder.Push(token);
    const std::string text = stops.Push(piece);
    if (stops.stopped()) {  // the token that completes a stop string is not run
      emit(text);
      turn.finish = FinishReason::kStop;
      break;
    }
    const int32_t one[1] = {token};
    RETURN_IF_ERROR(Feed(one));
    sampler_->Accept(token);
    after_special_ =
        tok.Type(token) == TokenType::kControl || tok.Type(token) == TokenType::kUserDefined;
    turn.tokens.push_back(token);
    ++turn.n_generated;
    reply_fed_ += piece;
    emit(text);
    if (stopped_by_caller || (cancel != nullptr && cancel->load())) {
      turn.finish = FinishReason::kCancelled;
      break;
    }
  }
  if (turn.finish != FinishReason::kStop) {
    const std::string held = decoder.Flush();
    reply_fed_ += held;
    emit(stops.Push(held) + stops.Flush());
  }
  turn.gen_ns = NowNs() - first_ns;
  turn.reply = std::string(TrimRight(shown));
  messages_.push_back({"assistant", turn.reply});
  turn.n_past = static_cast<int64_t>(tokens_.size());
  return turn;
}

Result<int64_t> ChatSession::Load(std::vector<ChatMessage> messages) {
  for (const ChatMessage& m : messages)
    if (m.role.empty()) return Status::Error("chat: a message has no role");
  const bool has_turns = std::any_of(messages.begin(), messages.end(),
                                     [](const ChatMessage& m) { return m.role != "system"; });
  NewTokens plan;
  if (has_turns) {  // else the first message renders everything
    plan = Plan(messages, /*add_generation_prompt=*/false, /*scratch=*/true);
    if (!Fits(static_cast<int64_t>(plan.tokens.size()), true))
      return Errorf(
          "chat: the transcript has {} tokens, more than the context of {} (raise -c, "
          "or use --kv sink)",
          plan.tokens.size(), cache_->n_cells());
  }
  ResetCache();
  sampler_->Reset();
  messages_ = std::move(messages);
  if (plan.tokens.empty()) return int64_t{0};
  RETURN_IF_ERROR(Feed(plan.tokens));
  after_special_ = plan.after_special;
  for (int32_t t : plan.tokens) sampler_->Accept(t);
  return static_cast<int64_t>(plan.tokens.size());
}

}  // namespace rotor
