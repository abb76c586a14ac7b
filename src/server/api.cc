#include "server/api.h"

#include <fmt/format.h>

#include "grammar/grammar.h"
#include "kv_args/kv_args.h"
#include "server/fields.h"
#include "server/tool_calls.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace rotor::serve {
namespace {

using nlohmann::json;

ApiError Bad(std::string param, std::string message) {
  return BadRequest(std::move(message), std::move(param));
}

// Reads the fields of one request object; the first problem wins. Absent and
// null fields leave the output untouched (the server's default).
class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}
  const std::optional<ApiError>& error() const { return error_; }

  const json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  template <typename T>
  void Int(const char* key, int64_t lo, int64_t hi, T* out) {
    const json* v = Find(key);
    if (!v || error_) return;
    if (auto why = IntegerError(*v, lo, hi)) return Fail(key, std::move(*why));
    *out = static_cast<T>(v->get<int64_t>());
  }

  void Number(const char* key, double lo, double hi, float* out) {
    const json* v = Find(key);
    if (!v || error_) return;
    if (!v->is_number()) return Fail(key, fmt::format("must be a number, not {}", TypeName(*v)));
    const double d = v->get<double>();
    if (!(d >= lo && d <= hi))
      return Fail(key, fmt::format("{} is out of range [{}, {}]", d, lo, hi));
    *out = static_cast<float>(d);
  }

  void Bool(const char* key, bool* out) {
    const json* v = Find(key);
    if (!v || error_) return;
    if (!v->is_boolean()) return Fail(key, fmt::format("must be a boolean, not {}", TypeName(*v)));
    *out = v->get<bool>();
  }

  // A string field parsed by `parse` (one of `choices` on failure).
  template <typename T, typename Parse>
  bool Enum(const char* key, Parse parse, const char* choices, T* out) {
    const json* v = Find(key);
    if (!v || error_) return false;
    if (!v->is_string()) {
      Fail(key, fmt::format("must be a string ({}), not {}", choices, TypeName(*v)));
      return false;
    }
    auto parsed = parse(v->get<std::string>());
    if (!parsed) {
      Fail(key, fmt::format("unknown value '{}' (expected {})", v->get<std::string>(), choices));
      return false;
    }
    *out = *parsed;
    return true;
  }

  void Fail(const std::string& key, const std::string& message) {
    if (!error_) error_ = Bad(key, fmt::format("'{}' {}", key, message));
  }

 private:
  const json& j_;
  std::optional<ApiError> error_;
};

// A token-id list (an array of non-negative 32-bit integers); false if not one.
bool TokenIds(const json& ids, std::vector<int32_t>* out) {
  for (const json& t : ids) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return false;
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return true;
}

// A string, an array of strings (a prompt each), token ids (one prompt) or an
// array of token-id arrays (a prompt each).
std::optional<ApiError> ParsePrompt(const json& j, ApiRequest* out) {
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) return Bad("prompt", "'prompt' is required");
  const json& p = *it;
  out->prompts.clear();
  if (p.is_string()) {
    out->prompts.push_back(ApiPrompt{p.get<std::string>(), {}});
    return std::nullopt;
  }
  if (!p.is_array())
    return Bad("prompt", fmt::format("'prompt' must be a string or an array, not {}", TypeName(p)));
  if (p.empty()) return Bad("prompt", "'prompt' is empty");
  constexpr const char* kForms =
      "'prompt' must be a string, an array of strings, an array of token ids or an array of "
      "token-id arrays";
  if (p[0].is_number_integer()) {
    ApiPrompt one;
    if (!TokenIds(p, &one.tokens)) return Bad("prompt", kForms);
    out->prompts.push_back(std::move(one));
    return std::nullopt;
  }
  if (p.size() > static_cast<size_t>(kMaxPrompts))
    return Bad("prompt", fmt::format("'prompt' holds {} prompts, more than {}", p.size(),
                                     kMaxPrompts));
  for (size_t i = 0; i < p.size(); ++i) {
    ApiPrompt one;
    if (p[i].is_string()) {
      one.text = p[i].get<std::string>();
    } else if (!p[i].is_array() || !TokenIds(p[i], &one.tokens)) {
      return Bad("prompt", kForms);
    } else if (one.tokens.empty()) {
      return Bad("prompt", fmt::format("'prompt[{}]' is empty", i));
    }
    out->prompts.push_back(std::move(one));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& j, ApiRequest* out) {
  auto it = j.find("messages");
  if (it == j.end() || it->is_null()) return Bad("messages", "'messages' is required");
  if (!it->is_array() || it->empty())
    return Bad("messages", "'messages' must be a non-empty array of {role, content} objects");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return Bad(where, fmt::format("'{}' must be an object", where));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return Bad(where + ".role", fmt::format("'{}.role' must be a string", where));
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool")
      return Bad(where + ".role",
                 fmt::format("'{}.role' '{}' is not supported (system, user, assistant or tool)",
                             where, msg.role));
    if (auto e = ParseMessageTools(m, where, &msg)) return e;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (msg.role != "assistant")
        return Bad(where + ".content", fmt::format("'{}.content' is required", where));
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: only text, joined by newlines.
      for (const json& part : *content) {
        auto text = part.is_object() ? part.find("text") : part.end();
        if (!part.is_object() || part.value("type", "") != "text" || text == part.end() ||
            !text->is_string())
          return Bad(where + ".content",
                     fmt::format("'{}.content': only parts of type \"text\" are supported", where));
        if (!msg.content.empty()) msg.content += "\n";
        msg.content += text->get<std::string>();
      }
    } else {
      return Bad(where + ".content",
                 fmt::format("'{}.content' must be a string or an array of text parts", where));
    }
    out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const json& j, std::vector<std::string>* stop) {
  auto it = j.find("stop");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    *stop = {it->get<std::string>()};
    return std::nullopt;
  }
  constexpr size_t kMaxStops = 16;
  if (!it->is_array() || it->size() > kMaxStops)
    return Bad("stop",
               fmt::format("'stop' must be a string or an array of at most {} strings", kMaxStops));
  stop->clear();
  for (const json& s : *it) {
    if (!s.is_string()) return Bad("stop", "'stop' must be a string or an array of strings");
    stop->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// n, best_of, echo, logprobs, top_logprobs.
std::optional<ApiError> ParseChoices(const json& j, Endpoint endpoint, ApiRequest* out) {
  Fields f(j);
  f.Int("n", 1, kMaxChoices, &out->n);
  if (f.error()) return f.error();
  if (const json* b = f.Find("best_of"); b && *b != out->n)
    return Bad("best_of", fmt::format("'best_of' {} must equal n ({}): rotor does not rank choices",
                                      b->dump(), out->n));
  f.Bool("echo", &out->echo);
  const json* lp = f.Find("logprobs");
  if (endpoint == Endpoint::kChat) {
    bool on = false;
    f.Bool("logprobs", &on);
    int top = 0;
    f.Int("top_logprobs", 0, kMaxTopLogprobs, &top);
    if (f.error()) return f.error();
    if (f.Find("top_logprobs") && !on)
      return Bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    out->logprobs = on ? top : -1;
  } else if (lp && !(lp->is_boolean() && !lp->get<bool>())) {  // false: off
    f.Int("logprobs", 0, kMaxTopLogprobs, &out->logprobs);
  }
  if (f.error()) return f.error();
  out->options.logprobs = out->logprobs;
  return std::nullopt;
}

// Constrained output: OpenAI's response_format, llama-server's grammar and
// json_schema; at most one of them. Sets s->grammar (the server's default,
// from --grammar, stays when the request names none).
std::optional<ApiError> ParseConstraint(const json& j, const nlohmann::ordered_json& ordered,
                                        SamplingParams* s) {
  std::string field, gbnf;
  auto set = [&](const char* name, std::string text) -> std::optional<ApiError> {
    if (!field.empty())
      return Bad(name, fmt::format("'{}' and '{}' both constrain the output: give one", field, name));
    field = name;
    gbnf = std::move(text);
    return std::nullopt;
  };
  // The schema's text as its client wrote it (properties in order), from the
  // ordered parse at `path`.
  auto schema = [&](const char* name, const json& v,
                    const std::vector<std::string>& path) -> Result<std::string> {
    if (!v.is_object() && !v.is_boolean())
      return Errorf("'{}' must be a JSON Schema object", name);
    const nlohmann::ordered_json* in_order = OrderedAt(ordered, path);
    return grammar::JsonSchemaToGrammar(in_order ? in_order->dump() : v.dump());
  };
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    const json& rf = *it;
    auto type = rf.is_object() ? rf.find("type") : rf.end();
    if (type == rf.end() || !type->is_string())
      return Bad("response_format", "'response_format' must be an object with a string 'type'");
    const std::string t = type->get<std::string>();
    Result<std::string> text = std::string();
    if (t == "json_object") {
      // llama-server also takes a schema here.
      auto sc = rf.find("schema");
      text = sc == rf.end() ? Result<std::string>(std::string(grammar::JsonGrammarText()))
                            : schema("response_format.schema", *sc, {"response_format", "schema"});
    } else if (t == "json_schema") {
      // OpenAI: {"json_schema": {"schema": ...}}; llama-server: {"schema": ...}.
      const json* sc = nullptr;
      std::vector<std::string> path = {"response_format", "json_schema", "schema"};
      if (auto js = rf.find("json_schema"); js != rf.end() && js->is_object())
        if (auto in = js->find("schema"); in != js->end()) sc = &*in;
      if (auto direct = rf.find("schema"); sc == nullptr && direct != rf.end()) {
        sc = &*direct;
        path = {"response_format", "schema"};
      }
      text = sc == nullptr
                 ? Result<std::string>(Errorf("'response_format.json_schema.schema' is required"))
                 : schema("response_format.json_schema.schema", *sc, path);
    } else if (t != "text") {
      return Bad("response_format", fmt::format("unknown response_format type '{}' (text, "
                                                "json_object or json_schema)", t));
    }
    if (!text.ok()) return Bad("response_format", "'response_format': " + text.message());
    if (t != "text")
      if (auto e = set("response_format", std::move(*text))) return e;
  }
  if (auto it = j.find("json_schema"); it != j.end() && !it->is_null()) {
    Result<std::string> text = schema("json_schema", *it, {"json_schema"});
    if (!text.ok()) return Bad("json_schema", "'json_schema': " + text.message());
    if (auto e = set("json_schema", std::move(*text))) return e;
  }
  if (auto it = j.find("grammar"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Bad("grammar", "'grammar' must be a string (GBNF)");
    if (!it->get<std::string>().empty())
      if (auto e = set("grammar", it->get<std::string>())) return e;
  }
  if (field.empty()) return std::nullopt;
  Result<std::shared_ptr<const grammar::Grammar>> g = grammar::ParseGrammar(gbnf);
  if (!g.ok()) return Bad(field, fmt::format("'{}': {}", field, g.message()));
  s->grammar = std::move(*g);
  return std::nullopt;
}

// The request's KV fields start from the server's options: naming another
// policy starts from that policy's defaults (KvConfig::Set).
std::optional<ApiError> ParseKv(const json& j, KvConfig* kv) {
  std::string field;
  if (Status s = cli::SetKvFields(j, kv, &field); !s.ok()) return Bad(field, s.message());
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseLogitBias(const json& v, const std::string& param,
                                       std::vector<std::pair<int32_t, float>>* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object())
    return Bad(param, fmt::format("'{}' must be an object {{\"token id\": bias}}, not {}", param,
                                  TypeName(v)));
  out->clear();
  for (const auto& [key, bias] : v.items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0 ||
        id > std::numeric_limits<int32_t>::max())
      return Bad(param, fmt::format("'{}': key '{}' is not a token id (a non-negative integer)",
                                    param, key));
    if (!bias.is_number())
      return Bad(param, fmt::format("'{}': the bias of token {} must be a number, not {}", param,
                                    key, TypeName(bias)));
    const double b = bias.get<double>();
    if (!(b >= -kLogitBiasLimit && b <= kLogitBiasLimit))
      return Bad(param, fmt::format("'{}': the bias of token {} ({}) is out of range [-100, 100]",
                                    param, key, b));
    out->emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return std::nullopt;
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

json ErrorBody(const ApiError& e) {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", or_null(e.param)},
            {"code", or_null(e.code)}}}};
}

ApiError ErrorForStatus(int status, std::string_view method, std::string_view path) {
  ApiError e;
  e.status = status;
  switch (status) {
    case 404:
      e.message = fmt::format("unknown endpoint {} {}", method, path);
      e.code = "not_found";
      break;
    case 405:
      e.message = fmt::format("method {} is not allowed for {}", method, path);
      e.code = "method_not_allowed";
      break;
    case 408:
      e.message = "the request did not arrive in time (--header-timeout, --body-timeout)";
      e.code = "request_timeout";
      break;
    case 413:
      e.message = "the request body is larger than the server's limit (--max-body)";
      e.code = "request_too_large";
      break;
    case 429:
      e.message = "too many connections from this address (--max-connections-per-client)";
      e.code = "too_many_connections";
      break;
    case 431:
      e.message = "the request header is too large (--max-header-bytes, --max-headers)";
      e.code = "request_header_too_large";
      break;
    case 414:
      e.message = "the request URI is too long";
      break;
    default:
      e.message = status >= 500
                      ? "internal server error"
                      : fmt::format("malformed HTTP request or unsupported method {}", method);
      if (status >= 500) e.type = "server_error";
  }
  return e;
}

std::optional<ApiError> ParseRequest(std::string_view body, Endpoint endpoint,
                                     const GenerateOptions& defaults, ApiRequest* out) {
  std::string why;
  const json j = ParseJson(body, &why);
  if (j.is_discarded()) return Bad("", "the request body is not valid JSON: " + why);
  if (!j.is_object()) return Bad("", "the request body must be a JSON object");
  out->endpoint = endpoint;
  out->options = defaults;
  GenerateOptions& o = out->options;
  if (auto it = j.find("model"); it != j.end() && !it->is_null() && !it->is_string())
    return Bad("model", "'model' must be a string");
  if (auto unknown = FindUnknownField(
          j, endpoint == Endpoint::kChat ? kChatFields : kCompletionsFields))
    return Bad(unknown->name, unknown->message);
  if (auto e = endpoint == Endpoint::kChat ? ParseMessages(j, out) : ParsePrompt(j, out)) return e;
  if (auto e = ParseChoices(j, endpoint, out)) return e;
  if (auto e = ParseLogitBias(j.contains("logit_bias") ? j["logit_bias"] : json(), "logit_bias",
                              &o.sampling.logit_bias))
    return e;
  if (auto e = ParseStop(j, &o.stop)) return e;
  const nlohmann::ordered_json ordered =
      ParseOrdered(body, j, {"response_format", "json_schema", "tools"});
  if (endpoint == Endpoint::kChat)
    if (auto e = ParseTools(j, ordered, &out->tools)) return e;

  Fields f(j);
  f.Int("n_predict", -1, kMaxTokensLimit, &o.n_predict);  // llama-server's
  // -1: no budget of its own (llama.cpp's web page sends it): the server's
  // -1 rule, until end of text or a full context.
  f.Int("max_tokens", -1, kMaxTokensLimit, &o.n_predict);
  if (endpoint == Endpoint::kChat)
    f.Int("max_completion_tokens", -1, kMaxTokensLimit, &o.n_predict);
  SamplingParams& s = o.sampling;
  f.Number("temperature", 0, 1e6, &s.temperature);
  f.Number("top_p", 0, 1, &s.top_p);
  f.Number("min_p", 0, 1, &s.min_p);
  f.Int("top_k", 0, std::numeric_limits<int32_t>::max(), &s.top_k);
  f.Number("repeat_penalty", 1e-6, 1e6, &s.repeat_penalty);
  f.Int("repeat_last_n", -1, std::numeric_limits<int32_t>::max(), &s.repeat_last_n);
  f.Number("presence_penalty", -1e6, 1e6, &s.presence_penalty);
  f.Number("frequency_penalty", -1e6, 1e6, &s.frequency_penalty);
  if (const json* seed = f.Find("seed"))
    if (auto why = ReadSeed(*seed, &s.seed)) f.Fail("seed", std::move(*why));
  f.Bool("stream", &out->stream);
  f.Bool("ignore_eos", &o.ignore_eos);
  f.Bool("cache_prompt", &o.cache_prompt);
  if (const json* so = f.Find("stream_options")) {
    auto usage = so->is_object() ? so->find("include_usage") : so->end();
    if (!so->is_object() || (usage != so->end() && !usage->is_boolean() && !usage->is_null()))
      f.Fail("stream_options", "must be an object {\"include_usage\": bool}");
    else if (usage != so->end() && usage->is_boolean())
      out->include_usage = usage->get<bool>();
  }
  if (f.error()) return f.error();
  if (auto e = ParseKv(j, &o.kv)) return e;
  if (auto e = ParseConstraint(j, ordered, &s)) return e;
  if (Status st = ValidateSamplingParams(s); !st.ok()) return Bad("", st.message());
  return std::nullopt;
}

std::string_view OpenAiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
    case FinishReason::kContext:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:  // reported as an error, never as a finish
      return "error";
  }
  return "stop";
}

json Usage(const TokenUsage& u) {
  return {{"prompt_tokens", u.prompt},
          {"completion_tokens", u.completion},
          {"total_tokens", u.prompt + u.completion},
          {"prompt_tokens_details", {{"cached_tokens", u.cached}}}};
}

namespace {

json Envelope(const ResponseMeta& meta, std::string_view object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

json FullResponse(const ResponseMeta& meta, const std::vector<Choice>& choices,
                  const TokenUsage& usage) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  json r = Envelope(meta, chat ? "chat.completion" : "text_completion");
  r["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    json choice = {
        {"index", i}, {"logprobs", c.logprobs}, {"finish_reason", OpenAiFinishReason(c.finish)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    r["choices"].push_back(std::move(choice));
  }
  r["usage"] = Usage(usage);
  return r;
}

json FullResponse(const ResponseMeta& meta, const std::string& text, FinishReason finish,
                  const TokenUsage& usage) {
  return FullResponse(meta, {Choice{text, finish, nullptr}}, usage);
}

json StreamChunk(const ResponseMeta& meta, std::string_view text, bool role,
                 std::optional<FinishReason> finish, int index, json logprobs) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  json r = Envelope(meta, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", index},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", finish ? json(OpenAiFinishReason(*finish)) : json(nullptr)}};
  if (chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (role || !finish) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  r["choices"] = json::array({std::move(choice)});
  return r;
}

json UsageChunk(const ResponseMeta& meta, const TokenUsage& usage) {
  json r = Envelope(meta,
                    meta.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array();
  r["usage"] = Usage(usage);
  return r;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace rotor::serve
