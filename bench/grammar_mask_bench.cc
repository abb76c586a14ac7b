// The grammar mask of a vocabulary (GPT-2's 50,257 tokens): one walk over the
// trie of its token texts (Matcher::AllowedTokens, what sampling uses) against
// Accepts() of every token's text (what it did before), from the same matcher
// state, in one run; and the trie's construction.
//
//   build/bench/grammar_mask_bench [--benchmark_filter=Enum]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace {

using rotor::grammar::Matcher;
using rotor::grammar::TokenTrie;

struct Vocab {
  std::unique_ptr<rotor::GgufFile> file;
  std::unique_ptr<rotor::Tokenizer> tok;
  std::vector<std::string_view> texts;  // [n_vocab] each token's piece
};

const Vocab& Gpt2() {
  static const Vocab v = [] {
    Vocab out;
    auto file = rotor::GgufFile::Open(ROTOR_TESTDATA_DIR "/ggml-vocab-gpt-2.gguf");
    if (!file.ok()) std::fprintf(stderr, "%s\n", file.message().c_str()), std::abort();
    auto tok = rotor::Tokenizer::FromGguf(**file);
    if (!tok.ok()) std::fprintf(stderr, "%s\n", tok.message().c_str()), std::abort();
    out.file = std::move(*file);
    out.tok = std::move(*tok);
    for (int32_t id = 0; id < out.tok->n_vocab(); ++id) out.texts.push_back(out.tok->PieceView(id));
    return out;
  }();
  return v;
}

// A matcher of `gbnf` after `prefix`.
Matcher At(const std::string& gbnf, std::string_view prefix) {
  auto g = rotor::grammar::ParseGrammar(gbnf);
  if (!g.ok()) std::fprintf(stderr, "%s\n", g.message().c_str()), std::abort();
  Matcher m(*g);
  if (!m.Accept(prefix)) std::fprintf(stderr, "prefix refused\n"), std::abort();
  return m;
}

std::string Schema(std::string_view json) {
  auto g = rotor::grammar::JsonSchemaToGrammar(json);
  if (!g.ok()) std::fprintf(stderr, "%s\n", g.message().c_str()), std::abort();
  return *g;
}

// An object of a 2,000-value string enum and an integer, inside the string.
Matcher EnumState() {
  std::mt19937 rng(5);
  std::string values;
  for (int i = 0; i < 2000; ++i) {
    std::string w;
    const int len = 4 + static_cast<int>(rng() % 9);
    for (int k = 0; k < len; ++k) w += static_cast<char>('a' + rng() % 26);
    values += (i ? ",\"" : "\"") + w + std::to_string(i) + "\"";
  }
  return At(Schema(R"({"type":"object","properties":{"name":{"enum":[)" + values +
                   R"(]},"n":{"type":"integer"}},"required":["name","n"]})"),
            R"({"name":")");
}

// An object of a string, an integer and an array of strings, inside the string.
Matcher OrdinaryState() {
  return At(Schema(R"({"type":"object","properties":{"title":{"type":"string"},)"
                   R"("year":{"type":"integer"},"tags":{"type":"array","items":)"
                   R"({"type":"string"}}},"required":["title","year","tags"]})"),
            R"({"title":")");
}

// 200 alternatives `[a-z]{16} "<i>"`, at the start: all open.
Matcher AlternativesState() {
  std::string g = "root ::= ";
  for (int i = 0; i < 200; ++i) g += (i ? " | " : "") + std::string("[a-z]{16} \"") +
                                     std::to_string(i) + "\"";
  return At(g, "");
}

void RunTrie(benchmark::State& state, const Matcher& m) {
  const Vocab& v = Gpt2();
  const TokenTrie trie(v.texts);
  std::vector<uint8_t> allowed(v.texts.size());
  for (auto _ : state) {
    m.AllowedTokens(trie, allowed);
    benchmark::DoNotOptimize(allowed.data());
  }
  state.counters["allowed"] = static_cast<double>(std::count(allowed.begin(), allowed.end(), 1));
}

void RunPerToken(benchmark::State& state, const Matcher& m) {
  const Vocab& v = Gpt2();
  std::vector<uint8_t> allowed(v.texts.size());
  for (auto _ : state) {
    for (size_t id = 0; id < v.texts.size(); ++id)
      allowed[id] = !v.texts[id].empty() && m.Accepts(v.texts[id]);
    benchmark::DoNotOptimize(allowed.data());
  }
  state.counters["allowed"] = static_cast<double>(std::count(allowed.begin(), allowed.end(), 1));
}

void BM_Enum_Trie(benchmark::State& s) { RunTrie(s, EnumState()); }
void BM_Enum_PerToken(benchmark::State& s) { RunPerToken(s, EnumState()); }
void BM_Ordinary_Trie(benchmark::State& s) { RunTrie(s, OrdinaryState()); }
void BM_Ordinary_PerToken(benchmark::State& s) { RunPerToken(s, OrdinaryState()); }
void BM_Alternatives_Trie(benchmark::State& s) { RunTrie(s, AlternativesState()); }
void BM_Alternatives_PerToken(benchmark::State& s) { RunPerToken(s, AlternativesState()); }

void BM_TrieBuild(benchmark::State& state) {
  const Vocab& v = Gpt2();
  for (auto _ : state) {
    TokenTrie trie(v.texts);
    benchmark::DoNotOptimize(trie.nodes().data());
  }
}

BENCHMARK(BM_Enum_Trie)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Enum_PerToken)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Ordinary_Trie)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Ordinary_PerToken)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Alternatives_Trie)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Alternatives_PerToken)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrieBuild)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
