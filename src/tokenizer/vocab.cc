#include "tokenizer/vocab.h"

#include <limits>
#include <utility>

#include "base/log.h"
#include "gguf/gguf.h"
#include "tokenizer/pre_tokenizer.h"

namespace rotor {

namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";

Status CheckModel(const Vocab& vocab) {
  if (vocab.model == kSpmModelName) return Status::Ok();
  if (vocab.model != kBpeModelName) {
    return Errorf("tokenizer: {} '{}' is not supported (supported: '{}', '{}')", kKeyModel,
                  vocab.model, kSpmModelName, kBpeModelName);
  }
  if (FindPreTokenizer(vocab.pre) == nullptr) {
    return Errorf("tokenizer: {} '{}' is not supported (supported: {})", kKeyPre, vocab.pre,
                  SupportedPreTokenizers());
  }
  return Status::Ok();
}

Status CheckSpecialId(std::string_view name, int32_t id, size_t n_vocab) {
  if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n_vocab)) {
    return Errorf("tokenizer: {} id {} is out of range (n_vocab {})", name, id, n_vocab);
  }
  return Status::Ok();
}

// Reads an optional special-token id. Absent, or -1 (often stored as the u32
// 4294967295, e.g. stories260K's padding id): `def`, or -1 if `def` is not a
// valid id of this vocabulary. Otherwise it must be a valid id.
Result<int32_t> ReadSpecialId(const GgufFile& file, std::string_view key, int32_t def,
                              size_t n_vocab) {
  const int32_t absent = def >= 0 && static_cast<size_t>(def) < n_vocab ? def : -1;
  if (!file.Has(key)) return absent;
  Result<int64_t> v = file.GetInt(key);
  if (!v.ok()) return v.status().WithContext("tokenizer");
  if (*v == -1 || *v == int64_t{0xFFFFFFFF}) return absent;
  if (*v < 0 || static_cast<uint64_t>(*v) >= n_vocab) {
    return Errorf("tokenizer: {} = {} is out of range (n_vocab {})", key, *v, n_vocab);
  }
  return static_cast<int32_t>(*v);
}

Result<bool> ReadFlag(const GgufFile& file, std::string_view key, bool def) {
  Result<bool> v = file.GetBoolOr(key, def);
  if (!v.ok()) return v.status().WithContext("tokenizer");
  return *v;
}

}  // namespace

std::string_view TokenTypeName(TokenType type) {
  switch (type) {
    case TokenType::kUndefined:
      return "undefined";
    case TokenType::kNormal:
      return "normal";
    case TokenType::kUnknown:
      return "unknown";
    case TokenType::kControl:
      return "control";
    case TokenType::kUserDefined:
      return "user-defined";
    case TokenType::kUnused:
      return "unused";
    case TokenType::kByte:
      return "byte";
  }
  return "invalid";
}

Status ValidateVocab(const Vocab& vocab) {
  RETURN_IF_ERROR(CheckModel(vocab));
  const size_t n = vocab.tokens.size();
  if (n == 0) return Errorf("tokenizer: {} is empty", kKeyTokens);
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Errorf("tokenizer: {} has {} entries, more than int32 ids can address", kKeyTokens, n);
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return Errorf("tokenizer: {} has {} entries but {} has {}", kKeyScores, vocab.scores.size(),
                  kKeyTokens, n);
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return Errorf("tokenizer: {} has {} entries but {} has {}", kKeyTypes, vocab.types.size(),
                  kKeyTokens, n);
  }
  for (size_t i = 0; i < vocab.types.size(); ++i) {
    const auto t = static_cast<int32_t>(vocab.types[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      return Errorf("tokenizer: {}[{}] = {} is not a token type (0..6)", kKeyTypes, i, t);
    }
    if (vocab.types[i] == TokenType::kByte && ParseByteToken(vocab.tokens[i]) < 0) {
      return Errorf("tokenizer: token {} '{}' has type byte but is not of the form <0xNN>", i,
                    vocab.tokens[i]);
    }
  }
  RETURN_IF_ERROR(CheckSpecialId("bos", vocab.bos, n));
  RETURN_IF_ERROR(CheckSpecialId("eos", vocab.eos, n));
  RETURN_IF_ERROR(CheckSpecialId("unknown", vocab.unk, n));
  RETURN_IF_ERROR(CheckSpecialId("padding", vocab.pad, n));
  RETURN_IF_ERROR(CheckSpecialId("eot", vocab.eot, n));
  RETURN_IF_ERROR(CheckSpecialId("eom", vocab.eom, n));
  return Status::Ok();
}

Result<Vocab> VocabFromGguf(const GgufFile& file) {
  Vocab vocab;
  if (!file.Has(kKeyModel)) return Errorf("tokenizer: missing key {}", kKeyModel);
  {
    Result<std::string> model = file.GetString(kKeyModel);
    if (!model.ok()) return model.status().WithContext("tokenizer");
    vocab.model = std::move(model).value();
  }
  const bool bpe = vocab.model == kBpeModelName;
  if (bpe) {
    if (file.Has(kKeyPre)) {
      Result<std::string> pre = file.GetString(kKeyPre);
      if (!pre.ok()) return pre.status().WithContext("tokenizer");
      vocab.pre = std::move(pre).value();
    } else {
      Log(LogLevel::kWarn, "tokenizer: {} is missing; using the '{}' pre-tokenizer", kKeyPre,
          kDefaultPreTokenizer);
      vocab.pre = kDefaultPreTokenizer;
    }
    if (!file.Has(kKeyMerges)) return Errorf("tokenizer: missing key {}", kKeyMerges);
    Result<std::vector<std::string>> merges = file.GetStringArray(kKeyMerges);
    if (!merges.ok()) return merges.status().WithContext("tokenizer");
    vocab.merges = std::move(merges).value();
  }
  RETURN_IF_ERROR(CheckModel(vocab));

  if (!file.Has(kKeyTokens)) return Errorf("tokenizer: missing key {}", kKeyTokens);
  {
    Result<std::vector<std::string>> tokens = file.GetStringArray(kKeyTokens);
    if (!tokens.ok()) return tokens.status().WithContext("tokenizer");
    vocab.tokens = std::move(tokens).value();
  }
  const size_t n = vocab.tokens.size();

  // Scores and types are optional in llama.cpp (0 and normal when absent).
  if (file.Has(kKeyScores)) {
    Result<std::vector<float>> scores = file.GetFloatArray(kKeyScores);
    if (!scores.ok()) return scores.status().WithContext("tokenizer");
    vocab.scores = std::move(scores).value();
    if (vocab.scores.size() != n) {
      return Errorf("tokenizer: {} has {} entries but {} has {}", kKeyScores, vocab.scores.size(),
                    kKeyTokens, n);
    }
  }
  if (file.Has(kKeyTypes)) {
    Result<std::vector<int64_t>> types = file.GetIntArray(kKeyTypes);
    if (!types.ok()) return types.status().WithContext("tokenizer");
    if (types->size() != n) {
      return Errorf("tokenizer: {} has {} entries but {} has {}", kKeyTypes, types->size(),
                    kKeyTokens, n);
    }
    vocab.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > static_cast<int64_t>(TokenType::kByte)) {
        return Errorf("tokenizer: {}[{}] = {} is not a token type (0..6)", kKeyTypes, i, t);
      }
      vocab.types.push_back(static_cast<TokenType>(t));
    }
  }

  // llama.cpp's defaults for absent ids differ by model.
  ASSIGN_OR_RETURN(vocab.bos, ReadSpecialId(file, "tokenizer.ggml.bos_token_id", bpe ? 11 : 1, n));
  ASSIGN_OR_RETURN(vocab.eos, ReadSpecialId(file, "tokenizer.ggml.eos_token_id", bpe ? 11 : 2, n));
  ASSIGN_OR_RETURN(vocab.unk,
                   ReadSpecialId(file, "tokenizer.ggml.unknown_token_id", bpe ? -1 : 0, n));
  ASSIGN_OR_RETURN(vocab.eot, ReadSpecialId(file, "tokenizer.ggml.eot_token_id", -1, n));
  ASSIGN_OR_RETURN(vocab.eom, ReadSpecialId(file, "tokenizer.ggml.eom_token_id", -1, n));
  {
    // Converted files sometimes carry a padding id one past the vocabulary;
    // padding is never produced by the tokenizer, so (like llama.cpp) warn and
    // drop it rather than refuse the model.
    constexpr std::string_view kKeyPad = "tokenizer.ggml.padding_token_id";
    Result<int32_t> pad = ReadSpecialId(file, kKeyPad, -1, n);
    if (pad.ok()) {
      vocab.pad = *pad;
    } else {
      Log(LogLevel::kWarn, "{}; ignoring it", pad.message());
      vocab.pad = -1;
    }
  }
  const bool add_bos_default = !bpe || FindPreTokenizer(vocab.pre)->add_bos;
  ASSIGN_OR_RETURN(vocab.add_bos, ReadFlag(file, "tokenizer.ggml.add_bos_token", add_bos_default));
  ASSIGN_OR_RETURN(vocab.add_eos, ReadFlag(file, "tokenizer.ggml.add_eos_token", false));
  ASSIGN_OR_RETURN(vocab.add_space_prefix, ReadFlag(file, "tokenizer.ggml.add_space_prefix", !bpe));

  RETURN_IF_ERROR(ValidateVocab(vocab));
  return vocab;
}

int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'A' && c <= 'F')
      digit = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else
      return -1;
    value = value * 16 + digit;
  }
  return value;
}

TokenIndex::TokenIndex(const std::vector<std::string>& tokens) {
  map_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) map_[tokens[i]] = static_cast<int32_t>(i);
}

}  // namespace rotor
