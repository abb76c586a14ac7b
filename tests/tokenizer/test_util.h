// Shared fixtures for the tokenizer tests: the real vocabularies (loaded once),
// llama.cpp's test vectors and a tiny in-memory SPM vocabulary.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace rotor::testing {

// Invalid or truncated UTF-8 that every tokenizer must round-trip without
// crashing: stray continuation bytes, cut sequences, overlong and surrogate
// forms, a 5-byte lead, an embedded NUL.
inline std::vector<std::string> InvalidUtf8Samples() {
  return {"\xFF",         "\xFF\xFE",         "\x80\x80",      "a\xC3",
          "\xE2\x96",     "\xF0\x9F\xA6",     "\xC3(",        "\xF8\x88\x80\x80\x80",
          std::string("a\0b", 3), "\xED\xA0\x80", "\xC0\xAF"};
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Loads a tokenizer from a GGUF file once per process; nullptr (and a test
// failure) if it cannot be read.
inline const Tokenizer* LoadTokenizer(const std::string& path) {
  static std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> cache;
  for (auto& [p, t] : cache) {
    if (p == path) return t.get();
  }
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) {
    ADD_FAILURE() << file.message();
    return nullptr;
  }
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << tok.message();
    return nullptr;
  }
  cache.emplace_back(path, std::move(tok).value());
  return cache.back().second.get();
}

// llama.cpp's tokenizer test vectors: the .inp file holds the strings, each
// followed by "\n__ggml_vocab_test__\n" (so the file ends with one); the .out
// file one line of space-separated ids per string (no BOS).
struct VocabTestCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::vector<VocabTestCase> LoadVocabTestCases(const std::string& base) {
  const std::string inp = ReadFileBytes(base + ".inp");
  const std::string out = ReadFileBytes(base + ".out");
  constexpr std::string_view kSep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t start = 0;
  for (size_t pos; (pos = inp.find(kSep, start)) != std::string::npos; start = pos + kSep.size()) {
    texts.push_back(inp.substr(start, pos - start));
  }
  EXPECT_EQ(start, inp.size()) << "text after the last separator";

  std::vector<std::vector<int32_t>> lines;
  start = 0;
  for (size_t pos; (pos = out.find('\n', start)) != std::string::npos; start = pos + 1) {
    std::vector<int32_t> ids;
    std::istringstream line(out.substr(start, pos - start));
    for (int32_t id; line >> id;) ids.push_back(id);
    lines.push_back(std::move(ids));
  }
  EXPECT_EQ(start, out.size()) << "no newline at the end of " << base << ".out";
  EXPECT_EQ(texts.size(), lines.size());
  std::vector<VocabTestCase> cases;
  for (size_t i = 0; i < texts.size() && i < lines.size(); ++i) {
    cases.push_back({texts[i], lines[i]});
  }
  return cases;
}

inline const Tokenizer* LlamaSpm() {
  return LoadTokenizer(std::string(ROTOR_MODELS_DIR) + "/ggml-vocab-llama-spm.gguf");
}
inline const Tokenizer* Gpt2() {
  return LoadTokenizer(std::string(ROTOR_TESTDATA_DIR) + "/ggml-vocab-gpt-2.gguf");
}
// A tokenizer from the keys a writer holds (in memory, no file).
inline Result<std::unique_ptr<Tokenizer>> TokenizerFrom(const GgufWriter& w) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, w.WriteToBytes());
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::FromBytes(std::move(bytes)));
  return Tokenizer::FromGguf(*file);
}

// A synthetic byte-level BPE vocabulary: the GPT-2 file's keys with
// tokenizer.ggml.pre set to `pre` (unless empty: then removed) and `extra`
// tokens appended after its 50257 (ids 50257, 50258, ...). BOS/EOS keys stay
// 50256 unless the test sets them.
inline GgufWriter Gpt2Based(std::string_view pre,
                            const std::vector<std::pair<std::string, TokenType>>& extra = {}) {
  GgufWriter w;
  Result<std::unique_ptr<GgufFile>> src =
      GgufFile::Open(std::string(ROTOR_TESTDATA_DIR) + "/ggml-vocab-gpt-2.gguf");
  if (!src.ok()) {
    ADD_FAILURE() << src.message();
    return w;
  }
  w.CopyMetadata(**src);
  if (pre.empty()) {
    w.Remove("tokenizer.ggml.pre");
  } else {
    w.SetString("tokenizer.ggml.pre", pre);
  }
  if (!extra.empty()) {
    Result<std::vector<std::string>> src_tokens = (*src)->GetStringArray("tokenizer.ggml.tokens");
    Result<std::vector<int64_t>> src_types = (*src)->GetIntArray("tokenizer.ggml.token_type");
    if (!src_tokens.ok() || !src_types.ok()) {
      ADD_FAILURE() << "ggml-vocab-gpt-2.gguf: no tokens or token types";
      return w;
    }
    std::vector<std::string> tokens = std::move(src_tokens).value();
    std::vector<int32_t> types(src_types->begin(), src_types->end());
    for (const auto& [text, type] : extra) {
      tokens.push_back(text);
      types.push_back(static_cast<int32_t>(type));
    }
    w.SetStringArray("tokenizer.ggml.tokens", tokens);
    w.SetI32Array("tokenizer.ggml.token_type", types);
  }
  return w;
}

inline const Tokenizer* Stories260K() {
  return LoadTokenizer(std::string(ROTOR_MODELS_DIR) + "/stories260K.gguf");
}

// <unk> <s> </s>, the 256 byte tokens (ids 3..258, as in Llama-2), then the
// given normal tokens with their scores.
inline Vocab TinyVocab(const std::vector<std::pair<std::string, float>>& normal) {
  Vocab v;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  v.scores = {0, 0, 0};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    v.types.push_back(TokenType::kByte);
    v.scores.push_back(0);
  }
  for (const auto& [text, score] : normal) {
    v.tokens.push_back(text);
    v.types.push_back(TokenType::kNormal);
    v.scores.push_back(score);
  }
  return v;
}

inline constexpr int32_t kTinyFirstNormal = 259;

}  // namespace rotor::testing
