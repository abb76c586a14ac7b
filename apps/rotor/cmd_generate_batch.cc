// rotor generate --prompts FILE --parallel P: many prompts decoded together,
// one JSON line per prompt on stdout as each finishes.
#include "cmd_generate_batch.h"

#include <fmt/format.h>

#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "base/memory.h"
#include "base/timer.h"
#include "cli_common.h"
#include "kv_args/kv_args.h"
#include "engine/scheduler.h"
#include "grammar/grammar.h"
#include "sampling/sampler.h"
#include "server/api.h"
#include "server/fields.h"

namespace rotor::cli {
namespace {

using nlohmann::json;

// A line of the prompts file: plain text, or a JSON object with "prompt" and
// per-prompt options overriding the command line's.
Result<SeqRequest> ParseLine(const std::string& line, int line_no,
                             const GenerateOptions& defaults) {
  SeqRequest r;
  r.options = defaults;
  if (line.empty() || line[0] != '{') {
    r.prompt = line;
    return r;
  }
  std::string why;
  json j = serve::ParseJson(line, &why);
  if (j.is_discarded()) return Errorf("--prompts line {}: not valid JSON: {}", line_no, why);
  if (!j.is_object()) return Errorf("--prompts line {}: not a JSON object", line_no);
  std::string field;  // the one being read, for a type error's message
  // An integer field's value in [lo, hi] (a float, even 5.0, or a value out
  // of range is an error; nlohmann's get<int> would truncate or wrap).
  auto integer = [](const json& v, int64_t lo, int64_t hi) {
    if (auto why = serve::IntegerError(v, lo, hi)) throw std::invalid_argument(*why);
    return static_cast<int>(v.get<int64_t>());
  };
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  try {
    if (!j.contains("prompt"))
      return Errorf("--prompts line {}: missing string field \"prompt\"", line_no);
    if (!j["prompt"].is_string())
      return Errorf("--prompts line {}: field \"prompt\" must be a string, not {}", line_no,
                    j["prompt"].dump());
    r.prompt = j["prompt"].get<std::string>();
    GenerateOptions& o = r.options;
    SamplingParams& p = o.sampling;
    // The fields the server's table (server/fields.h) knows for --prompts lines.
    if (auto unknown = serve::FindUnknownField(j, serve::kPromptsFileFields))
      return Errorf("--prompts line {}: {}", line_no, unknown->message);
    if (Status st = SetKvFields(j, &o.kv); !st.ok())
      return Errorf("--prompts line {}: {}", line_no, st.message());
    if (auto e = serve::ParseLogitBias(j.contains("logit_bias") ? j["logit_bias"] : json(),
                                       "logit_bias", &p.logit_bias))
      return Errorf("--prompts line {}: {}", line_no, e->message);
    for (auto& [key, v] : j.items()) {
      if (key == "prompt" || key == "id" || key == "logit_bias") continue;
      field = key;
      if (key == "n_predict" || key == "max_tokens")
        o.n_predict = integer(v, -1, kIntMax);
      else if (key == "temperature" || key == "temp")
        p.temperature = v.get<float>();
      else if (key == "top_k")
        p.top_k = integer(v, 0, kIntMax);
      else if (key == "top_p")
        p.top_p = v.get<float>();
      else if (key == "min_p")
        p.min_p = v.get<float>();
      else if (key == "repeat_penalty")
        p.repeat_penalty = v.get<float>();
      else if (key == "repeat_last_n")
        p.repeat_last_n = integer(v, -1, kIntMax);
      else if (key == "presence_penalty")
        p.presence_penalty = v.get<float>();
      else if (key == "frequency_penalty")
        p.frequency_penalty = v.get<float>();
      else if (key == "seed") {  // -1: a random seed, as on the command line
        if (auto why = serve::ReadSeed(v, &p.seed)) throw std::invalid_argument(*why);
      }
      else if (key == "stop")
        o.stop = v.is_string()  ? std::vector<std::string>{v.get<std::string>()}
                 : v.is_array() ? v.get<std::vector<std::string>>()
                                : throw std::invalid_argument(
                                      "must be a string or an array of strings, not " + v.dump());
      else if (key == "ignore_eos")
        o.ignore_eos = v.get<bool>();
      else if (key == "grammar" || key == "json_schema") {
        // GBNF text; a JSON Schema as an object (its keys in the line's
        // order: the grammar writes properties in it) or its text.
        std::string schema;
        if (key == "json_schema" && !v.is_string()) {
          const nlohmann::ordered_json ordered = serve::ParseOrdered(line, j, {"json_schema"});
          const nlohmann::ordered_json* in_order = serve::OrderedAt(ordered, {"json_schema"});
          schema = in_order ? in_order->dump() : v.dump();
        }
        Result<std::string> gbnf = key == "grammar" ? Result<std::string>(v.get<std::string>())
                                   : grammar::JsonSchemaToGrammar(
                                         v.is_string() ? v.get<std::string>() : schema);
        if (!gbnf.ok()) return Errorf("--prompts line {}: {}: {}", line_no, key, gbnf.message());
        auto g = grammar::ParseGrammar(*gbnf);
        if (!g.ok()) return Errorf("--prompts line {}: {}: {}", line_no, key, g.message());
        p.grammar = std::move(*g);
      }
      else if (!IsKvField(key))  // KV fields: set above, in the option table's order
        return Errorf("--prompts line {}: unknown field \"{}\"", line_no, key);
    }
  } catch (const json::exception& e) {
    return Errorf("--prompts line {}: field \"{}\": {}", line_no, field,
                  serve::JsonErrorText(e));
  } catch (const std::invalid_argument& e) {
    return Errorf("--prompts line {}: field \"{}\": {}", line_no, field, e.what());
  }
  return r;
}

}  // namespace

int RunGenerateBatch(const EngineOptions& engine_options, const GenerateOptions& defaults,
                     const std::string& prompts_file, int parallel, int prefill_step) {
  Result<std::string> text = ReadFile(prompts_file);
  if (!text.ok()) return Fail(text.status().WithContext("generate: --prompts"));
  std::vector<SeqRequest> requests;
  std::vector<int> line_of;  // [requests] line number in the file
  std::istringstream in(*text);
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    Result<SeqRequest> r = ParseLine(line, line_no, defaults);
    if (!r.ok()) return Fail(r.status());
    requests.push_back(std::move(*r));
    line_of.push_back(line_no);
  }
  if (requests.empty()) return Fail(Errorf("generate: --prompts {} holds no prompt", prompts_file));
  EngineOptions eo = engine_options;
  eo.max_seqs = parallel;
  Result<std::unique_ptr<Engine>> engine = Engine::Create(eo);
  if (!engine.ok()) return Fail(engine.status());
  // Every line is checked before any runs; KV options are named as JSON fields.
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].spelling = KvSpelling::kField;
    if (Status s = (*engine)->Validate(requests[i].options, KvSpelling::kField).status(); !s.ok())
      return Fail(Errorf("--prompts line {}: {}", line_of[i], s.message()));
  }
  Scheduler::Options so;
  so.max_seqs = parallel;
  so.prefill_step = prefill_step;
  so.max_queue = static_cast<int>(requests.size());
  Scheduler scheduler(**engine, so);
  const int64_t t0 = NowNs();
  int64_t total_tokens = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    Result<SeqId> id = scheduler.Add(std::move(requests[i]), [&, i](const SeqEvent& e) {
      if (!e.finished) return;
      const GenerateResult& r = *e.result;
      total_tokens += static_cast<int64_t>(r.tokens.size());
      json out = {{"id", i},
                  {"text", r.text},
                  {"tokens", r.tokens},
                  {"prompt_tokens", r.prompt_tokens.size()},
                  {"cached_tokens", r.cached_tokens},
                  {"finish_reason", FinishReasonName(r.finish)},
                  {"timings",
                   {{"prompt_ms", r.prompt_ns / 1e6},
                    {"gen_ms", r.gen_ns / 1e6},
                    {"gen_tps", r.gen_tps()}}}};
      if (r.finish == FinishReason::kError) out["error"] = r.error;
      fmt::print("{}\n", out.dump(-1, ' ', false, json::error_handler_t::replace));
      std::fflush(stdout);
    });
    if (!id.ok()) return Fail(id.status().WithContext(fmt::format("prompt {}", i)));
  }
  while (!scheduler.Idle()) {
    Status s = scheduler.Step();
    if (!s.ok()) return Fail(s);
  }
  const double secs = (NowNs() - t0) * 1e-9;
  fmt::print(stderr,
             "rotor: {} prompts, {} generated tokens in {:.2f} s ({:.1f} tok/s), {} in parallel | "
             "peak RSS {}\n",
             requests.size(), total_tokens, secs, total_tokens / secs, parallel,
             HumanBytes(PeakRssBytes()));
  return 0;
}

}  // namespace rotor::cli
