// Constrained generation end to end on the bundled model: for many seeds the
// output is a sentence of the grammar, and JSON output parses and validates
// against its schema (a small validator for the converter's subset below).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "engine/chat_session.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace rotor {
namespace {
namespace constrained_generate_test {

using nlohmann::json;

const std::string kModel = ROTOR_MODELS_DIR "/stories260K.gguf";
constexpr int kSeeds = 50;

Engine& TheEngine() {
  static std::unique_ptr<Engine> e = [] {
    EngineOptions o;
    o.model_path = kModel;
    o.n_threads = 2;
    auto r = Engine::Create(o);
    EXPECT_TRUE(r.ok()) << r.message();
    return std::move(*r);
  }();
  return *e;
}

std::shared_ptr<const grammar::Grammar> Parse(std::string_view gbnf) {
  auto g = grammar::ParseGrammar(gbnf);
  EXPECT_TRUE(g.ok()) << g.message();
  return *g;
}

std::shared_ptr<const grammar::Grammar> FromSchema(std::string_view schema) {
  auto gbnf = grammar::JsonSchemaToGrammar(schema);
  EXPECT_TRUE(gbnf.ok()) << gbnf.message();
  return Parse(*gbnf);
}

GenerateResult GenerateWith(std::shared_ptr<const grammar::Grammar> g, uint64_t seed, int n_predict,
                            float temperature = 1.0f) {
  GenerateOptions o;
  o.prompt = "Once upon a time";
  o.n_predict = n_predict;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.sampling.grammar = std::move(g);
  auto r = TheEngine().Generate(o, nullptr);
  EXPECT_TRUE(r.ok()) << r.message();
  return std::move(*r);
}

// Validates `v` against the subset of JSON Schema the converter supports.
std::string Invalid(const json& v, const json& s, const std::string& path = "#") {
  auto fail = [&](const std::string& why) { return path + ": " + why + " in " + v.dump(); };
  if (s.contains("const")) return v == s["const"] ? "" : fail("not the const");
  if (s.contains("enum")) {
    for (const json& e : s["enum"])
      if (v == e) return "";
    return fail("not in the enum");
  }
  if (s.contains("anyOf")) {
    for (const json& a : s["anyOf"])
      if (Invalid(v, a, path).empty()) return "";
    return fail("no anyOf branch");
  }
  if (!s.contains("type")) return "";
  const std::string t = s["type"];
  if (t == "object") {
    if (!v.is_object()) return fail("not an object");
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return fail("missing " + r.dump());
    for (const auto& [k, x] : v.items()) {
      if (!s["properties"].contains(k)) {
        if (s.value("additionalProperties", true) == false) return fail("extra property " + k);
        continue;
      }
      if (auto e = Invalid(x, s["properties"][k], path + "/" + k); !e.empty()) return e;
    }
    return "";
  }
  if (t == "array") {
    if (!v.is_array()) return fail("not an array");
    if (v.size() < s.value("minItems", 0u) || v.size() > s.value("maxItems", 1u << 30))
      return fail("wrong item count");
    for (size_t i = 0; i < v.size(); ++i)
      if (auto e = Invalid(v[i], s["items"], path + "/" + std::to_string(i)); !e.empty()) return e;
    return "";
  }
  if (t == "string") {
    if (!v.is_string()) return fail("not a string");
    // Length in code points.
    size_t n = 0;
    for (const char c : v.get<std::string>()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (n < s.value("minLength", 0u) || n > s.value("maxLength", 1u << 30))
      return fail("wrong length");
    return "";
  }
  if (t == "integer") return v.is_number_integer() ? "" : fail("not an integer");
  if (t == "number") return v.is_number() ? "" : fail("not a number");
  if (t == "boolean") return v.is_boolean() ? "" : fail("not a boolean");
  if (t == "null") return v.is_null() ? "" : fail("not null");
  return fail("unknown type " + t);
}

TEST(ConstrainedGenerate, SchemaOutputsParseAndValidateForManySeeds) {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 12},
      "age": {"type": "integer"},
      "mood": {"enum": ["happy", "sad", 3]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
      "pet": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
      "home": {"type": "object", "properties": {"x": {"type": "number"}},
               "required": ["x"], "additionalProperties": false}},
    "required": ["name", "age", "mood"], "additionalProperties": false})");
  const auto g = FromSchema(schema.dump());
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const GenerateResult r = GenerateWith(g, seed, 1000);
    // The grammar bounds the output, so it always completes.
    EXPECT_EQ(r.finish, FinishReason::kEos) << "seed " << seed << ": " << r.text;
    const json v = json::parse(r.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "seed " << seed << ": " << r.text;
    EXPECT_EQ(Invalid(v, schema), "") << "seed " << seed;
  }
}

// The built-in json_object grammar bounds nothing (strings, nesting), and
// the bundled model rarely closes a string, so most runs end at the budget:
// each output is then a prefix of an object the grammar accepts.
TEST(ConstrainedGenerate, JsonObjectOutputsParse) {
  const auto g = Parse(grammar::JsonGrammarText());
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const GenerateResult r = GenerateWith(g, seed, 150);
    grammar::Matcher m(g);
    ASSERT_TRUE(m.Accept(r.text)) << "seed " << seed << ": " << r.text;
    EXPECT_EQ(r.text.front(), '{');
    if (r.finish == FinishReason::kLength) continue;  // a prefix of an object, checked above
    const json v = json::parse(r.text, nullptr, false);
    EXPECT_TRUE(!v.is_discarded() && v.is_object()) << "seed " << seed << ": " << r.text;
  }
}

TEST(ConstrainedGenerate, GbnfOutputsMatchTheGrammar) {
  const auto g =
      Parse(R"g(root ::= "The " ("cat" | "dog" | "bird") " was " word ( ", " word ){0,3} "."
word ::= [a-z]{1,12})g");
  const std::regex re("The (cat|dog|bird) was [a-z]{1,12}(, [a-z]{1,12}){0,3}\\.");
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const GenerateResult r = GenerateWith(g, seed, 200);
    EXPECT_EQ(r.finish, FinishReason::kEos) << "seed " << seed;
    EXPECT_TRUE(std::regex_match(r.text, re)) << "seed " << seed << ": '" << r.text << "'";
  }
  // Greedy too (the refused argmax falls back to the best allowed token).
  const GenerateResult r = GenerateWith(g, 1, 200, 0.0f);
  EXPECT_TRUE(std::regex_match(r.text, re)) << r.text;
}

TEST(ConstrainedGenerate, EndsOnlyWhereTheGrammarMay) {
  // "a"+ never forces an end: the model may stop (EOS) only after one "a",
  // and generation ends at the budget or at EOS, never with an empty text.
  const auto g = Parse(R"g(root ::= "a"+)g");
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const GenerateResult r = GenerateWith(g, seed, 20);
    EXPECT_FALSE(r.text.empty());
    EXPECT_EQ(r.text.find_first_not_of('a'), std::string::npos) << r.text;
  }
}

TEST(ConstrainedGenerate, ChatRepliesFollowTheGrammarEachTurn) {
  ChatOptions o;
  o.n_predict = 100;
  o.sampling.seed = 5;
  o.sampling.grammar = FromSchema(R"({"type": "object", "properties": {"answer":
      {"enum": ["yes", "no"]}}, "required": ["answer"]})");
  auto chat = ChatSession::Create(TheEngine(), o);
  ASSERT_TRUE(chat.ok()) << chat.message();
  for (const char* user : {"Is the sky blue?", "Is the cat big?"}) {
    std::string streamed;
    auto t = (*chat)->Send(user, [&](std::string_view text) {
      streamed += text;
      return true;
    });
    ASSERT_TRUE(t.ok()) << t.message();
    EXPECT_EQ(t->finish, FinishReason::kEos);
    const json v = json::parse(streamed, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << streamed;
    EXPECT_TRUE(v["answer"] == "yes" || v["answer"] == "no") << streamed;
  }
}

// A lazy grammar over real generations: the text before the first trigger
// is exactly the unconstrained run's (the same draws), and from the trigger
// on the text is the grammar's.
TEST(ConstrainedGenerate, LazyGrammarConstrainsFromTheTrigger) {
  const std::string gbnf = R"g(root ::= " was " ("red" | "blue") " and " [a-z]+ ".")g";
  const auto g = Parse(gbnf);
  int triggered = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    GenerateOptions o;
    o.prompt = "Once upon a time";
    o.n_predict = 60;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = seed;
    auto free_run = TheEngine().Generate(o, nullptr);
    ASSERT_TRUE(free_run.ok()) << free_run.message();
    o.sampling.grammar = g;
    o.sampling.grammar_triggers = {" was"};
    auto lazy = TheEngine().Generate(o, nullptr);
    ASSERT_TRUE(lazy.ok()) << lazy.message();
    const size_t at = lazy->text.find(" was");
    if (at == std::string::npos) {
      EXPECT_EQ(lazy->tokens, free_run->tokens) << "seed " << seed;
      continue;
    }
    ++triggered;
    EXPECT_EQ(lazy->text.substr(0, at), free_run->text.substr(0, at)) << "seed " << seed;
    grammar::Matcher m(g);
    ASSERT_TRUE(m.Accept(lazy->text.substr(at))) << "seed " << seed << ": " << lazy->text;
    if (lazy->finish == FinishReason::kEos) {
      EXPECT_TRUE(m.Done()) << lazy->text;
    }
  }
  EXPECT_GT(triggered, 5);  // the model says " was" often
}

TEST(ConstrainedGenerate, UnconstrainedRunsAreUnchanged) {
  // A null grammar is the plain path: same tokens as a run without the field.
  const GenerateResult a = GenerateWith(nullptr, 7, 40);
  GenerateOptions o;
  o.prompt = "Once upon a time";
  o.n_predict = 40;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 7;
  auto b = TheEngine().Generate(o, nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a.tokens, b->tokens);
}

}  // namespace constrained_generate_test
}  // namespace
}  // namespace rotor
