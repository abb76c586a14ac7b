// Bad input never takes rotor serve down: each gets its status and an
// OpenAI-style error object, and the server answers /health afterwards.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <string_view>
#include <thread>

#include "server_test_util.h"

namespace rotor::serve::testing {
namespace {

struct BadRequest {
  std::string name;
  std::string method;
  std::string path;
  std::string body;
  int status;
  std::string param;  // "" = null
};

TEST(ServerErrorsTest, EachBadInputGetsItsStatusAndAnErrorObject) {
  ServeOptions o = TestOptions(2, 4);
  o.max_body = 4096;
  TestServer server(o);
  ASSERT_TRUE(server.ok()) << server.error();
  std::string long_prompt;
  for (int i = 0; i < 80; ++i) long_prompt += "Once upon a time there was a dog. ";
  const std::vector<BadRequest> cases = {
      {"invalid JSON", "POST", "/v1/completions", "{\"prompt\": \"x\",", 400, ""},
      {"not an object", "POST", "/v1/completions", "[1, 2]", 400, ""},
      {"empty body", "POST", "/v1/completions", "", 400, ""},
      {"missing prompt", "POST", "/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"prompt number", "POST", "/v1/completions", R"({"prompt": 7})", 400, "prompt"},
      {"max_tokens string", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": "9"})", 400,
       "max_tokens"},
      {"max_tokens negative", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": -3})",
       400, "max_tokens"},
      {"max_tokens huge", "POST", "/v1/completions",
       R"({"prompt": "a", "max_tokens": 99999999999999999999})", 400, "max_tokens"},
      {"max_tokens float", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2.5})", 400,
       "max_tokens"},
      {"temperature negative", "POST", "/v1/completions", R"({"prompt": "a", "temperature": -1})",
       400, "temperature"},
      {"top_p above 1", "POST", "/v1/completions", R"({"prompt": "a", "top_p": 1.5})", 400,
       "top_p"},
      {"stream string", "POST", "/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400,
       "stream"},
      {"stop number", "POST", "/v1/completions", R"({"prompt": "a", "stop": 3})", 400, "stop"},
      {"unknown kv policy", "POST", "/v1/completions", R"({"prompt": "a", "kv": "lru"})", 400,
       "kv"},
      {"kv_keep too big", "POST", "/v1/completions",
       R"({"prompt": "a", "kv": "sink", "kv_size": 16, "kv_keep": 16})", 400, "kv"},
      {"token id out of range", "POST", "/v1/completions", R"({"prompt": [1, 100000]})", 400,
       "prompt"},
      {"n > 16", "POST", "/v1/completions", R"({"prompt": "a", "n": 17})", 400, "n"},
      {"unknown field", "POST", "/v1/completions", R"({"prompt": "a", "max_tokenz": 2})", 400,
       "max_tokenz"},
      {"prompt longer than the context", "POST", "/v1/completions",
       json{{"prompt", long_prompt.substr(0, 3500)}}.dump(), 400, "prompt"},
      {"messages not an array", "POST", "/v1/chat/completions", R"({"messages": "hi"})", 400,
       "messages"},
      {"message without role", "POST", "/v1/chat/completions",
       R"({"messages": [{"content": "hi"}]})", 400, "messages[0].role"},
      {"unsupported role", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "function", "content": "hi"}]})", 400, "messages[0].role"},
      {"image content", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content"},
      {"body over --max-body", "POST", "/v1/completions",
       json{{"prompt", std::string(5000, 'a')}}.dump(), 413, ""},
      {"unknown endpoint", "POST", "/v1/audio/speech", R"({"input": "a"})", 404, ""},
      {"unknown GET", "GET", "/nothing/here", "", 404, ""},
      {"GET on a POST endpoint", "GET", "/v1/completions", "", 405, ""},
      {"DELETE on a POST endpoint", "DELETE", "/v1/chat/completions", "", 405, ""},
      {"POST on a GET endpoint", "POST", "/health", "{}", 405, ""},
  };
  auto cli = server.Client();
  for (const BadRequest& c : cases) {
    httplib::Result res = c.method == "POST"  ? cli->Post(c.path, c.body, "application/json")
                          : c.method == "GET" ? cli->Get(c.path)
                                              : cli->Delete(c.path);
    ASSERT_TRUE(res) << c.name << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, c.status) << c.name << ": " << res->body;
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << c.name << ": " << res->body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.name;
    EXPECT_EQ(e["type"], "invalid_request_error") << c.name;
    EXPECT_TRUE(e.contains("code")) << c.name;
    if (c.param.empty()) {
      EXPECT_TRUE(e["param"].is_null()) << c.name << ": " << res->body;
    } else {
      EXPECT_EQ(e["param"], c.param) << c.name << ": " << res->body;
    }
    auto health = cli->Get("/health");
    ASSERT_TRUE(health) << "after " << c.name;
    EXPECT_EQ(health->status, 200) << "after " << c.name;
  }
  const auto m = ScrapeMetrics(server.port());
  EXPECT_GE(m.at(R"(rotor_requests_total{endpoint="/v1/completions",status="400"})"), 15);
  EXPECT_EQ(m.at(R"(rotor_requests_total{endpoint="/v1/completions",status="413"})"), 1);
  EXPECT_EQ(m.at(R"(rotor_requests_total{endpoint="other",status="404"})"), 2);
}

// KV options a request's policy does not use, or values its policy refuses:
// 400 with the message naming the JSON fields (never the CLI flags).
TEST(ServerErrorsTest, KvOptionErrorsNameTheJsonFields) {
  TestServer server(TestOptions(1, 2));
  ASSERT_TRUE(server.ok()) << server.error();
  auto cli = server.Client();
  const std::pair<std::string, std::string> cases[] = {
      {R"({"prompt": "a", "kv": "window", "kv_size": 32, "kv_keep": 4})",
       "kv_keep is not used by kv window"},
      {R"({"prompt": "a", "kv": "sink", "kv_size": 32, "kv_window": 4})",
       "kv_window is not used by kv sink"},
      {R"({"prompt": "a", "kv": "snapkv", "kv_size": 16, "kv_window": 16})",
       "kv_window 16 must be smaller than kv_size 16"},
      {R"({"prompt": "a", "kv": "h2o", "kv_size": 16, "kv_recent": 20})",
       "kv_recent 20 must be smaller than kv_size 16"},
      {R"({"prompt": "a", "kv": "tova", "kv_size": 100000})",
       "kv_size 100000 is larger than the context size"},
  };
  for (const auto& [body, message] : cases) {
    auto res = cli->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 400) << body << ": " << res->body;
    const std::string m = json::parse(res->body)["error"]["message"];
    EXPECT_NE(m.find(message), std::string::npos) << m;
    EXPECT_EQ(m.find("--"), std::string::npos) << m;
  }
  // Every policy runs through the server with its own options.
  for (const char* body :
       {R"({"prompt": "Once", "max_tokens": 3, "kv": "snapkv", "kv_size": 32, "kv_window": 8})",
        R"({"prompt": "Once", "max_tokens": 3, "kv": "tova", "kv_size": 32})"}) {
    auto res = cli->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 200) << body << ": " << res->body;
  }
}

TEST(ServerErrorsTest, GarbageOnTheSocketIsA400) {
  TestServer server(TestOptions(1, 1));
  ASSERT_TRUE(server.ok()) << server.error();
  httplib::Client cli("127.0.0.1", server.port());
  // A method httplib does not know.
  httplib::Request req;
  req.method = "BREW";
  req.path = "/health";
  httplib::Response res;
  httplib::Error err;
  ASSERT_TRUE(cli.send(req, res, err)) << httplib::to_string(err);
  EXPECT_EQ(res.status, 400);
  EXPECT_TRUE(json::parse(res.body, nullptr, false).contains("error")) << res.body;
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// --parallel 1 --max-queue 1: one request decodes, one waits, the third gets
// 503 with Retry-After; once the first client leaves the queued one runs.
TEST(ServerErrorsTest, FullQueueIs503WithRetryAfter) {
  TestServer server(TestOptions(1, 1));
  ASSERT_TRUE(server.ok()) << server.error();
  const json endless = {{"prompt", "Once upon a time"},
                        {"max_tokens", 1 << 20},
                        {"kv", "window"},
                        {"kv_size", 32},
                        {"ignore_eos", true}};
  std::atomic<bool> leave{false};
  std::thread first([&] {
    PostStream(server.port(), "/v1/completions", endless,
               [&](const std::string&) { return !leave.load(); });
  });
  ASSERT_TRUE(
      WaitFor([&] { return ScrapeMetrics(server.port())["rotor_running_sequences"] == 1; }));
  StreamResult second;
  std::thread queued([&] {
    second = PostStream(server.port(), "/v1/completions",
                        {{"prompt", "The cat"}, {"max_tokens", 5}, {"temperature", 0}});
  });
  ASSERT_TRUE(WaitFor([&] { return ScrapeMetrics(server.port())["rotor_queue_length"] == 1; }));
  auto cli = server.Client();
  auto res =
      cli->Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  const json e = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(e.contains("error")) << res->body;
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(e["error"]["code"], "server_busy");
  leave = true;
  first.join();
  queued.join();
  EXPECT_EQ(second.status, 200) << second.body;
  EXPECT_TRUE(second.done);
  auto health = cli->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// Sends `bytes` on a new connection and reads until the server closes it.
std::string Exchange(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) got.append(buf, n);
  close(fd);
  return got;
}

// HEAD gets GET's head with no body (RFC 9110 9.3.2): a body after it (as
// the 405 that HEAD got before) is read by a keep-alive client as the start
// of its next response. Load balancers check health with HEAD.
TEST(ServerErrorsTest, HeadIsAnsweredAsGetWithoutABody) {
  TestServer server(TestOptions(2, 4));
  ASSERT_TRUE(server.ok()) << server.error();
  for (const char* path : {"/health", "/v1/models", "/metrics", "/v1/completions"}) {
    const std::string got =
        Exchange(server.port(), fmt::format("HEAD {} HTTP/1.1\r\nHost: x\r\n\r\n"
                                            "GET /health HTTP/1.1\r\nHost: x\r\n"
                                            "Connection: close\r\n\r\n",
                                            path));
    const size_t head_end = got.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos) << path << ": " << got;
    const std::string head = got.substr(0, head_end);
    const bool post_only = std::string_view(path) == "/v1/completions";
    EXPECT_TRUE(head.starts_with(post_only ? "HTTP/1.1 405" : "HTTP/1.1 200")) << path << head;
    if (post_only) {
      EXPECT_NE(head.find("Allow: POST"), std::string::npos) << head;
    }
    // GET's length, no body: the next response starts right after the head.
    const size_t length = head.find("Content-Length: ");
    ASSERT_NE(length, std::string::npos) << path << ": " << head;
    EXPECT_GT(std::stol(head.substr(length + 16)), 0) << path;
    EXPECT_TRUE(got.substr(head_end + 4).starts_with("HTTP/1.1 200")) << path << ": " << got;
    const std::string rest = got.substr(head_end + 4);
    EXPECT_TRUE(rest.ends_with("\"status\":\"ok\"}")) << rest;
  }
  // GET routes say HEAD is allowed too.
  auto res = server.Client()->Post("/health", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD");
}

}  // namespace
}  // namespace rotor::serve::testing
