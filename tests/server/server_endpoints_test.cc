// llama-server's utility endpoints and embeddings: /tokenize, /detokenize,
// /props, /v1/models/{id}, /v1/embeddings (extra_endpoints.cc, embeddings.cc),
// checked against the tokenizer and engine/embed.h directly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "engine/embed.h"
#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

json Get(const TestServer& server, const std::string& path, int* status) {
  auto res = server.Client()->Get(path);
  if (!res) {
    ADD_FAILURE() << "GET " << path << " failed";
    return json();
  }
  *status = res->status;
  return json::parse(res->body, nullptr, false);
}

// A 400 whose message holds `needle`.
void ExpectBad(const TestServer& server, const std::string& path, const json& body,
               const std::string& needle, int want = 400) {
  int status = 0;
  const json r = PostJson(server, path, body, &status);
  EXPECT_EQ(status, want) << path << " " << body.dump() << " -> " << r.dump();
  EXPECT_THAT(r["error"]["message"].get<std::string>(), HasSubstr(needle)) << body.dump();
}

std::vector<float> FromBase64(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : s) {
    const int v = value(c);
    if (v < 0) break;  // '='
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

class EndpointsTest : public ::testing::Test {
 protected:
  static ServeOptions Options() {
    ServeOptions o = TestOptions(2, 8);
    o.engine.n_ctx = 64;
    o.embeddings = true;
    return o;
  }
  void SetUp() override { ASSERT_TRUE(server_.ok()) << server_.error(); }
  const Tokenizer& tok() { return server_.server().engine().tokenizer(); }
  TestServer server_{Options()};
};

TEST_F(EndpointsTest, TokenizeMatchesTheTokenizer) {
  const std::string text = "Once upon a time <s> there was";
  int status = 0;
  json r = PostJson(server_, "/tokenize", {{"content", text}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["tokens"].get<std::vector<int32_t>>(), tok().Encode(text, false, true));
  r = PostJson(server_, "/tokenize",
               {{"content", text}, {"add_special", true}, {"parse_special", false}}, &status);
  ASSERT_EQ(status, 200);
  const std::vector<int32_t> with_bos = tok().Encode(text, true, false);
  EXPECT_EQ(r["tokens"].get<std::vector<int32_t>>(), with_bos);
  EXPECT_EQ(with_bos.front(), tok().bos());
}

TEST_F(EndpointsTest, TokenizeWithPiecesGivesBytesForPartialCharacters) {
  const std::string text =
      "a caf\xc3\xa9 \xe2\x98\x83";  // "a café ☃": byte tokens in this vocabulary
  int status = 0;
  const json r =
      PostJson(server_, "/tokenize", {{"content", text}, {"with_pieces", true}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  const std::vector<int32_t> ids = tok().Encode(text, false, true);
  ASSERT_EQ(r["tokens"].size(), ids.size());
  int byte_pieces = 0;
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& t = r["tokens"][i];
    EXPECT_EQ(t["id"], ids[i]);
    std::string piece;
    if (t["piece"].is_array()) {
      ++byte_pieces;
      for (const json& b : t["piece"]) piece += static_cast<char>(b.get<int>());
    } else {
      piece = t["piece"].get<std::string>();
    }
    EXPECT_EQ(piece, tok().TokenToPiece(ids[i], true)) << i;
    joined += piece;
  }
  EXPECT_GT(byte_pieces, 0) << r.dump();
  EXPECT_EQ(joined, " " + text);  // SentencePiece's space prefix
}

TEST_F(EndpointsTest, DetokenizeMatchesTheTokenizer) {
  const std::vector<int32_t> ids = tok().Encode("The dog ran to the park.", true);
  int status = 0;
  const json r = PostJson(server_, "/detokenize", {{"tokens", ids}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["content"], tok().Decode(ids, true));
  EXPECT_THAT(r["content"].get<std::string>(), HasSubstr("The dog ran to the park."));
  EXPECT_EQ(PostJson(server_, "/detokenize", {{"tokens", json::array()}}, &status)["content"], "");
}

// llama-server's /apply-template: the text a chat request's messages become
// (the bundled model has no template: plain), the same tokens the chat
// request is given, and a chat request's errors for a bad body.
TEST_F(EndpointsTest, ApplyTemplateGivesTheChatPrompt) {
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Hi"}}};
  int status = 0;
  const json r = PostJson(server_, "/apply-template", {{"messages", messages}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["prompt"], "<s>System: Be brief.\nUser: Hi\nAssistant:") << r.dump();
  const json chat = PostJson(server_, "/v1/chat/completions",
                             {{"messages", messages}, {"max_tokens", 1}}, &status);
  ASSERT_EQ(status, 200) << chat.dump();
  const json t = PostJson(server_, "/tokenize",
                          {{"content", r["prompt"]}, {"parse_special", true}}, &status);
  EXPECT_EQ(chat["usage"]["prompt_tokens"], t["tokens"].size()) << t.dump();
  ExpectBad(server_, "/apply-template", json::object(), "messages");
  ExpectBad(server_, "/apply-template", {{"messages", "x"}}, "messages");
  auto get = server_.Client()->Get("/apply-template");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
}

TEST_F(EndpointsTest, TokenizeAndDetokenizeRefuseBadBodies) {
  ExpectBad(server_, "/tokenize", "not json", "must be a JSON object");  // a JSON string
  auto raw = server_.Client()->Post("/tokenize", "{nope", "application/json");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->status, 400);
  EXPECT_THAT(raw->body, HasSubstr("not valid JSON"));
  ExpectBad(server_, "/tokenize", json::object(), "'content' is missing");
  ExpectBad(server_, "/tokenize", {{"content", 5}}, "'content' must be a string, not 5");
  ExpectBad(server_, "/tokenize", {{"content", "x"}, {"add_special", "yes"}},
            "'add_special' must be a boolean, not \"yes\"");
  ExpectBad(server_, "/detokenize", json::object(), "'tokens' is missing");
  ExpectBad(server_, "/detokenize", {{"tokens", "abc"}}, "'tokens' must be an array");
  ExpectBad(server_, "/detokenize", {{"tokens", {1, 100000}}},
            "token id 100000 is out of the vocabulary [0, 512)");
  ExpectBad(server_, "/detokenize", {{"tokens", json::array({-1})}},
            "token id -1 is out of the vocabulary");
  ExpectBad(server_, "/detokenize", {{"tokens", {1, "x"}}}, "holds \"x\", which is not a token id");
  ExpectBad(server_, "/detokenize", {{"tokens", json::array({1.5})}}, "holds 1.5");
  auto get = server_.Client()->Get("/tokenize");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
}

// An unknown field is the error /v1/completions gives (fields.h): the first
// one, as param, with the nearest accepted name when one is close.
TEST_F(EndpointsTest, UnknownFieldsAreNamedAsTheApiNamesThem) {
  struct Case {
    std::string path;
    json body;
    std::string param, message;
  };
  const Case cases[] = {
      {"/v1/completions", json{{"prompt", "a"}, {"max_tokenz", 2}}, "max_tokenz",
       "unknown field 'max_tokenz' (did you mean 'max_tokens'?)"},
      {"/tokenize", json{{"content", "x"}, {"with_piece", true}}, "with_piece",
       "unknown field 'with_piece' (did you mean 'with_pieces'?)"},
      {"/detokenize", json{{"tokens", json::array({1})}, {"a", 1}, {"b", 2}}, "a",
       "unknown field 'a'"},
      {"/v1/embeddings", json{{"inputs", "x"}}, "inputs",
       "unknown field 'inputs' (did you mean 'input'?)"},
      {"/v1/embeddings", json{{"input", "x"}, {"pooling", "cls"}}, "pooling",
       "unknown field 'pooling'"},
  };
  for (const Case& c : cases) {
    int status = 0;
    const json r = PostJson(server_, c.path, c.body, &status);
    EXPECT_EQ(status, 400) << c.path << " " << c.body.dump() << " -> " << r.dump();
    EXPECT_EQ(r["error"]["message"], c.message) << c.path;
    EXPECT_EQ(r["error"]["param"], c.param) << c.path;
  }
}

TEST_F(EndpointsTest, PropsDescribesTheServer) {
  int status = 0;
  const json p = Get(server_, "/props", &status);
  ASSERT_EQ(status, 200) << p.dump();
  const ServeOptions o = Options();
  EXPECT_EQ(p["total_slots"], 2);
  EXPECT_EQ(p["model_path"], o.engine.model_path);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 64);
  const json& params = p["default_generation_settings"]["params"];
  EXPECT_FLOAT_EQ(params["temperature"].get<float>(), o.defaults.sampling.temperature);
  EXPECT_EQ(params["top_k"], o.defaults.sampling.top_k);
  EXPECT_FLOAT_EQ(params["top_p"].get<float>(), o.defaults.sampling.top_p);
  EXPECT_FLOAT_EQ(params["min_p"].get<float>(), o.defaults.sampling.min_p);
  EXPECT_EQ(params["n_predict"], o.defaults.n_predict);
  EXPECT_EQ(params["seed"], o.defaults.sampling.seed);
  EXPECT_FLOAT_EQ(params["repeat_penalty"].get<float>(), 1.0f);
  EXPECT_EQ(params["kv"], "full");
  EXPECT_EQ(params["kv_type"], "f16");
  EXPECT_EQ(p["chat_template"], server_.server().chat_template().name());  // no Jinja in the file
  EXPECT_THAT(p["build_info"].get<std::string>(), StartsWith("rotor "));
  EXPECT_EQ(p["modalities"], json({{"vision", false}}));
  EXPECT_EQ(p["pooling"], "mean");
  auto post = server_.Client()->Post("/props", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

TEST_F(EndpointsTest, RetrievesTheServedModelOnly) {
  int status = 0;
  const json list = Get(server_, "/v1/models", &status);
  ASSERT_EQ(status, 200);
  const json m = Get(server_, "/v1/models/stories260K", &status);
  ASSERT_EQ(status, 200) << m.dump();
  EXPECT_EQ(m, list["data"][0]);
  EXPECT_EQ(m["object"], "model");
  const json e = Get(server_, "/v1/models/gpt-4", &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr("'gpt-4'"));
  Get(server_, "/v1/models/stories%32%360K", &status);  // percent-escaped
  EXPECT_EQ(status, 200);
}

std::vector<float> Embedding(const json& r, size_t i = 0) {
  return r["data"][i]["embedding"].get<std::vector<float>>();
}

TEST_F(EndpointsTest, EmbeddingsArePooledUnitVectors) {
  int status = 0;
  const json r = PostJson(server_, "/v1/embeddings",
                          {{"input", "Once upon a time"}, {"model", "stories260K"}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "list");
  EXPECT_EQ(r["model"], "stories260K");
  EXPECT_EQ(r["data"][0]["object"], "embedding");
  EXPECT_EQ(r["data"][0]["index"], 0);
  const std::vector<float> v = Embedding(r);
  const int n_embd = server_.server().engine().model().config().n_embd;
  ASSERT_EQ(std::ssize(v), n_embd);
  double sq = 0;
  for (float x : v) sq += static_cast<double>(x) * x;
  EXPECT_NEAR(sq, 1.0, 1e-5);
  const std::vector<int32_t> ids = tok().Encode("Once upon a time", true, true);
  EXPECT_EQ(r["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(r["usage"]["total_tokens"], ids.size());

  // The engine's embedding of the same tokens, with the server's options.
  Engine& ref = ReferenceEngine();
  Result<std::vector<float>> direct =
      Embed(ref, ids, {.pooling = Pooling::kMean, .kv_types = Options().defaults.kv.types});
  ASSERT_TRUE(direct.ok()) << direct.message();
  ASSERT_EQ(direct->size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], (*direct)[i], 1e-6) << i;

  // The same input again: the same vector; another input: another vector.
  EXPECT_EQ(Embedding(PostJson(server_, "/embeddings", {{"input", "Once upon a time"}}, &status)),
            v);
  const json two = PostJson(server_, "/v1/embeddings",
                            {{"input", {"Once upon a time", "The cat sat on the mat"}}}, &status);
  ASSERT_EQ(status, 200) << two.dump();
  ASSERT_EQ(two["data"].size(), 2);
  EXPECT_EQ(two["data"][1]["index"], 1);
  EXPECT_EQ(Embedding(two, 0), v);
  EXPECT_NE(Embedding(two, 1), v);
  // Token ids: one input, or several.
  EXPECT_EQ(Embedding(PostJson(server_, "/v1/embeddings", {{"input", ids}}, &status)), v);
  const json by_ids = PostJson(server_, "/v1/embeddings",
                               {{"input", json::array({ids, json::array({1, 2, 3})})}}, &status);
  ASSERT_EQ(status, 200) << by_ids.dump();
  EXPECT_EQ(Embedding(by_ids, 0), v);
  EXPECT_EQ(by_ids["usage"]["prompt_tokens"], ids.size() + 3);
  // base64: the float32 bytes.
  const json b64 =
      PostJson(server_, "/v1/embeddings",
               {{"input", "Once upon a time"}, {"encoding_format", "base64"}}, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(FromBase64(b64["data"][0]["embedding"].get<std::string>()), v);
}

// Embeddings run between the decode steps of a stream and leave its cache alone.
TEST_F(EndpointsTest, EmbeddingsWhileAStreamDecodes) {
  GenerateOptions greedy;
  greedy.n_predict = 48;
  greedy.sampling.temperature = 0;
  const std::string want = Reference("Once upon a time", greedy);
  int status = 0;
  const std::vector<float> alone =
      Embedding(PostJson(server_, "/v1/embeddings", {{"input", "A cat"}}, &status));
  ASSERT_EQ(status, 200);
  StreamResult s;
  std::thread stream([&] {
    s = PostStream(server_.port(), "/v1/completions",
                   {{"prompt", "Once upon a time"}, {"max_tokens", 48}, {"temperature", 0}});
  });
  for (int i = 0; i < 4; ++i) {
    const json r = PostJson(server_, "/v1/embeddings", {{"input", {"A cat", "A dog"}}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(Embedding(r, 0), alone);
  }
  stream.join();
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.text, want);
}

TEST_F(EndpointsTest, EmbeddingsRefuseBadInput) {
  ExpectBad(server_, "/v1/embeddings", json::object(), "'input' is missing");
  ExpectBad(server_, "/v1/embeddings", {{"input", json::array()}}, "not an empty array");
  ExpectBad(server_, "/v1/embeddings", {{"input", {{"a", 1}}}}, "'input' must be a string");
  ExpectBad(server_, "/v1/embeddings", {{"input", json::array({"a", 1})}}, "input[1] is 1");
  ExpectBad(server_, "/v1/embeddings", {{"input", {1, 9999}}}, "token id 9999 is out of");
  ExpectBad(server_, "/v1/embeddings", {{"input", json::array({json::array({1}), json::array()})}},
            "input[1] has no tokens");
  ExpectBad(server_, "/v1/embeddings", {{"input", "x"}, {"encoding_format", "hex"}},
            "'encoding_format' must be \"float\" or \"base64\", not \"hex\"");
  ExpectBad(server_, "/v1/embeddings", {{"input", "x"}, {"dimensions", 7}},
            "'dimensions' 7 is not supported");
  ExpectBad(server_, "/v1/embeddings", {{"input", std::vector<int32_t>(65, 5)}},
            "input has 65 tokens, more than the context size 64");
  // Each input is a forward pass: 2,048 at most (10,000 took 4.3 s).
  ExpectBad(server_, "/v1/embeddings", {{"input", std::vector<std::string>(2049, "a cat")}},
            "'input' holds 2049 inputs, more than the 2048 one request may embed");
}

TEST(EndpointsOff, EmbeddingsNeedTheFlag) {
  TestServer server(TestOptions(1, 4));
  ASSERT_TRUE(server.ok()) << server.error();
  ExpectBad(server, "/v1/embeddings", {{"input", "x"}}, "start it with --embeddings", 501);
  ServeOptions none = TestOptions(1, 4);
  none.embeddings = true;
  none.pooling = "none";
  EXPECT_THAT(Server::Bind(none).message(), HasSubstr("--pooling none"));
  none.pooling = "max";
  EXPECT_THAT(Server::Bind(none).message(), HasSubstr("--pooling: pooling 'max' is not one of"));
}

TEST(EndpointsOff, LastPoolingIsTheLastToken) {
  ServeOptions o = TestOptions(1, 4);
  o.embeddings = true;
  o.pooling = "last";
  TestServer server(o);
  ASSERT_TRUE(server.ok()) << server.error();
  int status = 0;
  const json r = PostJson(server, "/v1/embeddings", {{"input", "A cat"}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  const std::vector<int32_t> ids = server.server().engine().tokenizer().Encode("A cat", true, true);
  Result<std::vector<float>> direct =
      Embed(ReferenceEngine(), ids, {.pooling = Pooling::kLast, .kv_types = o.defaults.kv.types});
  ASSERT_TRUE(direct.ok());
  const std::vector<float> v = Embedding(r);
  ASSERT_EQ(v.size(), direct->size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], (*direct)[i], 1e-6);
}

// The official openai npm client: models.retrieve and embeddings.create
// (which asks for base64 and decodes it) against the float answer. Skipped
// without node and npm or when the package cannot be installed (OpenAiNpm).
TEST(EndpointsNpm, OfficialClientRetrievesTheModelAndEmbeds) {
  const OpenAiNpm npm;
  if (!npm.ok()) return;
  ServeOptions o = TestOptions(2, 4);
  o.embeddings = true;
  TestServer server(o);
  ASSERT_TRUE(server.ok()) << server.error();
  const json out = npm.Run(server.port(), R"JS(
const m = await client.models.retrieve('stories260K');
out.model = { id: m.id, object: m.object };
try {
  await client.models.retrieve('nope');
} catch (e) {
  out.missing_status = e.status;
  out.missing_code = e.code ?? e.error?.code ?? null;
}
const e = await client.embeddings.create({ model: 'stories260K', input: ['Once upon a time', 'A cat'] });
out.embeddings = e.data.map((d) => Array.from(d.embedding));
out.usage = e.usage;
const f = await client.embeddings.create(
    { model: 'stories260K', input: 'Once upon a time', encoding_format: 'float' });
out.float = f.data[0].embedding;
)JS");
  if (out.is_null()) return;  // failed, with node's stderr
  EXPECT_EQ(out["model"], json({{"id", "stories260K"}, {"object", "model"}}));
  EXPECT_EQ(out["missing_status"], 404);
  EXPECT_EQ(out["missing_code"], "model_not_found");
  int status = 0;
  const json direct =
      PostJson(server, "/v1/embeddings",
               {{"input", {"Once upon a time", "A cat"}}, {"encoding_format", "float"}}, &status);
  ASSERT_EQ(status, 200);
  ASSERT_EQ(out["embeddings"].size(), 2);
  EXPECT_EQ(out["embeddings"][0].get<std::vector<float>>(), Embedding(direct, 0));
  EXPECT_EQ(out["embeddings"][1].get<std::vector<float>>(), Embedding(direct, 1));
  EXPECT_EQ(out["float"].get<std::vector<float>>(), Embedding(direct, 0));
  EXPECT_EQ(out["usage"], direct["usage"]);
}

}  // namespace
}  // namespace rotor::serve::testing
