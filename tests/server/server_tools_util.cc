#include "server_tools_util.h"

#include <iostream>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "gguf/gguf.h"
#include "server/tool_calls.h"
#include "gguf/gguf_writer.h"

namespace rotor::serve::testing {

namespace fs = std::filesystem;

const std::string& ToolModel() {
  static const std::string path = [] {
    const std::string out =
        (fs::temp_directory_path() / ("rotor-tools-test-" + std::to_string(getpid()) + ".gguf"))
            .string();
    Result<std::unique_ptr<GgufFile>> src = GgufFile::Open(BundledModel());
    if (!src.ok()) return std::string();
    GgufWriter w;
    w.CopyMetadata(**src);
    Result<std::vector<std::string>> tokens = (*src)->GetStringArray("tokenizer.ggml.tokens");
    Result<std::vector<int64_t>> types = (*src)->GetIntArray("tokenizer.ggml.token_type");
    if (!tokens.ok() || !types.ok()) return std::string();
    const char* markup[] = {"<|im_start|>", "<|im_end|>", "<|start_header_id|>",
                            "<|end_header_id|>", "<|eot_id|>"};
    std::vector<int32_t> t32(types->begin(), types->end());
    for (int i = 0; i < 5; ++i) {
      (*tokens)[4 + i] = markup[i];  // <0x01>..<0x05>
      t32[4 + i] = 3;                // control
    }
    (*tokens)[kToolCallToken] = "<tool_call>";
    t32[kToolCallToken] = 4;  // user-defined
    (*tokens)[kMistralToolCallsToken] = "[TOOL_CALLS]";
    t32[kMistralToolCallsToken] = 3;  // control, as in Mistral v0.3's vocabulary
    w.SetStringArray("tokenizer.ggml.tokens", *tokens);
    w.SetI32Array("tokenizer.ggml.token_type", t32);
    for (const GgufTensor& t : (*src)->tensors())
      if (!w.AddTensor(t.name, t.type, t.ne, t.data, t.n_bytes).ok()) return std::string();
    if (!w.Write(out).ok()) return std::string();
    std::atexit([] {
      std::error_code ec;
      fs::remove(fs::temp_directory_path() /
                     ("rotor-tools-test-" + std::to_string(getpid()) + ".gguf"),
                 ec);
    });
    return out;
  }();
  return path;
}

ServeOptions ToolOptions(const std::string& chat_template) {
  ServeOptions o = TestOptions(4, 16);
  o.engine.model_path = ToolModel();
  o.chat_template = chat_template;
  o.engine.n_ctx = 4096;  // tool definitions tokenize to a character or two per token
  return o;
}

namespace {

// Enough JSON Schema validation for the schemas below: type, properties,
// required, additionalProperties false, enum, maxLength, items.
bool Validate(const json& v, const json& s, std::string* why) {
  auto fail = [&](const std::string& m) {
    *why = m + ": " + v.dump();
    return false;
  };
  if (s.contains("enum")) {
    for (const json& e : s["enum"])
      if (e == v) return true;
    return fail("not in enum");
  }
  const std::string type = s.value("type", "");
  if (type == "object") {
    if (!v.is_object()) return fail("not an object");
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return fail("missing " + r.get<std::string>());
    const json props = s.value("properties", json::object());
    for (const auto& [k, item] : v.items()) {
      if (!props.contains(k)) {
        if (s.value("additionalProperties", true) == false) return fail("extra property " + k);
        continue;
      }
      if (!Validate(item, props[k], why)) return false;
    }
    return true;
  }
  if (type == "array") {
    if (!v.is_array()) return fail("not an array");
    for (const json& item : v)
      if (s.contains("items") && !Validate(item, s["items"], why)) return false;
    return true;
  }
  if (type == "string") {
    if (!v.is_string()) return fail("not a string");
    size_t chars = 0;  // code points: bytes that do not continue a UTF-8 sequence
    for (const char c : v.get<std::string>()) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (s.contains("maxLength") && chars > s["maxLength"].get<size_t>()) return fail("too long");
    return true;
  }
  if (type == "integer") return v.is_number_integer() || fail("not an integer");
  if (type == "number") return v.is_number() || fail("not a number");
  if (type == "boolean") return v.is_boolean() || fail("not a boolean");
  return true;
}

}  // namespace

const json kWeatherParams = json::parse(R"({
  "type": "object",
  "properties": {
    "city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer"},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "alerts": {"type": "boolean"},
    "hours": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    "score": {"type": "number"}
  },
  "required": ["city", "days", "unit", "alerts"]
})");
const json kTimeParams = json::parse(R"({
  "type": "object",
  "properties": {"zone": {"type": "string", "maxLength": 8}},
  "required": ["zone"],
  "additionalProperties": false
})");

json Tool(const std::string& name, const json& params) {
  return {{"type", "function"},
          {"function", {{"name", name}, {"description", "d"}, {"parameters", params}}}};
}

json ToolRequest(uint64_t seed) {
  return {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
          {"tools", {Tool("get_weather", kWeatherParams), Tool("get_time", kTimeParams)}},
          {"tool_choice", "required"},
          {"parallel_tool_calls", false},
          {"temperature", 1},
          {"seed", seed},
          {"max_tokens", 400}};
}

void ExpectValidCalls(const json& calls, const std::string& context) {
  ASSERT_TRUE(calls.is_array() && !calls.empty()) << context;
  for (const json& c : calls) {
    ASSERT_TRUE(c["id"].is_string()) << context;
    EXPECT_TRUE(c["id"].get<std::string>().starts_with("call_")) << context;
    EXPECT_EQ(c["type"], "function") << context;
    const std::string name = c["function"]["name"];
    ASSERT_TRUE(c["function"]["arguments"].is_string()) << context;
    const json args = json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << context << c.dump();
    std::string why;
    ASSERT_TRUE(name == "get_weather" || name == "get_time") << context << name;
    EXPECT_TRUE(Validate(args, name == "get_weather" ? kWeatherParams : kTimeParams, &why))
        << context << why;
  }
}

StreamedCalls PostStreamedCalls(const TestServer& server, json body) {
  StreamedCalls out;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(kClientTimeout);
  const auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(res) << httplib::to_string(res.error());
  if (!res) return out;
  EXPECT_EQ(res->status, 200) << res->body;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("data: ")) continue;
    if (line == "data: [DONE]") {
      out.done = true;
      continue;
    }
    const json chunk = json::parse(line.substr(6));
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (chunk.contains("usage") && !chunk["usage"].is_null()) out.usage = true;
    if (chunk["choices"].empty()) continue;
    const json& choice = chunk["choices"][0];
    if (choice["finish_reason"].is_string()) out.finish = choice["finish_reason"];
    if (choice["delta"].contains("tool_calls"))
      for (json c : choice["delta"]["tool_calls"]) {
        EXPECT_EQ(c["index"], out.calls.size());
        c.erase("index");
        out.calls.push_back(c);
      }
  }
  return out;
}

void ExpectRequiredCalls(const TestServer& server, const std::string& label, int n_seeds,
                         bool parallel) {
  for (int seed = 1; seed <= n_seeds; ++seed) {
    json body = ToolRequest(static_cast<uint64_t>(seed));
    body["parallel_tool_calls"] = parallel;
    int status = 0;
    const json r = PostJson(server, "/v1/chat/completions", body, &status);
    const std::string context = label + " seed " + std::to_string(seed) + ": ";
    ASSERT_EQ(status, 200) << context << r.dump();
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << context << r.dump();
    EXPECT_TRUE(choice["message"]["content"].is_null()) << context << r.dump();
    EXPECT_EQ(choice["message"]["tool_calls"].size(), 1u) << context << r.dump();
    ExpectValidCalls(choice["message"]["tool_calls"], context);
  }
}

int ExpectParallelAndNamedCalls(const TestServer& server, const std::string& label) {
  int several = 0;
  for (uint64_t seed = 100; seed < 100 + kParallelCallSeeds; ++seed) {
    json body = ToolRequest(seed);
    body["parallel_tool_calls"] = true;
    body["max_tokens"] = 1200;
    int status = 0;
    const json r = PostJson(server, "/v1/chat/completions", body, &status);
    EXPECT_EQ(status, 200) << label << r.dump();
    const json& calls = r["choices"][0]["message"]["tool_calls"];
    EXPECT_LE(calls.size(), static_cast<size_t>(kMaxParallelCalls));
    several += calls.size() > 1;
    ExpectValidCalls(calls, label + " parallel seed " + std::to_string(seed) + ": ");
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
    const json named = PostJson(server, "/v1/chat/completions", body, &status);
    EXPECT_EQ(status, 200) << label << named.dump();
    for (const json& c : named["choices"][0]["message"]["tool_calls"])
      EXPECT_EQ(c["function"]["name"], "get_time");
    ExpectValidCalls(named["choices"][0]["message"]["tool_calls"], label + " named: ");
  }
  return several;
}

void ExpectStreamedCalls(const TestServer& server, const std::string& label) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const StreamedCalls r = PostStreamedCalls(server, ToolRequest(seed));
    EXPECT_TRUE(r.done);
    EXPECT_TRUE(r.usage);
    EXPECT_EQ(r.finish, "tool_calls");
    EXPECT_EQ(r.calls.size(), 1u);
    ExpectValidCalls(r.calls, label + " stream seed " + std::to_string(seed) + ": ");
  }
}

void ExpectAutoAndNone(const TestServer& server) {
  json body = ToolRequest(7);
  body["max_tokens"] = 16;
  json replies[2];
  for (int i = 0; i < 2; ++i) {
    body["tool_choice"] = i == 0 ? "auto" : "none";
    int status = 0;
    replies[i] = PostJson(server, "/v1/chat/completions", body, &status);
    ASSERT_EQ(status, 200) << replies[i].dump();
    // The model answers freely: text (a call only if it wrote one).
    const json& m = replies[i]["choices"][0]["message"];
    EXPECT_TRUE(m["content"].is_string() || m.contains("tool_calls")) << replies[i].dump();
  }
  EXPECT_GT(replies[0]["usage"]["prompt_tokens"].get<int>(),
            replies[1]["usage"]["prompt_tokens"].get<int>() + 50);
}

AutoCalls PostAutoCalls(const TestServer& server, int token, float bias, int n_seeds,
                        const std::string& marker) {
  AutoCalls out;
  for (int seed = 1; seed <= n_seeds; ++seed) {
    json body = ToolRequest(static_cast<uint64_t>(seed));
    body["tool_choice"] = "auto";
    body["max_tokens"] = 1000;
    body["logit_bias"] = {{std::to_string(token), bias}};
    int status = 0;
    const json r = PostJson(server, "/v1/chat/completions", body, &status);
    const std::string context = "seed " + std::to_string(seed) + ": ";
    EXPECT_EQ(status, 200) << context << r.dump();
    if (status != 200) continue;
    const json& choice = r["choices"][0];
    const json& m = choice["message"];
    if (m.contains("tool_calls")) {
      ++out.with_calls;
      EXPECT_EQ(choice["finish_reason"], "tool_calls") << context << r.dump();
      ExpectValidCalls(m["tool_calls"], context);
      if (m["content"].is_string()) ++out.text_first;
    } else {
      ++out.text_only;
    }
    if (m["content"].is_string() && choice["finish_reason"] != "length") {
      EXPECT_EQ(m["content"].get<std::string>().find(marker), std::string::npos)
          << context << r.dump();
    }
  }
  std::cout << marker << ": " << out.with_calls << " replies with calls (" << out.text_first
            << " after text), " << out.text_only << " text only\n";
  return out;
}

}  // namespace rotor::serve::testing
