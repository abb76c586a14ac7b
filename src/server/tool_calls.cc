#include "server/tool_calls.h"

#include "server/fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "base/json_depth.h"
#include "grammar/grammar.h"

namespace rotor::serve {
namespace {

using nlohmann::json;

ApiError Bad(std::string param, std::string message) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

const json* Member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// OpenAI's rule for function names: letters, digits, '_' and '-', 1 to 64.
bool ValidName(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
         });
}

std::optional<ApiError> ParseTool(const json& t, size_t i, const nlohmann::ordered_json& ordered,
                                  ChatTool* out) {
  const std::string where = fmt::format("tools[{}]", i);
  if (!t.is_object()) return Bad(where, fmt::format("'{}' must be an object", where));
  const json* type = Member(t, "type");
  if (!type || *type != "function")
    return Bad(where + ".type", fmt::format("'{}.type' must be \"function\"", where));
  const json* f = Member(t, "function");
  if (!f || !f->is_object())
    return Bad(where + ".function",
               fmt::format("'{}.function' must be an object {{name, description, parameters}}",
                           where));
  const json* name = Member(*f, "name");
  if (!name || !name->is_string() || !ValidName(name->get<std::string>()))
    return Bad(where + ".function.name",
               fmt::format("'{}.function.name' must be a string of 1 to 64 letters, digits, '_' "
                           "or '-'",
                           where));
  out->name = name->get<std::string>();
  if (const json* d = Member(*f, "description")) {
    if (!d->is_string())
      return Bad(where + ".function.description",
                 fmt::format("'{}.function.description' must be a string", where));
    out->description = d->get<std::string>();
  }
  if (const json* p = Member(*f, "parameters")) {
    const std::string field = where + ".function.parameters";
    if (!p->is_object())
      return Bad(field, fmt::format("'{}' must be a JSON Schema object", field));
    // As the client wrote it: the grammar and the template list the
    // properties in their order.
    const nlohmann::ordered_json* in_order =
        OrderedAt(ordered, {"tools", std::to_string(i), "function", "parameters"});
    out->parameters = in_order ? in_order->dump() : p->dump();
    Result<std::string> g = grammar::JsonSchemaToGrammar(out->parameters);
    if (!g.ok()) return Bad(field, fmt::format("'{}': {}", field, g.message()));
  }
  return std::nullopt;
}

// Moves a tool's $defs (and definitions) into the combined schema's $defs
// under "t<i>-NAME" and points its $refs there.
void RewriteRefs(nlohmann::ordered_json* j, const std::string& prefix) {
  if (j->is_array()) {
    for (nlohmann::ordered_json& v : *j) RewriteRefs(&v, prefix);
    return;
  }
  if (!j->is_object()) return;
  for (auto& [key, v] : j->items()) {
    if (key == "$ref" && v.is_string()) {
      const std::string ref = v.get<std::string>();
      for (const std::string_view from : {"#/$defs/", "#/definitions/"})
        if (ref.starts_with(from)) v = "#/$defs/" + prefix + ref.substr(from.size());
    } else {
      RewriteRefs(&v, prefix);
    }
  }
}

std::string RandomCallId() {
  static constexpr char kChars[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

// {"name": N, "arguments" | "parameters": {...}} naming an offered tool
// (other keys, as Mistral's "id", are ignored). The arguments keep the model's
// key order (ordered_json).
std::optional<ToolCall> CallFromJson(const nlohmann::ordered_json& j,
                                     const std::vector<ChatTool>& tools) {
  using Json = nlohmann::ordered_json;
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const std::string n = j["name"].get<std::string>();
  if (std::none_of(tools.begin(), tools.end(), [&](const ChatTool& t) { return t.name == n; }))
    return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  Json value = j.contains(key) && !j[key].is_null() ? j[key] : Json::object();
  if (value.is_string()) value = ParseBoundedJson<Json>(value.get<std::string>());
  if (!value.is_object()) return std::nullopt;
  return ToolCall{RandomCallId(), n, value.dump()};
}

std::optional<ToolCall> ParseCall(std::string_view text, const std::vector<ChatTool>& tools) {
  using Json = nlohmann::ordered_json;
  return CallFromJson(ParseBoundedJson<Json>(TrimSpace(text)), tools);
}

// Mistral's calls: a JSON array of calls (or one call), all valid or none.
std::vector<ToolCall> ParseCallList(std::string_view text, const std::vector<ChatTool>& tools) {
  using Json = nlohmann::ordered_json;
  const Json j = ParseBoundedJson<Json>(TrimSpace(text));
  if (!j.is_array()) {
    std::optional<ToolCall> c = CallFromJson(j, tools);
    return c ? std::vector<ToolCall>{std::move(*c)} : std::vector<ToolCall>{};
  }
  std::vector<ToolCall> calls;
  for (const Json& item : j) {
    std::optional<ToolCall> c = CallFromJson(item, tools);
    if (!c) return {};
    calls.push_back(std::move(*c));
  }
  return calls;
}

json CallsJson(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

}  // namespace

std::optional<ApiError> ParseTools(const json& body, const nlohmann::ordered_json& ordered,
                                   ApiTools* out) {
  if (const json* tools = Member(body, "tools")) {
    if (!tools->is_array())
      return Bad("tools", "'tools' must be an array of {type: \"function\", function} objects");
    constexpr size_t kMaxTools = 128;
    if (tools->size() > kMaxTools)
      return Bad("tools", fmt::format("'tools' holds more than {} tools", kMaxTools));
    for (size_t i = 0; i < tools->size(); ++i) {
      ChatTool t;
      if (auto e = ParseTool((*tools)[i], i, ordered, &t)) return e;
      for (const ChatTool& before : out->tools)
        if (before.name == t.name)
          return Bad(fmt::format("tools[{}].function.name", i),
                     fmt::format("'tools[{}].function.name': a tool named '{}' is listed twice", i,
                                 t.name));
      out->tools.push_back(std::move(t));
    }
  }
  if (const json* p = Member(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) return Bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    out->parallel = p->get<bool>();
  }
  const json* choice = Member(body, "tool_choice");
  if (!choice) return std::nullopt;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") {
      out->choice = ToolChoice::kNone;
    } else if (c == "auto") {
      out->choice = ToolChoice::kAuto;
    } else if (c == "required") {
      out->choice = ToolChoice::kRequired;
    } else {
      return Bad("tool_choice", fmt::format("unknown tool_choice '{}' (none, auto, required or "
                                            "{{\"type\": \"function\", \"function\": {{\"name\": "
                                            "...}}}})",
                                            c));
    }
  } else {
    const json* f = Member(*choice, "function");
    const json* name = f ? Member(*f, "name") : nullptr;
    if (!choice->is_object() || Member(*choice, "type") == nullptr ||
        *Member(*choice, "type") != "function" || !name || !name->is_string())
      return Bad("tool_choice",
                 "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                 "\"function\", \"function\": {\"name\": ...}}");
    out->choice = ToolChoice::kFunction;
    out->function = name->get<std::string>();
    if (std::none_of(out->tools.begin(), out->tools.end(),
                     [&](const ChatTool& t) { return t.name == out->function; }))
      return Bad("tool_choice.function.name",
                 fmt::format("'tool_choice.function.name': no tool named '{}' in 'tools'",
                             out->function));
  }
  if (out->choice == ToolChoice::kRequired && out->tools.empty())
    return Bad("tool_choice", "'tool_choice' \"required\" needs 'tools'");
  return std::nullopt;
}

std::optional<ApiError> ParseMessageTools(const json& m, const std::string& where,
                                          ChatMessage* out) {
  const json* calls = Member(m, "tool_calls");
  if (calls && out->role != "assistant")
    return Bad(where + ".tool_calls",
               fmt::format("'{}.tool_calls' is for assistant messages only", where));
  if (calls) {
    if (!calls->is_array())
      return Bad(where + ".tool_calls", fmt::format("'{}.tool_calls' must be an array", where));
    for (size_t i = 0; i < calls->size(); ++i) {
      const json& c = (*calls)[i];
      const std::string at = fmt::format("{}.tool_calls[{}]", where, i);
      const json* f = Member(c, "function");
      const json* name = f ? Member(*f, "name") : nullptr;
      const json* args = f ? Member(*f, "arguments") : nullptr;
      const json* id = Member(c, "id");
      if (!f || !f->is_object() || !name || !name->is_string())
        return Bad(at + ".function.name", fmt::format("'{}.function.name' must be a string", at));
      if (args && !args->is_string() && !args->is_object())
        return Bad(at + ".function.arguments",
                   fmt::format("'{}.function.arguments' must be a string (JSON)", at));
      if (id && !id->is_string())
        return Bad(at + ".id", fmt::format("'{}.id' must be a string", at));
      ChatToolCall call;
      call.id = id ? id->get<std::string>() : "";
      call.name = name->get<std::string>();
      call.arguments = !args ? "{}" : args->is_string() ? args->get<std::string>() : args->dump();
      out->tool_calls.push_back(std::move(call));
    }
  }
  if (out->role == "tool") {
    const json* id = Member(m, "tool_call_id");
    if (!id || !id->is_string())
      return Bad(where + ".tool_call_id",
                 fmt::format("'{}.tool_call_id' must be the string id of the call answered",
                             where));
    out->tool_call_id = id->get<std::string>();
  }
  return std::nullopt;
}

Result<std::string> ToolCallGrammar(ChatFormat format, const std::vector<ChatTool>& tools,
                                    bool parallel) {
  const char* args_key = format == ChatFormat::kLlama3 ? "parameters" : "arguments";
  // Ordered: the schema grammar keeps the order of properties, and a call
  // names its tool before its arguments, as the templates write calls.
  using Json = nlohmann::ordered_json;
  Json schema = {{"anyOf", Json::array()}};
  for (size_t i = 0; i < tools.size(); ++i) {
    Json params = tools[i].parameters.empty()
                      ? Json{{"type", "object"}, {"additionalProperties", false}}
                      : ParseBoundedJson<Json>(tools[i].parameters);
    if (params.is_discarded() || !params.is_object())
      return Errorf("tools: the parameters of '{}' are not a JSON object", tools[i].name);
    const std::string prefix = fmt::format("t{}-", i);
    for (const char* key : {"$defs", "definitions"}) {
      if (!params.contains(key)) continue;
      Json defs = params[key];
      params.erase(key);
      if (!defs.is_object()) continue;
      for (auto& [name, def] : defs.items()) {
        RewriteRefs(&def, prefix);
        schema["$defs"][prefix + name] = def;
      }
    }
    RewriteRefs(&params, prefix);
    schema["anyOf"].push_back({{"type", "object"},
                               {"properties", {{"name", {{"const", tools[i].name}}},
                                               {args_key, std::move(params)}}},
                               {"required", {"name", args_key}}});
  }
  ASSIGN_OR_RETURN(std::string text, grammar::JsonSchemaToGrammar(schema.dump()));
  // The schema's root becomes one rule of the call syntax.
  constexpr std::string_view kRoot = "root ::= ";
  if (!text.starts_with(kRoot)) return Status::Error("tools: unexpected schema grammar");
  text = "call-json ::= " + text.substr(kRoot.size());
  if (format == ChatFormat::kLlama3) return "root ::= call-json\n" + text;
  if (IsMistral(format)) {
    const std::string more =
        parallel ? fmt::format(R"( ( ", " call-json ){{0,{}}})", kMaxParallelCalls - 1) : "";
    // Nemo's format writes no space after its markers.
    const char* open = format == ChatFormat::kMistralTekken ? "[TOOL_CALLS][" : "[TOOL_CALLS] [";
    return fmt::format(R"(root ::= "{}" call-json)", open) + more + R"( "]")" + "\n" + text;
  }
  const std::string more =
      parallel ? fmt::format(R"( ( "\n" call ){{0,{}}})", kMaxParallelCalls - 1) : "";
  return "root ::= call" + more + "\n" + R"(call ::= "<tool_call>\n" call-json "\n</tool_call>")" +
         "\n" + text;
}

std::optional<ApiError> PrepareTools(const ApiRequest& api, const ChatTemplate& chat_template,
                                     const Tokenizer& tokenizer, const GenerateOptions& defaults,
                                     GenerateOptions* options) {
  const ApiTools& t = api.tools;
  if (!chat_template.SupportsTools()) {
    for (size_t i = 0; i < api.messages.size(); ++i) {
      const ChatMessage& m = api.messages[i];
      if (m.role == "tool" || !m.tool_calls.empty())
        return Bad(fmt::format("messages[{}]", i),
                   fmt::format("'messages[{}]': the chat template '{}' has no tool-call format "
                               "(tool messages and tool_calls need chatml, llama3 or mistral)",
                               i, chat_template.name()));
    }
    if (t.offered())
      return Bad("tools", fmt::format("'tools': the chat template '{}' has no tool-call format "
                                      "(chatml, llama3 and mistral have one); send tool_choice "
                                      "\"none\" or serve with --chat-template "
                                      "chatml|llama3|mistral",
                                      chat_template.name()));
    return std::nullopt;
  }
  if (t.choice == ToolChoice::kNone || t.tools.empty()) return std::nullopt;
  const ToolCallTrigger trigger = ToolCallTriggerOf(chat_template.format());
  // A call marker the vocabulary has as a control token (Mistral v0.3's
  // [TOOL_CALLS]) is kept as text: the reply's calls are found by it, and
  // the grammar and the trigger can match the token itself.
  if (const int32_t id = tokenizer.TokenId(trigger.text);
      id >= 0 && tokenizer.Type(id) == TokenType::kControl)
    options->sampling.preserved_tokens = {id};
  const bool own_grammar = options->sampling.grammar != defaults.sampling.grammar;
  const bool lazy = t.choice == ToolChoice::kAuto;
  // "auto" with a grammar of the request's own: that grammar decides the
  // reply, and calls in it are still parsed out.
  if (lazy && own_grammar) return std::nullopt;
  if (own_grammar)
    return Bad("tool_choice", "'tool_choice' constrains the output to tool calls: it cannot be "
                              "combined with response_format, json_schema or grammar");
  std::vector<ChatTool> callable;
  for (const ChatTool& tool : t.tools)
    if (t.choice != ToolChoice::kFunction || tool.name == t.function) callable.push_back(tool);
  Result<std::string> text = ToolCallGrammar(chat_template.format(), callable, t.parallel);
  Result<std::shared_ptr<const grammar::Grammar>> g =
      text.ok() ? grammar::ParseGrammar(*text)
                : Result<std::shared_ptr<const grammar::Grammar>>(text.status());
  if (!g.ok()) return Bad("tools", "'tools': " + g.message());
  options->sampling.grammar = std::move(*g);
  if (lazy) {
    options->sampling.grammar_triggers = {trigger.text};
    options->sampling.grammar_triggers_at_start = trigger.at_start;
  }
  return std::nullopt;
}

ToolCallTrigger ToolCallTriggerOf(ChatFormat format) {
  // Llama 3.1 answers a call as the whole reply, one JSON object.
  if (format == ChatFormat::kLlama3) return {"{", true};
  if (IsMistral(format)) return {"[TOOL_CALLS]", false};
  return {"<tool_call>", false};
}

ToolReply ParseToolReply(std::string_view text, ChatFormat format,
                         const std::vector<ChatTool>& tools) {
  ToolReply r;
  if (format == ChatFormat::kLlama3) {
    const std::string_view body = TrimSpace(text);
    if (std::optional<ToolCall> c = ParseCall(body, tools)) {
      r.calls.push_back(std::move(*c));
      return r;
    }
    // One call per line, all or nothing.
    size_t start = 0;
    while (start < body.size() && body.starts_with('{')) {
      const size_t end = std::min(body.find('\n', start), body.size());
      std::optional<ToolCall> c = ParseCall(body.substr(start, end - start), tools);
      if (!c) {
        r.calls.clear();
        break;
      }
      r.calls.push_back(std::move(*c));
      start = end + 1;
    }
    if (r.calls.empty()) r.content = std::string(text);
    return r;
  }
  if (IsMistral(format)) {
    // A vocabulary with [TOOL_CALLS] as a control token (v0.3) leaves it out
    // of the reply's text: then a reply that is all a list of calls is calls.
    constexpr std::string_view kMarker = "[TOOL_CALLS]";
    const size_t at = text.find(kMarker);
    const std::string_view before = at == std::string_view::npos ? "" : text.substr(0, at);
    const std::string_view after =
        at == std::string_view::npos ? text : text.substr(at + kMarker.size());
    if (at != std::string_view::npos || TrimSpace(text).starts_with('['))
      r.calls = ParseCallList(after, tools);
    r.content = r.calls.empty() ? std::string(text) : std::string(TrimSpace(before));
    return r;
  }
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  std::string content;
  size_t pos = 0;
  for (size_t open; (open = text.find(kOpen, pos)) != std::string_view::npos;) {
    const size_t inner = open + kOpen.size();
    const size_t close = text.find(kClose, inner);
    const size_t inner_end = close == std::string_view::npos ? text.size() : close;
    if (std::optional<ToolCall> c = ParseCall(text.substr(inner, inner_end - inner), tools)) {
      content += text.substr(pos, open - pos);
      r.calls.push_back(std::move(*c));
      pos = close == std::string_view::npos ? text.size() : close + kClose.size();
    } else {
      content += text.substr(pos, inner - pos);
      pos = inner;
    }
  }
  content += text.substr(pos);
  r.content = r.calls.empty() ? std::string(text) : std::string(TrimSpace(content));
  return r;
}

json FullToolResponse(const ResponseMeta& meta, const ToolReply& reply, FinishReason finish,
                      const TokenUsage& usage) {
  json r = FullResponse(meta, reply.content, finish, usage);
  json& choice = r["choices"][0];
  if (!reply.calls.empty()) {
    if (reply.content.empty()) choice["message"]["content"] = nullptr;
    choice["message"]["tool_calls"] = CallsJson(reply.calls);
    choice["finish_reason"] = "tool_calls";
  }
  return r;
}

std::vector<json> ToolStreamChunks(const ResponseMeta& meta, const ToolReply& reply,
                                   FinishReason finish) {
  std::vector<json> out;
  if (!reply.content.empty()) out.push_back(StreamChunk(meta, reply.content, false, std::nullopt));
  const json calls = CallsJson(reply.calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = calls[i];
    call["index"] = i;
    json chunk = StreamChunk(meta, "", false, std::nullopt);
    chunk["choices"][0]["delta"] = {{"tool_calls", json::array({std::move(call)})}};
    out.push_back(std::move(chunk));
  }
  json last = StreamChunk(meta, "", false, finish);
  if (!reply.calls.empty()) last["choices"][0]["finish_reason"] = "tool_calls";
  out.push_back(std::move(last));
  return out;
}

}  // namespace rotor::serve
