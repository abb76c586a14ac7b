// POST /v1/embeddings (and /embeddings), with `rotor serve --embeddings`:
//   {"input": string | [string] | [id] | [[id]], "model", "encoding_format":
//    "float" | "base64", "dimensions" (n_embd only), "user"}
//   -> {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
//       "model", "usage": {"prompt_tokens", "total_tokens"}}
// Texts are tokenized as llama-server does (BOS as the vocabulary says unless
// --no-bos, control-token texts parsed). Each input is one Embed (engine/embed.h:
// pooled hidden states after the output norm, unit L2 norm) on the engine
// thread, between two scheduler steps; base64 is the float32 vector's
// little-endian bytes, as OpenAI sends it.
#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "server/server.h"

namespace rotor::serve {
namespace {

using nlohmann::json;


std::string Base64(const void* data, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += kAlphabet[(b >> 18) & 63];
    out += kAlphabet[(b >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(b >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[b & 63] : '=';
  }
  return out;
}

}  // namespace

void Server::HandleEmbeddings(HttpExchange& ex) {
  if (!options_.embeddings)
    return Respond(ex, ApiError{501,
                                "this server does not compute embeddings: start it with "
                                "--embeddings",
                                "not_supported_error", "", "not_supported"});
  json j;
  if (auto e = ParseJsonObject(ex.request().body,
                               {"input", "model", "encoding_format", "dimensions", "user"}, &j))
    return Respond(ex, *e);
  const Tokenizer& tok = engine_->tokenizer();
  const int64_t n_embd = engine_->model().config().n_embd;
  if (auto it = j.find("model"); it != j.end() && !it->is_null() && !it->is_string())
    return Respond(ex, BadRequest("'model' must be a string", "model"));
  if (auto it = j.find("user"); it != j.end() && !it->is_null() && !it->is_string())
    return Respond(ex, BadRequest("'user' must be a string", "user"));
  bool base64 = false;
  if (auto it = j.find("encoding_format"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "float" && *it != "base64"))
      return Respond(ex, BadRequest(fmt::format("'encoding_format' must be \"float\" or "
                                                "\"base64\", not {}",
                                                Dump(*it)),
                                    "encoding_format"));
    base64 = *it == "base64";
  }
  if (auto it = j.find("dimensions"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != n_embd)
      return Respond(ex, BadRequest(fmt::format("'dimensions' {} is not supported: this model's "
                                                "embeddings have {} dimensions",
                                                Dump(*it), n_embd),
                                    "dimensions"));
  }

  // The inputs' tokens.
  auto input = j.find("input");
  if (input == j.end() || input->is_null())
    return Respond(ex, BadRequest("'input' is missing", "input"));
  std::vector<std::vector<int32_t>> inputs;
  auto add_text = [&](const std::string& text) {
    inputs.push_back(tok.Encode(text, options_.defaults.add_bos, /*parse_special=*/true));
  };
  const char* kShape =
      "'input' must be a string, an array of strings, an array of token ids or "
      "an array of arrays of token ids";
  if (input->is_string()) {
    add_text(input->get_ref<const std::string&>());
  } else if (!input->is_array() || input->empty()) {
    return Respond(ex, BadRequest(fmt::format("{}, not {}", kShape,
                                              input->is_array() ? "an empty array" : Dump(*input)),
                                  "input"));
  } else if ((*input)[0].is_number()) {
    inputs.emplace_back();
    if (auto e = ParseTokenIds(*input, "input", tok.n_vocab(), &inputs.back()))
      return Respond(ex, *e);
  } else {
    // OpenAI's limit: each input costs a forward pass, so a 4 MiB body of
    // short strings asked for minutes of compute.
    if (input->size() > kMaxEmbeddingInputs)
      return Respond(ex, BadRequest(fmt::format("'input' holds {} inputs, more than the {} one "
                                                "request may embed",
                                                input->size(), kMaxEmbeddingInputs),
                                    "input"));
    for (size_t i = 0; i < input->size(); ++i) {
      const json& x = (*input)[i];
      if (x.is_string() && (*input)[0].is_string()) {
        add_text(x.get_ref<const std::string&>());
      } else if (x.is_array() && (*input)[0].is_array()) {
        inputs.emplace_back();
        const std::string param = fmt::format("input[{}]", i);
        if (auto e = ParseTokenIds(x, param.c_str(), tok.n_vocab(), &inputs.back()))
          return Respond(ex, *e);
      } else {
        return Respond(ex,
                       BadRequest(fmt::format("{}; input[{}] is {}", kShape, i, Dump(x)), "input"));
      }
    }
  }
  int64_t n_tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t n = std::ssize(inputs[i]);
    const std::string where = inputs.size() > 1 ? fmt::format("input[{}]", i) : "input";
    if (n == 0) return Respond(ex, BadRequest(fmt::format("{} has no tokens", where), "input"));
    if (n > engine_->n_ctx())
      return Respond(ex, ApiError{400,
                                  fmt::format("{} has {} tokens, more than the context size {}",
                                              where, n, engine_->n_ctx()),
                                  "invalid_request_error", "input", "context_length_exceeded"});
    n_tokens += n;
  }

  // One input per visit to the engine thread: generation steps run between.
  EmbedOptions eo{.pooling = pooling_,
                  .normalize = true,
                  .step = options_.prefill_step,
                  .kv_types = options_.defaults.kv.types};
  json data = json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (ex.gone()) return;
    Result<std::vector<float>> v = Status::Error("not run");
    if (!batcher_->RunOnEngineThread([&] { v = Embed(*engine_, inputs[i], eo); }))
      return Respond(ex, ApiError{503, "the server is shutting down", "server_error", "", ""});
    if (!v.ok()) return Respond(ex, ApiError{500, v.message(), "server_error", "", ""});
    static_assert(std::endian::native == std::endian::little);
    json embedding = base64 ? json(Base64(v->data(), v->size() * sizeof(float))) : json(*v);
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  const json body = {{"object", "list"},
                     {"data", std::move(data)},
                     {"model", model_id_},
                     {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
  ex.Respond(HttpResponse{200, kJson, Dump(body), {}});
  metrics_.CountRequest(ex.request().path, 200);
}

}  // namespace rotor::serve
