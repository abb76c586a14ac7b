// serve_load: a closed-loop load generator for `rotor serve`.
//
//   serve_load --port 8080 --concurrency 16 --requests 64 --max-tokens 128
//
// Each of `concurrency` clients sends streaming /v1/completions requests back
// to back (prompts rotate through a fixed list; ignore_eos, so every request
// generates exactly --max-tokens) until `requests` have completed. Reports
// requests/s and generated tok/s over the wall time, time to first token
// (request sent -> first text chunk) and the gap between text chunks (per-token
// latency) at p50 and p99. Chunks carry whole characters, so a gap can span
// two tokens when one of them ends mid-character; the test prompts are ASCII.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* const kPrompts[] = {
    "Once upon a time",     "The little dog ran to the park and", "Tom and Lily",
    "One day, a bird flew", "She was very happy because",         "The sun was hot",
    "Mom said to the girl", "There was a big red ball in the",
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  int concurrency = 1;
  int requests = 16;
  int max_tokens = 128;
};

struct Sample {
  double ttft_ms = 0;
  std::vector<double> gaps_ms;
  int64_t tokens = 0;
  bool ok = false;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100 * (v.size() - 1) + 0.5));
  return v[i];
}

Sample OneRequest(const Options& o, int n) {
  Sample s;
  httplib::Client cli(o.host, o.port);
  cli.set_read_timeout(std::chrono::seconds(600));
  const json body = {{"prompt", kPrompts[n % std::size(kPrompts)]},
                     {"max_tokens", o.max_tokens},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  const Clock::time_point start = Clock::now();
  Clock::time_point last;
  bool first = true;
  std::string pending;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    pending.append(data, len);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json j = json::parse(event.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && j["usage"].is_object())
        s.tokens = j["usage"].value("completion_tokens", 0);
      if (!j.contains("choices") || j["choices"].empty() ||
          j["choices"][0].value("text", "").empty())
        continue;
      const Clock::time_point now = Clock::now();
      if (first) {
        s.ttft_ms = std::chrono::duration<double, std::milli>(now - start).count();
        first = false;
      } else {
        s.gaps_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
      }
      last = now;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  s.ok = cli.send(req, res, err) && res.status == 200 && s.tokens > 0;
  return s;
}

int Usage() {
  std::fprintf(stderr,
               "usage: serve_load [--host H] [--port P] [--concurrency C] [--requests N] "
               "[--max-tokens T]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    const char* v = argv[++i];
    if (a == "--host")
      o.host = v;
    else if (a == "--port")
      o.port = std::atoi(v);
    else if (a == "--concurrency")
      o.concurrency = std::atoi(v);
    else if (a == "--requests")
      o.requests = std::atoi(v);
    else if (a == "--max-tokens")
      o.max_tokens = std::atoi(v);
    else
      return Usage();
  }
  if (o.concurrency < 1 || o.requests < 1 || o.max_tokens < 1) return Usage();
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<Sample> samples;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.concurrency; ++c) {
    clients.emplace_back([&] {
      for (int n; (n = next.fetch_add(1)) < o.requests;) {
        Sample s = OneRequest(o, n);
        std::lock_guard<std::mutex> lock(mu);
        samples.push_back(std::move(s));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  int ok = 0;
  int64_t tokens = 0;
  std::vector<double> ttft, gaps;
  for (const Sample& s : samples) {
    if (!s.ok) continue;
    ++ok;
    tokens += s.tokens;
    ttft.push_back(s.ttft_ms);
    gaps.insert(gaps.end(), s.gaps_ms.begin(), s.gaps_ms.end());
  }
  const json out = {{"concurrency", o.concurrency},
                    {"requests", o.requests},
                    {"ok", ok},
                    {"max_tokens", o.max_tokens},
                    {"wall_s", wall},
                    {"requests_per_s", ok / wall},
                    {"generated_tok_per_s", tokens / wall},
                    {"ttft_ms_p50", Percentile(ttft, 50)},
                    {"ttft_ms_p99", Percentile(ttft, 99)},
                    {"token_ms_p50", Percentile(gaps, 50)},
                    {"token_ms_p99", Percentile(gaps, 99)}};
  std::printf("%s\n", out.dump().c_str());
  return ok == o.requests ? 0 : 1;
}
