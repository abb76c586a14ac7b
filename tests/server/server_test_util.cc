#include "server_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tokenizer/utf8.h"

namespace rotor::serve::testing {

std::string BundledModel() { return std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf"; }

ServeOptions TestOptions(int parallel, int max_queue) {
  ServeOptions o;
  o.engine.model_path = BundledModel();
  o.engine.n_threads = 1;
  o.port = 0;
  o.parallel = parallel;
  o.max_queue = max_queue;
  return o;
}

TestServer::TestServer(const ServeOptions& options) {
  Result<std::unique_ptr<Server>> s = Server::Create(options);
  if (!s.ok()) {
    error_ = s.message();
    return;
  }
  server_ = std::move(*s);
  thread_ = std::thread([this] {
    Status st = server_->Run();
    if (!st.ok()) ADD_FAILURE() << st.message();
  });
}

TestServer::~TestServer() {
  if (!server_) return;
  server_->Stop();
  thread_.join();
}

std::unique_ptr<httplib::Client> TestServer::Client() const {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port());
  c->set_read_timeout(kClientTimeout);
  c->set_write_timeout(kClientTimeout);
  return c;
}

namespace {

bool WholeUtf8(std::string_view s) {
  while (!s.empty()) {
    const Utf8Scan scan = ScanUtf8(s);
    if (scan.kind != Utf8Scan::kComplete) return false;
    s.remove_prefix(scan.length);
  }
  return true;
}

// Handles one "data: ..." event.
void OnEvent(const std::string& data, StreamResult* r) {
  if (data == "[DONE]") {
    r->done = true;
    return;
  }
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded()) {
    ADD_FAILURE() << "not JSON: " << data;
    return;
  }
  if (j.contains("error")) {
    r->error = j["error"];
    return;
  }
  ++r->chunks;
  r->object = j.value("object", "");
  if (j.contains("usage") && !j["usage"].is_null()) r->usage = j["usage"];
  if (!j.contains("choices") || j["choices"].empty()) return;
  const json& c = j["choices"][0];
  std::string piece;
  if (c.contains("delta")) {
    const json& d = c["delta"];
    if (d.contains("role")) r->role = d["role"].get<std::string>();
    if (d.contains("content") && d["content"].is_string()) piece = d["content"].get<std::string>();
  } else {
    piece = c.value("text", "");
  }
  if (!WholeUtf8(piece)) r->utf8_ok = false;
  r->text += piece;
  if (c.contains("finish_reason") && c["finish_reason"].is_string())
    r->finish_reason = c["finish_reason"].get<std::string>();
}

}  // namespace

StreamResult PostStream(int port, const std::string& path, json body,
                        const std::function<bool(const std::string&)>& keep_reading) {
  body["stream"] = true;
  StreamResult r;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(kClientTimeout);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string raw, pending;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    raw.append(data, n);
    pending.append(data, n);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      std::istringstream lines(event);
      for (std::string line; std::getline(lines, line);)
        if (line.rfind("data: ", 0) == 0) OnEvent(line.substr(6), &r);
      if (keep_reading && !r.done && !keep_reading(r.text)) return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err)) r.transport = httplib::to_string(err);
  r.status = res.status > 0 ? res.status : 0;
  if (r.status != 200) r.body = raw;
  return r;
}

json PostJson(const TestServer& server, const std::string& path, const json& body, int* status) {
  auto res = server.Client()->Post(path, body.dump(), "application/json");
  if (!res) {
    ADD_FAILURE() << "POST " << path << " failed: " << httplib::to_string(res.error());
    return json();
  }
  if (status) *status = res->status;
  return json::parse(res->body, nullptr, false);
}

std::map<std::string, double> ScrapeMetrics(int port) {
  httplib::Client cli("127.0.0.1", port);
  std::map<std::string, double> out;
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) {
    ADD_FAILURE() << "GET /metrics failed";
    return out;
  }
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

Engine& ReferenceEngine() {
  static Engine* engine = [] {
    EngineOptions o;
    o.model_path = BundledModel();
    o.n_threads = 1;
    Result<std::unique_ptr<Engine>> e = Engine::Create(o);
    EXPECT_TRUE(e.ok()) << e.message();
    return e.ok() ? e->release() : nullptr;
  }();
  return *engine;
}

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

bool Shell(const std::string& command) { return std::system(command.c_str()) == 0; }

// `s` as one word of a POSIX shell command.
std::string ShellQuote(std::string_view s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

OpenAiNpm::OpenAiNpm() { Install(); }

void OpenAiNpm::Install() {
  if (!Shell("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1"))
    GTEST_SKIP() << "node or npm is not installed";
  if (!Shell("cd " + ShellQuote(dir_.path().string()) +
             " && timeout 180 npm install --no-audit --no-fund --loglevel=error openai > npm.log "
             "2>&1"))
    GTEST_SKIP() << "npm install openai failed (offline?): " << Slurp(dir_.path() / "npm.log");
  ok_ = true;
}

json OpenAiNpm::Run(int port, std::string_view script, const std::vector<std::string>& args,
                    std::chrono::seconds timeout) const {
  std::ofstream(dir_.path() / "client.mjs")
      << "import OpenAI from 'openai';\n"
         "const client =\n"
         "    new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0 });\n"
         "const out = {};\n"
      << script << "\nconsole.log(JSON.stringify(out));\n";
  std::string command = "cd " + ShellQuote(dir_.path().string()) + " && timeout " +
                        std::to_string(timeout.count()) + " node client.mjs " +
                        ShellQuote("http://127.0.0.1:" + std::to_string(port) + "/v1");
  for (const std::string& a : args) {
    command += ' ';
    command += ShellQuote(a);
  }
  command += " > out.json 2> err.txt";
  if (!Shell(command)) {
    ADD_FAILURE() << "node client.mjs failed: " << Slurp(dir_.path() / "err.txt");
    return json();
  }
  json out = json::parse(Slurp(dir_.path() / "out.json"), nullptr, false);
  if (!out.is_object()) {
    ADD_FAILURE() << "node client.mjs printed no JSON object: " << Slurp(dir_.path() / "out.json")
                  << Slurp(dir_.path() / "err.txt");
    return json();
  }
  return out;
}

GenerateOptions Greedy(int n_predict) {
  GenerateOptions o;
  o.n_predict = n_predict;
  o.sampling.temperature = 0;
  return o;
}

std::string Reference(const std::string& prompt, const GenerateOptions& options) {
  GenerateOptions o = options;
  o.prompt = prompt;
  Result<GenerateResult> r = ReferenceEngine().Generate(o, nullptr);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? r->text : "";
}

}  // namespace rotor::serve::testing
