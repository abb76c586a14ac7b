// The vocabulary trie and the grammar mask that walks it: Matcher::
// AllowedTokens must equal Accepts() of every token's text, from any state
// (after whole characters or inside one), on random vocabularies of ASCII,
// multi-byte, invalid and repeated texts.
#include "grammar/token_trie.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace rotor::grammar {
namespace {

TEST(TokenTrie, PreorderWithSubtreeEndsAndIdRuns) {
  const std::vector<std::string_view> texts = {"a", "ab", "b", "", "ab"};
  const TokenTrie trie(texts);
  ASSERT_EQ(trie.nodes().size(), 3u);
  const auto n = trie.nodes();
  EXPECT_EQ(n[0].byte, 'a');
  EXPECT_EQ(n[0].depth, 1);
  EXPECT_EQ(n[0].end, 2u);
  EXPECT_EQ(n[1].byte, 'b');
  EXPECT_EQ(n[1].depth, 2);
  EXPECT_EQ(n[1].end, 2u);
  EXPECT_EQ(n[2].byte, 'b');
  EXPECT_EQ(n[2].end, 3u);
  auto ids = [&](int node) {
    return std::vector<int32_t>(trie.ids().begin() + n[node].ids_begin,
                                trie.ids().begin() + n[node].ids_end);
  };
  EXPECT_EQ(ids(0), (std::vector<int32_t>{0}));
  EXPECT_EQ(ids(1), (std::vector<int32_t>{1, 4}));  // the same text twice: one run
  EXPECT_EQ(ids(2), (std::vector<int32_t>{2}));
  EXPECT_EQ(trie.max_depth(), 2);
  EXPECT_EQ(trie.n_tokens(), 5);
}

std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> parts = {
      "a",  "b",  "z",  "k",  "N",    "0",    "7",    " ",        "  ",       "\n",
      "\"", "{",  "}",  ":",  ",",    "\t",   "ab",   "the",      "\xc3\xa9", "\xce\xb1",
      "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc3", "\xe2\x82", "\x80", "\xff", "\xf0\x9f"};
  std::string s;
  const int len = static_cast<int>(rng() % 4);
  for (int i = 0; i < len; ++i) s += parts[rng() % parts.size()];
  return s;
}

// A start too: the grammar may begin inside a character.
void ExpectMaskEqualsAccepts(const Matcher& m, const std::vector<std::string>& vocab,
                             const TokenTrie& trie, const std::string& where) {
  for (bool skip : {false, true}) {
    std::vector<uint8_t> allowed(vocab.size(), 7);
    ASSERT_TRUE(m.AllowedTokens(trie, allowed, skip));
    for (size_t id = 0; id < vocab.size(); ++id) {
      std::string_view text = vocab[id];
      if (skip) {
        const size_t first = text.find_first_not_of(" \t\n\r\f\v");
        text = first == std::string_view::npos ? std::string_view() : text.substr(first);
      }
      const bool want = !text.empty() && m.Accepts(text);
      if (vocab[id].empty()) {
        EXPECT_EQ(allowed[id], 7) << "an empty text is in no node";
        continue;
      }
      ASSERT_EQ(allowed[id] != 0, want)
          << where << " skip " << skip << " token " << id << " '" << vocab[id] << "'";
    }
  }
}

TEST(TokenTrie, MaskEqualsAcceptsOfEveryToken) {
  const char* grammars[] = {
      R"g(root ::= ("apple" | "apricot" | "banana" | "\u00e9t\u00e9" | "a" [a-z]* "N")+)g",
      R"g(root ::= "{" ws "\"k\"" ws ":" ws [0-9]+ ws "}"
          ws ::= [ \t\n]{0,3})g",
      R"g(root ::= [^"\\]* "\"" [\u0080-\U0010FFFF]+ [ab]?)g",
      R"g(root ::= ([a-z]{2} "N" | [a-z]{3} "0" | "\U0001F600"+ | "  " [a-z])*)g",
  };
  std::mt19937 rng(20261207);
  std::vector<std::string> vocab(3000);
  for (std::string& t : vocab) t = RandomText(rng);
  std::vector<std::string_view> views(vocab.begin(), vocab.end());
  const TokenTrie trie(views);
  for (const char* text : grammars) {
    auto g = ParseGrammar(text);
    ASSERT_TRUE(g.ok()) << g.status().message();
    Matcher m(*g);
    ExpectMaskEqualsAccepts(m, vocab, trie, std::string(text) + " at the start");
    std::vector<uint8_t> allowed(vocab.size());
    ASSERT_TRUE(m.AllowedTokens(trie, allowed));
    EXPECT_GT(std::count(allowed.begin(), allowed.end(), 1), 20) << text;  // a real test
    // Walk on by accepted tokens (some leave a character unfinished) and
    // compare at each state.
    for (int step = 0; step < 12 && !m.Done(); ++step) {
      std::vector<size_t> ok;
      for (size_t id = 0; id < vocab.size(); ++id)
        if (!vocab[id].empty() && m.Accepts(vocab[id])) ok.push_back(id);
      if (ok.empty()) break;
      ASSERT_TRUE(m.Accept(vocab[ok[rng() % ok.size()]]));
      ExpectMaskEqualsAccepts(m, vocab, trie, std::string(text) + " step " +
                                                  std::to_string(step));
    }
  }
}

// Past the matcher's limits the walk stops and says so, as Accepts does.
TEST(TokenTrie, MaskOfATooAmbiguousGrammarReportsTheOverflow) {
  auto g = ParseGrammar(R"g(root ::= x
x ::= "a" x y | "a" x z | "a"
y ::= "b"
z ::= "b")g");
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  const std::vector<std::string_view> texts = {std::string_view("aaaaaaaaaaaaaa")};  // 2^14 ways
  const TokenTrie trie(texts);
  std::vector<uint8_t> allowed(1);
  EXPECT_FALSE(m.AllowedTokens(trie, allowed));
  EXPECT_TRUE(m.overflowed());
}

}  // namespace
}  // namespace rotor::grammar
