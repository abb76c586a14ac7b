// prefix_bench: what the prefix cache saves, measured through a running
// `rotor serve` as an OpenAI client would see it. Each scenario alternates the
// cache on and off (`cache_prompt`, llama-server's per-request switch) in one
// run, `--rounds` times, and prints one JSON line per round:
//
//   repeat  a prompt of --prompt-tokens token ids sent twice: time to first
//           token of the second / the first
//   chat    a --turns turn chat replayed as an OpenAI client sends it (the
//           whole history each turn): total time to first token, on vs off
//   shared  --clients concurrent requests sharing a --prompt-tokens system
//           prompt: peak K/V bytes (/metrics) and aggregate tokens/s, on vs off
//   unique  --clients concurrent requests with prompts no other shares
//           (0% hits): aggregate tokens/s, on vs off
//   conversations
//           --clients chats of --turns turns at once, each sending its whole
//           history every turn (a system prompt of --prompt-tokens words,
//           shared by all chats with --shared-system 1); meant for a load
//           balancer in front of replicas (deploy/): aggregate tokens/s, time
//           to first token (median, p95) and the prefix-cache hit rate
//           (cached / prompt tokens of the replies). --seed changes every
//           text, so successive runs find nothing of each other's cached.
//
//   prefix_bench --port 8080 --scenario repeat --prompt-tokens 2000
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string scenario = "repeat";
  int prompt_tokens = 2000;
  int turns = 5;
  int clients = 8;
  int max_tokens = 32;
  int rounds = 3;
  int vocab = 256;        // token ids are drawn from [3, vocab)
  int shared_system = 0;  // conversations: one system prompt for every chat
  int seed = 0;           // conversations: changes every text
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::vector<int> Tokens(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int> t(n);
  for (int& x : t) x = 3 + static_cast<int>(rng() % (vocab - 3));
  return t;
}

std::string Words(int n, uint32_t seed) {
  static const char* kWords[] = {"the", "little", "dog", "ran",  "to",   "park", "and", "saw",
                                 "a",   "big",    "red", "ball", "Lily", "Tom",  "sun", "was"};
  std::mt19937 rng(seed);
  std::string s;
  for (int i = 0; i < n; ++i) (s += i ? " " : "") += kWords[rng() % 16];
  return s + ".";
}

struct Reply {
  double ttft_ms = 0, total_ms = 0;
  int64_t completion = 0, cached = 0, prompt = 0;
  std::string text;
  bool ok = false;
};

// A streaming request; times the first text chunk.
Reply Send(const Options& o, const std::string& path, json body) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["max_tokens"] = o.max_tokens;
  body["temperature"] = 0;
  body["ignore_eos"] = true;
  Reply r;
  httplib::Client cli(o.host, o.port);
  cli.set_read_timeout(3600);
  const Clock::time_point t0 = Clock::now();
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    for (size_t at; (at = buf.find("\n\n")) != std::string::npos; buf.erase(0, at + 2)) {
      const std::string ev = buf.substr(0, at);
      if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
      const json j = json::parse(ev.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && j["usage"].is_object()) {
        r.completion = j["usage"]["completion_tokens"];
        r.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"];
        r.prompt = j["usage"]["prompt_tokens"];
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const json& c = j["choices"][0];
      const json& t = c.contains("delta") ? c["delta"].value("content", json("")) : c["text"];
      if (t.is_string() && !t.get<std::string>().empty()) {
        if (r.text.empty()) r.ttft_ms = Ms(Clock::now() - t0);
        r.text += t.get<std::string>();
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  r.ok = cli.send(req, res, err) && res.status == 200;
  r.total_ms = Ms(Clock::now() - t0);
  return r;
}

double Metric(const Options& o, const std::string& name) {
  httplib::Client cli(o.host, o.port);
  auto res = cli.Get("/metrics");
  if (!res) return -1;
  const size_t at = res->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(res->body.c_str() + at + name.size() + 2);
}

// `clients` requests at once; aggregate tokens/s and the peak of K/V blocks
// held by the running sequences (cached blocks nobody uses not counted).
json Concurrent(const Options& o, const std::vector<json>& bodies) {
  std::atomic<bool> done{false};
  double peak = 0;
  std::thread poll([&] {
    while (!done) {
      peak = std::max(peak, Metric(o, "rotor_kv_blocks_used"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<Reply> replies(bodies.size());
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] { replies[i] = Send(o, "/v1/completions", bodies[i]); });
  for (auto& t : threads) t.join();
  const double wall = Ms(Clock::now() - t0) / 1000;
  done = true;
  poll.join();
  int64_t tokens = 0, cached = 0;
  bool ok = true;
  for (const Reply& r : replies) tokens += r.completion, cached += r.cached, ok = ok && r.ok;
  return {{"ok", ok},
          {"wall_s", wall},
          {"tok_per_s", tokens / wall},
          {"cached_tokens", cached},
          {"peak_blocks_used", peak}};
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// --clients chats at once, --turns turns each; every turn resends the history.
json Conversations(const Options& o, uint32_t seed) {
  std::vector<std::vector<Reply>> replies(o.clients);
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c) {
    threads.emplace_back([&, c] {
      const uint32_t system_seed = o.shared_system ? seed : seed + 1 + c;
      json messages =
          json::array({{{"role", "system"}, {"content", Words(o.prompt_tokens, system_seed)}}});
      for (int t = 0; t < o.turns; ++t) {
        messages.push_back({{"role", "user"}, {"content", Words(30, seed + 1000 + 100 * c + t)}});
        Reply r = Send(o, "/v1/chat/completions", {{"messages", messages}});
        messages.push_back({{"role", "assistant"}, {"content", r.text}});
        replies[c].push_back(std::move(r));
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = Ms(Clock::now() - t0) / 1000;
  std::vector<double> ttft;
  int64_t tokens = 0, cached = 0, prompt = 0;
  bool ok = true;
  for (const auto& chat : replies)
    for (const Reply& r : chat) {
      ttft.push_back(r.ttft_ms);
      tokens += r.completion, cached += r.cached, prompt += r.prompt, ok = ok && r.ok;
    }
  return {{"ok", ok},
          {"requests", ttft.size()},
          {"wall_s", wall},
          {"tok_per_s", tokens / wall},
          {"ttft_ms_median", Percentile(ttft, 0.5)},
          {"ttft_ms_p95", Percentile(ttft, 0.95)},
          {"prompt_tokens", prompt},
          {"cached_tokens", cached},
          {"hit_rate", prompt > 0 ? static_cast<double>(cached) / prompt : 0.0}};
}

json Round(const Options& o, int round) {
  const uint32_t seed = 1000u * round + 7;
  if (o.scenario == "conversations") return Conversations(o, seed + 100000u * o.seed);
  if (o.scenario == "repeat") {
    const std::vector<int> p = Tokens(o.prompt_tokens, seed, o.vocab);
    const Reply first = Send(o, "/v1/completions", {{"prompt", p}});
    const Reply second = Send(o, "/v1/completions", {{"prompt", p}});
    return {{"first_ttft_ms", first.ttft_ms},         {"second_ttft_ms", second.ttft_ms},
            {"second_cached", second.cached},         {"ratio", second.ttft_ms / first.ttft_ms},
            {"same_text", first.text == second.text}, {"ok", first.ok && second.ok}};
  }
  if (o.scenario == "chat") {
    json out;
    for (bool cache : {true, false}) {
      json messages =
          json::array({{{"role", "system"}, {"content", Words(o.prompt_tokens, seed)}}});
      double ttft = 0;
      int64_t cached = 0;
      for (int t = 0; t < o.turns; ++t) {
        messages.push_back({{"role", "user"}, {"content", Words(40, seed + t + 1)}});
        const Reply r =
            Send(o, "/v1/chat/completions", {{"messages", messages}, {"cache_prompt", cache}});
        ttft += r.ttft_ms, cached += r.cached;
        messages.push_back({{"role", "assistant"}, {"content", r.text}});
      }
      out[cache ? "on" : "off"] = {{"ttft_ms_total", ttft}, {"cached_tokens", cached}};
    }
    out["ratio"] =
        out["on"]["ttft_ms_total"].get<double>() / out["off"]["ttft_ms_total"].get<double>();
    return out;
  }
  json out;
  for (bool cache : {true, false}) {
    const std::vector<int> system = Tokens(o.prompt_tokens, seed + cache, o.vocab);
    std::vector<json> bodies;
    for (int c = 0; c < o.clients; ++c) {
      std::vector<int> p = o.scenario == "shared"
                               ? system
                               : Tokens(o.prompt_tokens, seed + 100 + c + 50 * cache, o.vocab);
      const std::vector<int> tail = Tokens(50, seed + 10 + c + 50 * cache, o.vocab);
      p.insert(p.end(), tail.begin(), tail.end());
      bodies.push_back({{"prompt", p}, {"cache_prompt", cache}});
    }
    out[cache ? "on" : "off"] = Concurrent(o, bodies);
  }
  out["tok_per_s_ratio"] =
      out["on"]["tok_per_s"].get<double>() / out["off"]["tok_per_s"].get<double>();
  return out;
}

int Usage() {
  std::fprintf(stderr,
               "usage: prefix_bench [--host H] [--port P] --scenario "
               "repeat|chat|shared|unique|conversations "
               "[--prompt-tokens N] [--turns T] [--clients C] [--max-tokens M] [--rounds R] "
               "[--vocab V] [--shared-system 0|1] [--seed S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::map<std::string, int*> ints = {
      {"--port", &o.port},       {"--prompt-tokens", &o.prompt_tokens}, {"--turns", &o.turns},
      {"--clients", &o.clients}, {"--max-tokens", &o.max_tokens},       {"--rounds", &o.rounds},
      {"--vocab", &o.vocab},     {"--shared-system", &o.shared_system}, {"--seed", &o.seed}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--host")
      o.host = argv[i + 1];
    else if (a == "--scenario")
      o.scenario = argv[i + 1];
    else if (ints.count(a))
      *ints[a] = std::atoi(argv[i + 1]);
    else
      return Usage();
  }
  if (argc % 2 == 0 || o.vocab < 4 || o.rounds < 1) return Usage();
  for (int r = 0; r < o.rounds; ++r) {
    json j = Round(o, r);
    j["scenario"] = o.scenario;
    j["round"] = r;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
