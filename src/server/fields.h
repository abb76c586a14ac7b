// The one table of request fields rotor knows: per endpoint (/v1/completions,
// /v1/chat/completions) and for `rotor generate --prompts` JSON lines. A field
// outside it is an error naming it (with the nearest known name when one is
// close); a known OpenAI field that rotor does not act on is listed as
// ignored, so that clients sending it keep working. The utility endpoints
// (/tokenize, /detokenize, /v1/embeddings) give their own list of names and get
// the same error.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rotor::serve {

// Where a field is known (a bit mask).
enum FieldSet : uint8_t {
  kCompletionsFields = 1,
  kChatFields = 2,
  kPromptsFileFields = 4,  // rotor generate --prompts lines
};

struct KnownField {
  std::string_view name;
  uint8_t sets;          // FieldSet bits
  bool ignored = false;  // accepted and ignored (documented in the README)
  // A sampler rotor does not have (llama-server's mirostat, XTC, ...):
  // accepted only at this value, JSON text, which turns it off.
  std::string_view only = {};
  std::string_view what = {};  // the sampler's name, for the error
};
// Every known field except the KV extensions (kv_args.h IsKvField, known in
// every set).
std::span<const KnownField> KnownFields();

struct UnknownField {
  std::string name;
  std::string message;  // "unknown field 'max_tokenz' (did you mean 'max_tokens'?)"
};
// The first key of `object` that `set` does not know, or that asks for a
// sampler rotor does not have (KnownField::only), if any.
std::optional<UnknownField> FindUnknownField(const nlohmann::json& object, FieldSet set);
// The first key of `object` not among `known`, if any (no KV fields either).
std::optional<UnknownField> FindUnknownField(const nlohmann::json& object,
                                             std::span<const std::string_view> known);

// Why a float (5.0, 1e12) is no value of an integer field in [lo, hi]: its
// value out of range, not an integer, or written as a float.
std::string IntegerAsFloat(const nlohmann::json& v, int64_t lo, int64_t hi);

// A value's kind for messages: "a string", "an array", "a non-integer number".
const char* TypeName(const nlohmann::json& v);

// Why `v` is no integer in [lo, hi] ("must be an integer, not a string",
// "70000 is out of range [0, 65535]", IntegerAsFloat's reasons), or nothing
// when it is one (nlohmann's get<int> would truncate 5.5 and wrap 2^40).
std::optional<std::string> IntegerError(const nlohmann::json& v, int64_t lo, int64_t hi);

// A "seed" field, read as `rotor generate -s` reads its flag: -1 draws a
// random seed (kRandomSeed), else an integer in [0, 2^64 - 1]. Sets *seed, or
// says why not.
std::optional<std::string> ReadSeed(const nlohmann::json& v, uint64_t* seed);

// nlohmann's message without its "[json.exception.type_error.302] " prefix:
// "type must be number, but is string".
std::string JsonErrorText(const nlohmann::json::exception& e);

// Parses `text`; when it is not JSON (or nests deeper than kMaxJsonNesting,
// base/json_depth.h), the result is discarded and *error says
// where and why ("parse error at line 1, column 16: syntax error while
// parsing object key - unexpected end of input; ...", "number overflow
// parsing '1e309'").
nlohmann::json ParseJson(std::string_view text, std::string* error);

// A request's JSON Schemas keep the order their client wrote their keys in
// (the output grammar writes an object's properties in that order), which
// nlohmann::json, a sorted map, loses: the body parsed once more in order
// (only when it holds a schema: `keys` at its top level), and a path in it.
nlohmann::ordered_json ParseOrdered(std::string_view text, const nlohmann::json& body,
                                    std::initializer_list<const char*> keys);
// The value at `path` (object keys, or array indices as decimal text), or
// nullptr when there is none.
const nlohmann::ordered_json* OrderedAt(const nlohmann::ordered_json& root,
                                        const std::vector<std::string>& path);

}  // namespace rotor::serve
