#include "engine/chat_session.h"

#include <algorithm>

#include "base/check.h"
#include "base/timer.h"
#include "engine/sample_step.h"
#include "kv/kv_file.h"

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

ChatSession::ChatSession(Engine& engine, ChatOptions options, int prefill_step)
    : engine_(engine),
      options_(std::move(options)),
      runner_(engine.model(), engine.pool(),
              RunnerOptions{.prefill_step = prefill_step, .n_ctx = engine.n_ctx()}) {}

Result<std::unique_ptr<ChatSession>> ChatSession::Create(Engine& engine, ChatOptions options,
                                                         int prefill_step) {
  if (options.n_predict < -1)
    return Errorf("chat: -n {} must be >= 0, or -1 for no limit", options.n_predict);
  if (prefill_step < 0) return Errorf("chat: --prefill-step {} must be >= 0", prefill_step);
  RETURN_IF_ERROR(ValidateSamplingParams(options.sampling));
  RETURN_IF_ERROR(ValidateLogitBias(options.sampling, engine.model().config().n_vocab));
  RETURN_IF_ERROR(CheckChatTemplateTokens(options.chat_template, engine.tokenizer()));
  const KvShape shape = engine.model().kv_shape(engine.n_ctx());
  RETURN_IF_ERROR(ResolveKvConfig(options.kv, shape).status());

  std::unique_ptr<ChatSession> s(new ChatSession(engine, std::move(options), prefill_step));
  ASSIGN_OR_RETURN(s->cache_, KvCache::Create(shape, s->options_.kv, &engine.kv_pool()));
  if (!engine.prefix_cache()) s->cache_->DisablePublishing();
  s->sampler_ = std::make_unique<Sampler>(s->options_.sampling, engine.model().config().n_vocab);

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

Status ChatSession::Run(Feed& feed) {
  if (feed.tokens.empty()) return Status::Ok();
  Status s = runner_.Run(feed);
  if (!s.ok()) {
    if (feed.n_run > 0) ResetCache();  // a chunk ran: the cache no longer matches anything
    return s;
  }
  logits_ = feed.rows;
  tokens_.insert(tokens_.end(), feed.tokens.begin(), feed.tokens.end());
  return Status::Ok();
}

Result<ChatTurn> ChatSession::Send(std::string_view user, const TextCallback& on_text,
                                   const std::atomic<bool>* cancel) {
  const Tokenizer& tok = engine_.tokenizer();
  std::vector<ChatMessage> next = messages_;
  next.push_back({"user", std::string(user)});
  ChatTurn turn;
  turn.n_past = static_cast<int64_t>(tokens_.size());

  // The turn's new tokens run as a prompt. Whether they fit is the cache's
  // answer (the runner asks ExpectPrompt), or FitsNewCache's when the
  // conversation starts over in an emptied cache.
  NewTokens plan = Plan(next, /*add_generation_prompt=*/true);
  const int64_t start_ns = NowNs();
  auto refused = [&](int64_t n) {
    turn.finish = FinishReason::kContext;
    turn.n_refused = n;
    turn.longer_than_context = !FitsNewCache(cache_->config(), cache_->shape(), n).ok();
    return turn;
  };
  if (plan.from_scratch) {
    if (!FitsNewCache(cache_->config(), cache_->shape(), std::ssize(plan.tokens)).ok())
      return refused(std::ssize(plan.tokens));
    ResetCache();
  }
  // A conversation that starts over (a new session, /clear, a history the
  // template renders differently) takes what the prefix cache holds of it.
  std::span<const int32_t> fresh = plan.tokens;
  if (engine_.prefix_cache() && cache_->n_seen() == 0 && !fresh.empty()) {
    const int64_t cached = cache_->AttachPrefix(fresh, std::ssize(fresh) - 1);
    tokens_.insert(tokens_.end(), fresh.begin(), fresh.begin() + cached);
    fresh = fresh.subspan(cached);
    turn.n_cached = cached;
  }
  Feed prompt = Feed::Prompt(cache_.get(), fresh);
  if (Status s = Run(prompt); !s.ok()) {
    if (prompt.status.ok()) return s;
    return refused(std::ssize(fresh));  // refused before anything ran
  }
  after_special_ = plan.after_special;
  for (int32_t t : plan.tokens) sampler_->Accept(t);
  turn.n_prompt = std::ssize(fresh);
  messages_ = std::move(next);
  reply_header_ = options_.chat_template.Apply(messages_, true);
  reply_fed_.clear();
  reply_open_ = true;
  const int64_t first_ns = NowNs();
  turn.prompt_ns = first_ns - start_ns;

  // The reply: one sample/stop step per token; every token that continues
  // the text is run at once (the reply's last one too: the next turn starts
  // after it).
  SampleStep step(tok, *sampler_,
                  StopRules{.n_predict = options_.n_predict,
                            .ignore_eos = options_.ignore_eos,
                            .stop = options_.stop,
                            .end_tokens = stop_tokens_,
                            .trim_leading_space = true},
                  &engine_.token_trie());
  std::string shown;  // the reply as released: no leading whitespace (sample_step.h)
  bool stopped_by_caller = false;
  auto emit = [&](std::string_view text) {
    if (text.empty()) return;
    shown.append(text);
    if (on_text && !on_text(text)) stopped_by_caller = true;
  };
  const int n_vocab = engine_.model().config().n_vocab;
  for (;;) {
    const Sampled t = step.Next(std::span<const float>(logits_, n_vocab), *cache_);
    if (t.continues) {
      Feed one = Feed::Continue(cache_.get(), std::span<const int32_t>(&t.token, 1));
      RETURN_IF_ERROR(Run(one));
      after_special_ =
          tok.Type(t.token) == TokenType::kControl || tok.Type(t.token) == TokenType::kUserDefined;
      turn.tokens.push_back(t.token);
      reply_fed_ += t.piece;
    }
    emit(t.text);
    if (t.finish) {
      turn.finish = *t.finish;
      turn.error = t.error;
      break;
    }
    if (stopped_by_caller || (cancel != nullptr && cancel->load())) {
      turn.finish = FinishReason::kCancelled;
      break;
    }
  }
  const SampleStep::Tail tail = step.Flush();  // nothing after a stop string
  if (turn.finish != FinishReason::kStop && turn.finish != FinishReason::kContext)
    reply_fed_ += tail.piece;
  emit(tail.text);
  turn.n_generated = static_cast<int64_t>(turn.tokens.size());
  turn.gen_ns = NowNs() - first_ns;
  turn.reply = std::string(TrimRight(shown));
  messages_.push_back({"assistant", turn.reply});
  turn.n_past = static_cast<int64_t>(tokens_.size());
  return turn;
}

Result<int64_t> ChatSession::Load(std::vector<ChatMessage> messages) {
  ASSIGN_OR_RETURN(Loaded loaded, Load(std::move(messages), ""));
  return loaded.n_prompt;
}

Result<ChatSession::Loaded> ChatSession::Load(std::vector<ChatMessage> messages,
                                              const std::string& kv_file) {
  for (const ChatMessage& m : messages)
    if (m.role.empty()) return Status::Error("chat: a message has no role");
  const bool has_turns = std::any_of(messages.begin(), messages.end(),
                                     [](const ChatMessage& m) { return m.role != "system"; });
  NewTokens plan;
  if (has_turns) {  // else the first message renders everything
    plan = Plan(messages, /*add_generation_prompt=*/false, /*scratch=*/true);
    if (Status fits = FitsNewCache(cache_->config(), cache_->shape(), std::ssize(plan.tokens));
        !fits.ok())
      return Errorf("chat: the transcript does not fit: {} (raise -c, or choose an evicting --kv)",
                    fits.message());
  }
  ResetCache();
  sampler_->Reset();
  messages_ = std::move(messages);
  Loaded out;
  if (plan.tokens.empty()) return out;
  std::span<const int32_t> rest = plan.tokens;
  if (!kv_file.empty()) {
    Result<KvFileLoaded> r =
        LoadKvFile(kv_file, *cache_, KvFileLoadOptions{.text = std::span<const int32_t>(rest)});
    if (r.ok() && r->n_loaded == 0 && r->n_file > 0)
      out.kv = Errorf("kv file {}: its tokens are not this transcript's", kv_file);
    else if (!r.ok())
      out.kv = r.status();
    if (r.ok()) {
      out.n_restored = r->n_loaded;
      tokens_.assign(rest.begin(), rest.begin() + r->n_loaded);
      rest = rest.subspan(r->n_loaded);
    }
  }
  Feed prompt = Feed::Prompt(cache_.get(), rest);
  RETURN_IF_ERROR(Run(prompt));
  after_special_ = plan.after_special;
  for (int32_t t : plan.tokens) sampler_->Accept(t);
  out.n_prompt = std::ssize(rest);
  return out;
}

Result<int64_t> ChatSession::SaveKv(const std::string& path) const {
  return SaveKvFile(path, *cache_, tokens_);
}

}  // namespace rotor
