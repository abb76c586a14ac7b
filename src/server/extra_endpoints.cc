// llama-server's utility endpoints, beside the OpenAI ones of server.cc:
//   POST /tokenize    {"content", "add_special" (false), "parse_special" (true),
//                      "with_pieces" (false)} -> {"tokens": [id] | [{"id", "piece"}]}
//                     (a piece that is not valid UTF-8 is an array of its bytes)
//   POST /detokenize  {"tokens": [id]} -> {"content"}
//   GET  /props       the server's settings (README: "Serve over HTTP")
//   GET  /v1/models/{id}  the model object of /v1/models, or 404 model_not_found
//   POST /v1/embeddings, /embeddings  (embeddings.cc; with --embeddings)
// Bodies with unknown fields are refused, naming them.
#include <fmt/format.h>

#include <iterator>

#include "server/fields.h"
#include "server/http_parse.h"
#include "server/server.h"
#include "server/tool_calls.h"
#include "tokenizer/utf8.h"

#ifndef ROTOR_BUILD_INFO
#define ROTOR_BUILD_INFO "rotor"
#endif

namespace rotor::serve {
namespace {

using nlohmann::json;


bool ValidUtf8(std::string_view s) {
  while (!s.empty()) {
    const Utf8Scan scan = ScanUtf8(s);
    if (scan.kind != Utf8Scan::kComplete) return false;
    s.remove_prefix(scan.length);
  }
  return true;
}

// A boolean field (absent or null: `def`).
std::optional<ApiError> GetBool(const json& j, const char* name, bool def, bool* out) {
  *out = def;
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    return BadRequest(fmt::format("'{}' must be a boolean, not {}", name, Dump(*it)), name);
  *out = it->get<bool>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseJsonObject(std::string_view body,
                                        std::initializer_list<std::string_view> fields,
                                        nlohmann::json* out) {
  std::string why;
  *out = ParseJson(body, &why);
  if (out->is_discarded()) return BadRequest("the request body is not valid JSON: " + why);
  if (!out->is_object()) return BadRequest("the request body must be a JSON object");
  if (auto unknown = FindUnknownField(*out, fields))
    return BadRequest(unknown->message, unknown->name);
  return std::nullopt;
}

std::optional<ApiError> ParseTokenIds(const nlohmann::json& j, const char* param, int32_t n_vocab,
                                      std::vector<int32_t>* out) {
  if (!j.is_array())
    return BadRequest(fmt::format("'{}' must be an array of token ids, not {}", param, Dump(j)),
                      param);
  out->clear();
  for (const json& t : j) {
    if (!t.is_number_integer())
      return BadRequest(
          fmt::format("'{}' holds {}, which is not a token id (an integer)", param, Dump(t)),
          param);
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= n_vocab)
      return BadRequest(
          fmt::format("'{}': token id {} is out of the vocabulary [0, {})", param, id, n_vocab),
          param);
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

bool Server::DispatchExtra(const std::shared_ptr<HttpExchange>& ex) {
  const HttpRequest& req = ex->request();
  const std::string& path = req.path;
  const bool models = path.starts_with("/v1/models/");
  const bool get = models || path == "/props";
  if (!get && path != "/tokenize" && path != "/detokenize" && path != "/v1/embeddings" &&
      path != "/embeddings" && path != "/apply-template")
    return false;
  if (req.method != (get ? "GET" : "POST")) {
    Respond(*ex, ErrorForStatus(405, req.method, path), {{"Allow", get ? "GET, HEAD" : "POST"}});
    return true;
  }
  if (auto e = Unavailable()) {
    Respond(*ex, *e);
    return true;
  }
  if (get) {
    // Quick: answered on the loop thread.
    if (models) {
      const std::string id = PercentDecode(path.substr(std::string_view("/v1/models/").size()));
      if (id != model_id_) {
        Respond(*ex, ApiError{404,
                              fmt::format("the model '{}' does not exist; this server serves '{}'",
                                          id, model_id_),
                              "invalid_request_error", "model", "model_not_found"});
        return true;
      }
      ex->Respond(HttpResponse{200, kJson, Dump(ModelObject()), {}});
    } else {
      ex->Respond(HttpResponse{200, kJson, Dump(Props()), {}});
    }
    metrics_.CountRequest(path, 200);
    return true;
  }
  if (!workers_->Run([this, ex] {
        try {
          const std::string& p = ex->request().path;
          if (p == "/tokenize")
            HandleTokenize(*ex);
          else if (p == "/detokenize")
            HandleDetokenize(*ex);
          else if (p == "/apply-template")
            HandleApplyTemplate(*ex);
          else
            HandleEmbeddings(*ex);
        } catch (const std::bad_alloc&) {
          OutOfMemory(*ex);
        }
      }))
    Respond(*ex, ApiError{503,
                          "no thread to handle the request (out of memory or threads); "
                          "retry later",
                          "server_error", "", "out_of_memory"});
  return true;
}

nlohmann::json Server::ModelObject() const {
  return {{"id", model_id_},
          {"object", "model"},
          {"created", started_},
          {"owned_by", "rotor"},
          {"meta",
           {{"n_ctx", engine_->n_ctx()},
            {"n_vocab", engine_->model().config().n_vocab},
            {"chat_template", chat_template_.name()},
            {"parallel", options_.parallel}}}};
}

nlohmann::json Server::Props() const {
  const GenerateOptions& d = options_.defaults;
  const SamplingParams& s = d.sampling;
  json params = {{"n_predict", d.n_predict},
                 {"temperature", s.temperature},
                 {"top_k", s.top_k},
                 {"top_p", s.top_p},
                 {"min_p", s.min_p},
                 {"seed", s.seed},
                 {"repeat_penalty", s.repeat_penalty},
                 {"repeat_last_n", s.repeat_last_n},
                 {"presence_penalty", s.presence_penalty},
                 {"frequency_penalty", s.frequency_penalty},
                 {"ignore_eos", d.ignore_eos},
                 {"stop", d.stop},
                 {"add_bos", d.add_bos}};
  // rotor's KV cache: the options of the default policy, as request fields.
  for (const KvOptionSpec& spec : KvOptions())
    if (spec.id == KvOpt::kPolicy || KvPolicyUses(d.kv.policy, spec.id))
      params[std::string(spec.field)] = d.kv.Get(spec.id);
  Result<std::string> jinja = engine_->model().file().GetStringOr("tokenizer.chat_template", "");
  std::string chat_template = jinja.ok() ? *jinja : "";
  if (!options_.chat_template.empty() || chat_template.empty())
    chat_template = std::string(chat_template_.name());
  json props = {{"default_generation_settings", {{"n_ctx", engine_->n_ctx()}, {"params", params}}},
                {"total_slots", options_.parallel},
                {"model_path", options_.engine.model_path},
                {"chat_template", chat_template},
                {"chat_template_name", chat_template_.name()},
                {"build_info", ROTOR_BUILD_INFO},
                {"modalities", {{"vision", false}}},
                {"embeddings", options_.embeddings}};
  if (options_.embeddings) props["pooling"] = PoolingName(pooling_);
  return props;
}

void Server::HandleTokenize(HttpExchange& ex) {
  json j;
  if (auto e = ParseJsonObject(ex.request().body,
                               {"content", "add_special", "parse_special", "with_pieces"}, &j))
    return Respond(ex, *e);
  auto content = j.find("content");
  if (content == j.end()) return Respond(ex, BadRequest("'content' is missing", "content"));
  if (!content->is_string())
    return Respond(ex, BadRequest(fmt::format("'content' must be a string, not {}", Dump(*content)),
                                  "content"));
  bool add_special, parse_special, with_pieces;
  if (auto e = GetBool(j, "add_special", false, &add_special)) return Respond(ex, *e);
  if (auto e = GetBool(j, "parse_special", true, &parse_special)) return Respond(ex, *e);
  if (auto e = GetBool(j, "with_pieces", false, &with_pieces)) return Respond(ex, *e);
  const Tokenizer& tok = engine_->tokenizer();
  const std::vector<int32_t> ids =
      tok.Encode(content->get_ref<const std::string&>(), add_special, parse_special);
  // Written as text, token by token, as Dump would write the document: a
  // document of one object per token took 260 bytes of memory per byte of
  // content (a 3.9 MB body, 1 GB).
  std::string out = R"({"tokens":[)";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    if (!with_pieces) {
      fmt::format_to(std::back_inserter(out), "{}", ids[i]);
      continue;
    }
    const std::string piece = tok.TokenToPiece(ids[i], /*special=*/true);
    fmt::format_to(std::back_inserter(out), R"({{"id":{},"piece":)", ids[i]);
    if (ValidUtf8(piece)) {
      out += Dump(json(piece));
    } else {
      out += '[';
      for (size_t b = 0; b < piece.size(); ++b)
        fmt::format_to(std::back_inserter(out), "{}{}", b ? "," : "",
                       static_cast<unsigned char>(piece[b]));
      out += ']';
    }
    out += '}';
  }
  out += "]}";
  ex.Respond(HttpResponse{200, kJson, std::move(out), {}});
  metrics_.CountRequest(ex.request().path, 200);
}

void Server::HandleDetokenize(HttpExchange& ex) {
  json j;
  if (auto e = ParseJsonObject(ex.request().body, {"tokens"}, &j)) return Respond(ex, *e);
  auto tokens = j.find("tokens");
  if (tokens == j.end()) return Respond(ex, BadRequest("'tokens' is missing", "tokens"));
  const Tokenizer& tok = engine_->tokenizer();
  std::vector<int32_t> ids;
  if (auto e = ParseTokenIds(*tokens, "tokens", tok.n_vocab(), &ids)) return Respond(ex, *e);
  ex.Respond(HttpResponse{200, kJson, Dump({{"content", tok.Decode(ids, /*special=*/true)}}), {}});
  metrics_.CountRequest(ex.request().path, 200);
}

// llama-server's /apply-template: a chat request's body -> {"prompt": the
// text the model is given for it} (BOS as its text first when the tokenizer
// adds one), tools rendered as the chat request would render them.
void Server::HandleApplyTemplate(HttpExchange& ex) {
  ApiRequest api;
  if (auto e = ParseRequest(ex.request().body, Endpoint::kChat, options_.defaults, &api))
    return Respond(ex, *e);
  GenerateOptions options = api.options;  // PrepareTools' checks; the grammar is not used
  const Tokenizer& tok = engine_->tokenizer();
  if (auto e = PrepareTools(api, chat_template_, tok, options_.defaults, &options))
    return Respond(ex, *e);
  std::string prompt;
  if (api.options.add_bos && tok.add_bos() && tok.bos() >= 0)
    prompt = tok.Decode(std::vector<int32_t>{tok.bos()}, /*special=*/true);
  prompt += chat_template_.Apply(api.messages, /*add_generation_prompt=*/true,
                                 api.tools.offered() ? api.tools.tools : std::vector<ChatTool>{});
  ex.Respond(HttpResponse{200, kJson, Dump({{"prompt", prompt}}), {}});
  metrics_.CountRequest(ex.request().path, 200);
}

}  // namespace rotor::serve
