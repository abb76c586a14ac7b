#include "server/fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "base/json_depth.h"
#include "kv_args/kv_args.h"
#include "sampling/sampler.h"

namespace rotor::serve {
namespace {

constexpr uint8_t kApi = kCompletionsFields | kChatFields;
constexpr uint8_t kAll = kApi | kPromptsFileFields;
constexpr uint8_t kCmpl = kCompletionsFields;
constexpr uint8_t kChat = kChatFields;

constexpr KnownField kFields[] = {
    // OpenAI fields rotor acts on.
    {"model", kApi},
    {"prompt", kCmpl | kPromptsFileFields},
    {"messages", kChat},
    {"max_tokens", kAll},
    {"max_completion_tokens", kChat},
    {"temperature", kAll},
    {"top_p", kAll},
    {"presence_penalty", kAll},
    {"frequency_penalty", kAll},
    {"seed", kAll},
    {"stop", kAll},
    {"stream", kApi},
    {"stream_options", kApi},
    {"n", kApi},
    {"best_of", kCmpl},  // only equal to n
    {"echo", kCmpl},
    {"logprobs", kApi},
    {"top_logprobs", kChat},
    {"logit_bias", kAll},
    {"response_format", kApi},
    // OpenAI fields rotor accepts and ignores.
    {"user", kApi, true},
    {"metadata", kApi, true},
    {"store", kApi, true},
    {"service_tier", kApi, true},
    {"modalities", kChat, true},
    {"audio", kChat, true},
    {"prediction", kChat, true},
    {"reasoning_effort", kChat, true},
    {"web_search_options", kChat, true},
    {"suffix", kCmpl, false, "\"\"", "fill-in-the-middle (suffix)"},
    {"verbosity", kChat, true},
    {"prompt_cache_key", kApi, true},
    {"prompt_cache_retention", kApi, true},
    {"safety_identifier", kApi, true},
    // Tool calls (tool_calls.h); the deprecated functions API is ignored.
    {"tools", kChat},
    {"tool_choice", kChat},
    {"parallel_tool_calls", kChat},
    {"functions", kChat, true},
    {"function_call", kChat, true},
    // llama-server extensions rotor supports.
    {"top_k", kAll},
    {"min_p", kAll},
    {"repeat_penalty", kAll},
    {"repeat_last_n", kAll},
    {"ignore_eos", kAll},
    {"cache_prompt", kApi},
    {"grammar", kAll},
    {"json_schema", kAll},
    {"n_predict", kAll},
    // llama-server fields rotor accepts and ignores: progress and timing
    // extras it does not send, the slot (the prefix cache finds a request's
    // blocks wherever they are), the sampler order (rotor's is fixed), and
    // the split of a reasoning model's thinking from its answer (the reply
    // keeps both in its content). The llama.cpp web page sends most of them.
    {"return_progress", kApi, true},
    {"timings_per_token", kApi, true},
    {"id_slot", kApi, true},
    {"samplers", kApi, true},
    {"reasoning_format", kChat, true},
    // llama-server samplers rotor does not have: accepted at the value that
    // turns them off, and their parameters with them.
    {"mirostat", kApi, false, "0", "mirostat"},
    {"mirostat_tau", kApi, true},
    {"mirostat_eta", kApi, true},
    {"typical_p", kApi, false, "1", "locally typical sampling"},
    {"typ_p", kApi, false, "1", "locally typical sampling"},
    {"xtc_probability", kApi, false, "0", "XTC"},
    {"xtc_threshold", kApi, true},
    {"dry_multiplier", kApi, false, "0", "DRY"},
    {"dry_base", kApi, true},
    {"dry_allowed_length", kApi, true},
    {"dry_penalty_last_n", kApi, true},
    {"dry_sequence_breakers", kApi, true},
    {"dynatemp_range", kApi, false, "0", "dynamic temperature"},
    {"dynatemp_exponent", kApi, true},
    {"top_n_sigma", kApi, false, "-1", "top-n-sigma"},
    {"n_probs", kApi, false, "0", "n_probs (use logprobs and top_logprobs)"},
    {"post_sampling_probs", kApi, false, "false", "post-sampling probabilities"},
    // rotor generate --prompts extras.
    {"id", kPromptsFileFields},
    {"temp", kPromptsFileFields},
};

// Levenshtein distance (names are short).
size_t Distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// The error for `key`, with the nearest of `names` if close (at most a third
// of the key's letters differ).
UnknownField Unknown(const std::string& key, std::span<const std::string_view> names) {
  std::string_view best;
  size_t best_d = std::max<size_t>(1, key.size() / 3) + 1;
  for (const std::string_view name : names) {
    const size_t d = Distance(key, name);
    if (d < best_d) {
      best_d = d;
      best = name;
    }
  }
  std::string message = fmt::format("unknown field '{}'", key);
  if (!best.empty()) message += fmt::format(" (did you mean '{}'?)", best);
  return UnknownField{key, std::move(message)};
}

}  // namespace

std::span<const KnownField> KnownFields() { return kFields; }

std::optional<UnknownField> FindUnknownField(const nlohmann::json& object, FieldSet set) {
  if (!object.is_object()) return std::nullopt;
  for (const auto& item : object.items()) {
    // A plain reference, not a structured binding: clang 14 (the fuzz build)
    // cannot capture those in a lambda.
    const std::string& key = item.key();
    if (cli::IsKvField(key)) continue;
    const auto field =
        std::find_if(std::begin(kFields), std::end(kFields),
                     [&](const KnownField& f) { return f.name == key && (f.sets & set) != 0; });
    if (field != std::end(kFields)) {
      if (field->only.empty() || item.value().is_null() ||
          item.value() == nlohmann::json::parse(field->only))
        continue;
      return UnknownField{key, fmt::format("field '{}': rotor has no {}; only {} (off) or null "
                                           "is accepted",
                                           key, field->what, field->only)};
    }
    std::vector<std::string_view> names;
    for (const KnownField& f : kFields)
      if ((f.sets & set) != 0) names.push_back(f.name);
    return Unknown(key, names);
  }
  return std::nullopt;
}

std::optional<UnknownField> FindUnknownField(const nlohmann::json& object,
                                             std::span<const std::string_view> known) {
  if (!object.is_object()) return std::nullopt;
  for (const auto& item : object.items())
    if (std::find(known.begin(), known.end(), item.key()) == known.end())
      return Unknown(item.key(), known);
  return std::nullopt;
}

std::string IntegerAsFloat(const nlohmann::json& v, int64_t lo, int64_t hi) {
  const double d = v.get<double>();
  if (d != std::floor(d)) return fmt::format("must be an integer, not {}", v.dump());
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)))
    return fmt::format("{} is out of range [{}, {}]", v.dump(), lo, hi);
  return fmt::format("must be an integer, not {} (write it without a decimal point or exponent)",
                     v.dump());
}

const char* TypeName(const nlohmann::json& v) {
  using T = nlohmann::json::value_t;
  switch (v.type()) {
    case T::null:
      return "null";
    case T::boolean:
      return "a boolean";
    case T::string:
      return "a string";
    case T::array:
      return "an array";
    case T::object:
      return "an object";
    case T::number_float:
      return "a non-integer number";
    default:
      return "a number";
  }
}

std::optional<std::string> IntegerError(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (v.is_number_float()) return IntegerAsFloat(v, lo, hi);  // 1e12, 5.0, 5.5
  if (!v.is_number_integer()) return fmt::format("must be an integer, not {}", TypeName(v));
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                  (lo <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(lo))
                            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in_range) return fmt::format("{} is out of range [{}, {}]", v.dump(), lo, hi);
  return std::nullopt;
}

std::optional<std::string> ReadSeed(const nlohmann::json& v, uint64_t* seed) {
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() == -1) {
    *seed = kRandomSeed;
  } else if (v.is_number_unsigned()) {
    *seed = v.get<uint64_t>();
  } else {
    return fmt::format("must be {}, not {}", kSeedRule, v.dump());
  }
  return std::nullopt;
}

std::string JsonErrorText(const nlohmann::json::exception& e) {
  const std::string_view what = e.what();
  const size_t cut = what.starts_with("[json.exception.") ? what.find("] ") : std::string::npos;
  return std::string(cut == std::string::npos ? what : what.substr(cut + 2));
}

nlohmann::json ParseJson(std::string_view text, std::string* error) {
  if (const int depth = JsonNesting(text); depth > kMaxJsonNesting) {
    *error = fmt::format("arrays and objects nested {} deep, more than the {} allowed", depth,
                         kMaxJsonNesting);
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    *error = JsonErrorText(e);
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

nlohmann::ordered_json ParseOrdered(std::string_view text, const nlohmann::json& body,
                                    std::initializer_list<const char*> keys) {
  if (!body.is_object()) return nullptr;
  for (const char* key : keys)
    if (body.contains(key))  // parsed before as `body`: no error, no depth to check
      return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  return nullptr;
}

const nlohmann::ordered_json* OrderedAt(const nlohmann::ordered_json& root,
                                        const std::vector<std::string>& path) {
  const nlohmann::ordered_json* at = &root;
  for (const std::string& step : path) {
    if (at->is_object()) {
      auto it = at->find(step);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      size_t i = 0;
      const auto [end, ec] = std::from_chars(step.data(), step.data() + step.size(), i);
      if (ec != std::errc() || end != step.data() + step.size() || i >= at->size()) return nullptr;
      at = &(*at)[i];
    } else {
      return nullptr;
    }
  }
  return at;
}

}  // namespace rotor::serve
