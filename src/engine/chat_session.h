// A conversation with a model: one sequence whose KV cache lives across turns.
//
// Each turn renders only what is new since the tokens already in the cache
// (the previous reply's end-of-turn markup, the user's message, the assistant
// header), runs just those tokens as a prompt through the runner (runner.h,
// chunks of prefill_step) and streams the reply, one sample/stop step
// (sample_step.h) and one runner step per token; the reply's tokens stay in
// the cache, so the next turn continues from them. Template markup is
// tokenized with parse_special ("<|im_start|>" becomes its control token);
// message content is not, so a user cannot type a control token.
//
// The cache is the truth: the transcript holds what the user saw, and the
// next turn reconciles the two (a reply that stopped on a stop string whose
// first tokens were already run, a cancelled reply, a last token the full
// cache could not take), so that the conversation continues as if the whole
// transcript had been written in one go.
//
//   ASSIGN_OR_RETURN(auto chat, ChatSession::Create(engine, {.system = "Be brief."}, 512));
//   ASSIGN_OR_RETURN(ChatTurn t, chat->Send("Hi", print));
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"

namespace rotor {

struct ChatOptions {
  std::string system;          // the system prompt; "" = none
  ChatTemplate chat_template;  // plain unless chosen
  int n_predict = -1;          // tokens per reply; -1 = until end of turn or a full context
  SamplingParams sampling;
  std::vector<std::string> stop;  // extra stop strings (the template's are added)
  bool ignore_eos = false;        // run past end-of-generation and end-of-turn tokens
  KvConfig kv;
};

// One turn: what was prefilled, what was generated, and why the reply ended.
struct ChatTurn {
  std::string reply;            // the reply as kept in the transcript (trimmed)
  // The reply's tokens in the cache: all of them but a last one that ended
  // the reply on a stop string or found the cache full (its text, up to the
  // stop string, is in the reply; the next turn reconciles the two).
  std::vector<int32_t> tokens;
  int64_t n_prompt = 0;         // tokens prefilled this turn
  int64_t n_cached = 0;         // tokens of the turn taken from the prefix cache instead
  int64_t n_generated = 0;      // tokens.size()
  FinishReason finish = FinishReason::kLength;
  std::string error;  // finish kError: why (the reply so far is kept)
  int64_t prompt_ns = 0, gen_ns = 0;
  int64_t n_past = 0;  // tokens of the whole conversation after the turn
  // finish kContext before anything ran: the tokens the turn needed, and
  // whether they would not fit even an empty cache (the message alone is too
  // long: /clear cannot help).
  int64_t n_refused = 0;
  bool longer_than_context = false;
  double prompt_tps() const { return prompt_ns ? n_prompt * 1e9 / prompt_ns : 0; }
  double gen_tps() const { return gen_ns ? n_generated * 1e9 / gen_ns : 0; }
};

class ChatSession {
 public:
  // prefill_step: prompt tokens per forward pass (0 = the whole context), the
  // runner's option (runner.h).
  static Result<std::unique_ptr<ChatSession>> Create(Engine& engine, ChatOptions options,
                                                     int prefill_step = kDefaultPrefillStep);

  // Adds a user message and streams the assistant's reply to `on_text`
  // (return false to stop it). Setting `*cancel` (from a signal handler, say)
  // stops the reply after the current token: finish kCancelled, what was
  // generated stays. A message that does not fit the context (full cache)
  // (its cache's ExpectPrompt, or FitsNewCache when it starts over) gives
  // finish kContext, no reply and an unchanged transcript.
  Result<ChatTurn> Send(std::string_view user, const TextCallback& on_text,
                        const std::atomic<bool>* cancel = nullptr);

  // Drops history and cache; the system prompt stays.
  void Clear();
  // Replaces the transcript (system messages included) and prefills it, so the
  // next message is all the next turn processes. Returns the tokens prefilled.
  Result<int64_t> Load(std::vector<ChatMessage> messages);
  // The same, starting from a KV file (SaveKv) where it agrees: the file's
  // tokens that begin the transcript's rendering are restored instead of
  // prefilled. A file that cannot be used (written for another model, K/V
  // type, RoPE mode or positions; corrupt; not this transcript's) is reported
  // in `kv` and the transcript prefilled as without it.
  struct Loaded {
    int64_t n_prompt = 0;    // tokens prefilled
    int64_t n_restored = 0;  // tokens taken from the KV file
    Status kv;               // why the KV file was not used
  };
  Result<Loaded> Load(std::vector<ChatMessage> messages, const std::string& kv_file);
  // Writes the cache's tokens (tokens()) and their K/V to a KV file
  // (kv_file.h); an error when the cache no longer holds them all in order (an
  // evicting policy past its size). Returns the bytes written.
  Result<int64_t> SaveKv(const std::string& path) const;

  // The transcript: the system prompt (if any), then user and assistant turns.
  const std::vector<ChatMessage>& messages() const { return messages_; }
  // Every token of the conversation in order, as run through the cache: a
  // single pass over them gives the state the session is in.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const KvCache& cache() const { return *cache_; }
  const ChatOptions& options() const { return options_; }
  // Tokens per reply from the next turn on (-1 = no limit).
  void set_n_predict(int n) { options_.n_predict = n < 0 ? -1 : n; }
  const ChatTemplate& chat_template() const { return options_.chat_template; }

 private:
  ChatSession(Engine& engine, ChatOptions options, int prefill_step);
  struct NewTokens {
    std::vector<int32_t> tokens;
    bool from_scratch = false;   // the cache must be cleared first (tokens start with BOS)
    bool after_special = false;  // the tokens end with a special token
  };
  // The tokens that bring the cache from its state to `messages` rendered
  // (followed by the assistant header if `add_generation_prompt`); with
  // `scratch`, or when the rendering does not continue the cache's, all of it.
  NewTokens Plan(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                 bool scratch = false) const;
  // Runs a feed through the cache; logits_ then points at its last token's
  // row. On an error after a chunk ran the cache is cleared (the next turn
  // renders everything again); a feed the cache refuses leaves it as it was.
  Status Run(Feed& feed);
  void ResetCache();

  Engine& engine_;
  ChatOptions options_;
  Runner runner_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<int32_t> stop_tokens_;  // end-of-turn tokens besides the end-of-generation ones
  const float* logits_ = nullptr;     // [n_vocab] after the last token run (the runner's row)
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> tokens_;
  bool after_special_ = true;  // the cache ends with a special token (or is empty)
  // After a reply: the rendering up to its start (the assistant header) and
  // the text its tokens decode to. The closing markup is not in the cache yet.
  bool reply_open_ = false;
  std::string reply_header_, reply_fed_;
};

}  // namespace rotor
