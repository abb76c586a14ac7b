// `rotor serve` as a process (the binary of this build), and the official
// `openai` npm package talking to the server unchanged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <thread>

#include "server_test_util.h"

extern char** environ;

namespace rotor::serve::testing {
namespace {

namespace fs = std::filesystem;

// Runs the rotor binary with stdout and stderr going to files in `dir`.
pid_t SpawnRotor(const std::vector<std::string>& args, const fs::path& dir) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, (dir / "stdout").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, (dir / "stderr").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const std::string binary = std::string(ROTOR_BINARY_DIR) + "/rotor";
  std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ServeCliTest, ServesOnAFreePortAndStopsOnSigterm) {
  TempDir dir;
  const pid_t pid = SpawnRotor(
      {"serve", "-m", BundledModel(), "--port", "0", "-t", "1", "--parallel", "2", "--temp", "0"},
      dir.path());
  ASSERT_GT(pid, 0);
  int port = 0;
  const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
  WaitFor(
      [&] {
        std::smatch m;
        const std::string err = Slurp(dir.path() / "stderr");
        if (std::regex_search(err, m, listening)) port = std::stoi(m[1]);
        return port > 0;
      },
      std::chrono::milliseconds(10000));
  if (port == 0) {
    kill(pid, SIGKILL);
    WaitExit(pid);
    FAIL() << "no 'listening on' line: " << Slurp(dir.path() / "stderr");
  }
  httplib::Client cli("127.0.0.1", port);
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // --temp 0 is the server's default: the request does not say.
  auto res = cli.Post("/v1/completions", R"({"prompt": "The little dog", "max_tokens": 32})",
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const GenerateOptions o = Greedy(32);
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], Reference("The little dog", o));
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(dir.path() / "stderr");
}

// Starts `rotor serve` on a free port; its port, or 0 (the child killed).
int StartServe(const std::vector<std::string>& extra, const fs::path& dir, pid_t* pid) {
  std::vector<std::string> args = {"serve", "-m", BundledModel(), "--port", "0", "-t", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  *pid = SpawnRotor(args, dir);
  if (*pid <= 0) return 0;
  int port = 0;
  const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
  WaitFor(
      [&] {
        std::smatch m;
        const std::string err = Slurp(dir / "stderr");
        if (std::regex_search(err, m, listening)) port = std::stoi(m[1]);
        return port > 0;
      },
      std::chrono::milliseconds(10000));
  if (port == 0) {
    kill(*pid, SIGKILL);
    WaitExit(*pid);
  }
  return port;
}

// llama-server's -a / --alias: the model's id in /v1/models and in responses.
TEST(ServeCliTest, AliasNamesTheModel) {
  TempDir dir;
  pid_t pid = -1;
  const int port = StartServe({"-a", "my-model", "--temp", "0"}, dir.path(), &pid);
  ASSERT_GT(port, 0) << Slurp(dir.path() / "stderr");
  EXPECT_NE(Slurp(dir.path() / "stderr").find("model my-model"), std::string::npos);
  httplib::Client cli("127.0.0.1", port);
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "my-model") << models->body;
  auto one = cli.Get("/v1/models/my-model");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  auto res = cli.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})",
                      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["model"], "my-model") << res->body;
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(dir.path() / "stderr");
}

// llama-server's defaults: a request without max_tokens runs until end of
// text or a full context (-c), and pages of any origin may call the server;
// --no-cors turns the latter off, --no-webui the chat page; its
// --threads-http and --no-context-shift are taken.
TEST(ServeCliTest, DefaultsAreLlamaServers) {
  TempDir dir;
  pid_t pid = -1;
  const int port =
      StartServe({"-c", "40", "--ignore-eos", "--kv", "sink", "--kv-size", "16"}, dir.path(), &pid);
  ASSERT_GT(port, 0) << Slurp(dir.path() / "stderr");
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Post("/v1/completions", {{"Origin", "http://example.test"}},
                      R"({"prompt": "Once"})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json r = json::parse(res->body);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 40) << res->body;
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "http://example.test");
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(dir.path() / "stderr");

  TempDir dir2;
  const int port2 = StartServe(
      {"--no-cors", "--no-webui", "--threads-http", "2", "--no-context-shift"}, dir2.path(), &pid);
  ASSERT_GT(port2, 0) << Slurp(dir2.path() / "stderr");
  httplib::Client cli2("127.0.0.1", port2);
  auto pre = cli2.Options("/v1/completions", {{"Origin", "http://example.test"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 200);
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
  auto no_page = cli2.Get("/");
  ASSERT_TRUE(no_page);
  EXPECT_EQ(no_page->status, 404);
  auto models = cli2.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(dir2.path() / "stderr");
}

// SIGTERM with a stream in flight: /health turns 503 "draining", the stream
// is answered to its end, the process exits 0.
TEST(ServeCliTest, SigtermDrainsTheStreamInFlightThenExitsZero) {
  TempDir dir;
  pid_t pid = -1;
  const int port = StartServe({"-c", "2048", "--drain-timeout", "60"}, dir.path(), &pid);
  ASSERT_GT(port, 0) << Slurp(dir.path() / "stderr");
  bool signalled = false;
  int health_status = 0;
  std::string health_body;
  const StreamResult r =
      PostStream(port, "/v1/completions",
                 {{"prompt", "Once upon a time"}, {"max_tokens", 1500}, {"ignore_eos", true}},
                 [&](const std::string&) {
                   if (signalled) return true;
                   signalled = true;
                   kill(pid, SIGTERM);
                   httplib::Client cli("127.0.0.1", port);
                   WaitFor([&] {
                     auto h = cli.Get("/health");
                     health_status = h ? h->status : 0;
                     health_body = h ? h->body : "";
                     return health_status == 503;
                   });
                   return true;
                 });
  EXPECT_TRUE(signalled);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(health_status, 503);
  EXPECT_NE(health_body.find("draining"), std::string::npos) << health_body;
  EXPECT_EQ(WaitExit(pid), 0) << Slurp(dir.path() / "stderr");
  const std::string err = Slurp(dir.path() / "stderr");
  EXPECT_NE(err.find("draining: 1 requests in flight"), std::string::npos) << err;
  EXPECT_NE(err.find("drained, shutting down"), std::string::npos) << err;
}

// A second SIGINT does not wait for the drain.
TEST(ServeCliTest, SigintTwiceExitsAtOnce) {
  TempDir dir;
  pid_t pid = -1;
  const int port = StartServe({"-c", "8192", "--drain-timeout", "600"}, dir.path(), &pid);
  ASSERT_GT(port, 0) << Slurp(dir.path() / "stderr");
  // About a minute of work on this machine: still running when the signals come.
  std::thread client([port] {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(std::chrono::seconds(120));
    cli.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 8000, "ignore_eos": true})",
             "application/json");
  });
  httplib::Client cli("127.0.0.1", port);
  EXPECT_TRUE(WaitFor([&] {
    auto m = cli.Get("/metrics");
    return m && m->body.find("\nrotor_requests_in_flight 1\n") != std::string::npos;
  }));
  kill(pid, SIGINT);
  EXPECT_TRUE(WaitFor([&] {
    auto h = cli.Get("/health");
    return h && h->status == 503;
  }));
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, SIGINT);
  EXPECT_EQ(WaitExit(pid), 130) << Slurp(dir.path() / "stderr");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  client.join();  // its connection closed with the process
  EXPECT_NE(Slurp(dir.path() / "stderr").find("second SIGINT"), std::string::npos);
}

TEST(ServeCliTest, BadFlagsFailBeforeListening) {
  TempDir dir;
  pid_t pid = SpawnRotor(
      {"serve", "-m", BundledModel(), "--port", "0", "--chat-template", "vicuna"}, dir.path());
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid), 1);
  EXPECT_NE(Slurp(dir.path() / "stderr").find("'vicuna'"), std::string::npos);
}

// Skipped (with the reason) when node/npm are missing or the package cannot be
// installed (no network): OpenAiNpm.
TEST(OpenAiNpmTest, OfficialClientTalksToTheServer) {
  const OpenAiNpm npm;
  if (!npm.ok()) return;
  TestServer server(TestOptions(4, 8));
  ASSERT_TRUE(server.ok()) << server.error();
  const json out = npm.Run(server.port(), R"JS(
const base = { model: 'stories260K', max_tokens: 24, temperature: 0 };
const c = await client.completions.create({ ...base, prompt: 'Once upon a time' });
out.completion = c.choices[0].text;
out.completion_finish = c.choices[0].finish_reason;
out.usage = c.usage;
let text = '';
for await (const chunk of await client.completions.create(
    { ...base, prompt: 'Once upon a time', stream: true })) {
  text += chunk.choices[0]?.text ?? '';
}
out.completion_stream = text;
const messages = [{ role: 'user', content: 'A dog and a cat' }];
const chat = await client.chat.completions.create({ ...base, messages });
out.chat = chat.choices[0].message.content;
out.chat_role = chat.choices[0].message.role;
text = '';
let finish = null;
for await (const chunk of await client.chat.completions.create(
    { ...base, messages, stream: true })) {
  text += chunk.choices[0]?.delta?.content ?? '';
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
out.chat_stream = text;
out.chat_stream_finish = finish;
out.models = (await client.models.list()).data.map((m) => m.id);
try {
  await client.completions.create({ ...base, prompt: 'x', max_tokens: -2 });
} catch (e) {
  out.error_status = e.status;
  out.error_param = e.param ?? e.error?.param ?? null;
}
)JS");
  if (out.is_null()) return;  // failed, with node's stderr
  const GenerateOptions o = Greedy(24);
  const std::string completion = Reference("Once upon a time", o);
  GenerateOptions chat_o = o;
  chat_o.trim_leading_space = true;  // a chat reply starts at its first word, as in rotor chat
  const std::string chat =
      Reference(ChatTemplate().Apply({{"user", "A dog and a cat"}}, true), chat_o);
  EXPECT_EQ(out["completion"], completion);
  EXPECT_EQ(out["completion_finish"], "length");
  EXPECT_EQ(out["usage"]["completion_tokens"], 24);
  EXPECT_EQ(out["completion_stream"], completion);
  EXPECT_EQ(out["chat"], chat);
  EXPECT_EQ(out["chat_role"], "assistant");
  EXPECT_EQ(out["chat_stream"], chat);
  EXPECT_EQ(out["chat_stream_finish"], "length");
  EXPECT_EQ(out["models"], json::array({"stories260K"}));
  EXPECT_EQ(out["error_status"], 400);
  EXPECT_EQ(out["error_param"], "max_tokens");
}

// The official client with the fields beyond the basics: logprobs (chat and
// completions), n = 2, echo (with logprobs and max_tokens 0 too), logit_bias,
// a prompt array, and an unknown field (a 400 whose param names it).
TEST(OpenAiNpmTest, OfficialClientSendsEveryField) {
  const OpenAiNpm npm;
  if (!npm.ok()) return;
  TestServer server(TestOptions(4, 8));
  ASSERT_TRUE(server.ok()) << server.error();
  const Tokenizer& tok = ReferenceEngine().tokenizer();
  const int32_t forced = tok.Encode(" cat", false).back();  // process.argv[3]
  const json out = npm.Run(server.port(), R"JS(
const base = { model: 'stories260K', max_tokens: 8, temperature: 0 };
const messages = [{ role: 'user', content: 'A dog and a cat' }];
const chat = await client.chat.completions.create(
    { ...base, messages, logprobs: true, top_logprobs: 3 });
out.chat_logprobs = chat.choices[0].logprobs.content;
out.chat_text = chat.choices[0].message.content;
const c = await client.completions.create({ ...base, prompt: 'Once upon a time', logprobs: 2 });
out.completion_logprobs = c.choices[0].logprobs;
out.completion_text = c.choices[0].text;
const two = await client.chat.completions.create(
    { ...base, messages, n: 2, temperature: 1, seed: 4 });
out.n2 = two.choices.map((ch) => [ch.index, ch.message.content]);
const echo = await client.completions.create({ ...base, prompt: 'Once upon a time', echo: true });
out.echo = echo.choices[0].text;
const scored = await client.completions.create(
    { ...base, prompt: 'Once upon a time', echo: true, logprobs: 1, max_tokens: 0 });
out.scored_text = scored.choices[0].text;
out.scored_finish = scored.choices[0].finish_reason;
out.scored_logprobs = scored.choices[0].logprobs;
const biased = await client.completions.create(
    { ...base, prompt: 'Once upon a time', logit_bias: { [process.argv[3]]: 100 }, logprobs: 0 });
out.biased_tokens = biased.choices[0].logprobs.tokens;
const arr = await client.completions.create({ ...base, prompt: ['Once upon a time', 'The dog'] });
out.array = arr.choices.map((ch) => [ch.index, ch.text]);
try {
  await client.completions.create({ ...base, prompt: 'x', max_tokenz: 3 });
} catch (e) {
  out.error_status = e.status;
  out.error_param = e.param ?? e.error?.param ?? null;
  out.error_message = e.error?.message ?? e.message;
}
)JS",
                           {std::to_string(forced)});
  if (out.is_null()) return;  // failed, with node's stderr
  const GenerateOptions o = Greedy(8);
  const std::string completion = Reference("Once upon a time", o);
  // Chat logprobs: greedy picks the best of its top 3, all <= 0.
  ASSERT_TRUE(out["chat_logprobs"].is_array()) << out.dump();
  EXPECT_FALSE(out["chat_logprobs"].empty());
  for (const json& t : out["chat_logprobs"]) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    EXPECT_EQ(t["token"], t["top_logprobs"][0]["token"]);
  }
  // Completion logprobs: the tokens spell the text.
  std::string joined;
  for (const json& t : out["completion_logprobs"]["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, completion);
  EXPECT_EQ(out["completion_text"], completion);
  EXPECT_EQ(out["completion_logprobs"]["token_logprobs"].size(),
            out["completion_logprobs"]["tokens"].size());
  ASSERT_EQ(out["n2"].size(), 2u);
  EXPECT_EQ(out["n2"][0][0], 0);
  EXPECT_EQ(out["n2"][1][0], 1);
  EXPECT_EQ(out["echo"], "Once upon a time" + completion);
  // echo + logprobs + max_tokens 0 scores the prompt: an entry per token,
  // the first null.
  EXPECT_EQ(out["scored_text"], "Once upon a time");
  EXPECT_EQ(out["scored_finish"], "length");
  const json& scored = out["scored_logprobs"];
  ASSERT_EQ(scored["tokens"].size(), tok.Encode("Once upon a time", true).size()) << out.dump();
  EXPECT_TRUE(scored["token_logprobs"][0].is_null());
  for (size_t i = 1; i < scored["token_logprobs"].size(); ++i)
    EXPECT_LE(scored["token_logprobs"][i].get<double>(), 0.0);
  ASSERT_EQ(out["biased_tokens"].size(), 8u) << out.dump();
  for (const json& t : out["biased_tokens"]) EXPECT_EQ(t, tok.TokenToPiece(forced, true));
  ASSERT_EQ(out["array"].size(), 2u);
  EXPECT_EQ(out["array"][0][1], completion);
  EXPECT_EQ(out["array"][1][1], Reference("The dog", o));
  EXPECT_EQ(out["error_status"], 400);
  EXPECT_EQ(out["error_param"], "max_tokenz");
}

}  // namespace
}  // namespace rotor::serve::testing
