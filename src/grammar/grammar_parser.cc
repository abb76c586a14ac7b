// GBNF -> Grammar. A recursive-descent parser over the text with one
// position; errors are turned into "line L, column C" from that position.
// After parsing: every referenced rule must be defined, `root` must exist and
// no rule may reach itself without consuming a character (left recursion,
// also through rules that can match nothing), since the matcher expands
// references eagerly and would never stop.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "grammar/grammar.h"

namespace rotor::grammar {
namespace {

// Repetition counts above this are refused: X{m,n} is expanded into m + n
// copies, so a huge count would be a huge grammar.
constexpr int kMaxRepeat = 1000;
// Nesting of parentheses: the parser recurses once per level.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<std::shared_ptr<const Grammar>> Parse();

 private:
  struct Error {
    size_t pos;
    std::string message;
  };
  struct RuleInfo {
    bool defined = false;
    size_t first_use = std::string_view::npos;  // position of the first reference
    size_t where = 0;                           // definition (or generating construct)
  };

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  [[noreturn]] void Fail(size_t pos, std::string message) { throw Error{pos, std::move(message)}; }
  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  // Spaces, tabs and comments; newlines too if `newlines`.
  void SkipSpace(bool newlines);
  // At the end of a top-level sequence: a following line that starts with
  // '|' continues the rule (a friendlier reading than llama.cpp's, which
  // needs parentheses for that).
  bool ContinuationFollows();
  std::string ParseName();
  int32_t RuleId(const std::string& name);
  int32_t NewRule(std::string base, size_t where);
  void ParseAlternatives(int32_t rule, bool nested, int depth);
  Alternative ParseSequence(int32_t rule, bool nested, int depth);
  uint32_t ParseChar(bool in_class);
  uint32_t DecodeUtf8();
  int ParseCount();
  void Repeat(Alternative* seq, size_t start, int min, int max, int32_t rule, size_t where);
  std::string DescribeEnd() const;
  void CheckLeftRecursion();

  std::string_view text_;
  size_t pos_ = 0;
  Grammar g_;
  std::vector<RuleInfo> info_;
  std::map<std::string, int32_t, std::less<>> ids_;
  std::map<std::string, int, std::less<>> last_suffix_;  // NewRule's, per base name
  // Repetitions' rules by their item (ElementKey): x* and the chain of x{0,k}.
  std::map<std::string, int32_t> stars_;
  std::map<std::string, std::vector<int32_t>> chains_;
};

// An element as bytes, equal for equal elements.
std::string ElementKey(const Element& e) {
  std::string k;
  auto put = [&k](uint32_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<uint32_t>(e.kind));
  put(e.negated ? 1 : 0);
  put(static_cast<uint32_t>(e.rule));
  for (const auto& [lo, hi] : e.ranges) put(lo), put(hi);
  return k;
}

void Parser::SkipSpace(bool newlines) {
  while (!AtEnd()) {
    const char c = Peek();
    if (c == ' ' || c == '\t') {
      ++pos_;
    } else if (c == '#') {
      while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
    } else if (newlines && (c == '\n' || c == '\r')) {
      ++pos_;
    } else {
      break;
    }
  }
}

bool Parser::ContinuationFollows() {
  size_t p = pos_;
  bool comment = false;
  for (; p < text_.size(); ++p) {
    const char c = text_[p];
    if (comment) {
      if (c == '\n') comment = false;
      continue;
    }
    if (c == '#') {
      comment = true;
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      break;
    }
  }
  if (p < text_.size() && text_[p] == '|') {
    pos_ = p;
    return true;
  }
  return false;
}

std::string Parser::ParseName() {
  const size_t start = pos_;
  while (!AtEnd() && IsNameChar(Peek())) ++pos_;
  if (pos_ == start) Fail(pos_, "expected a rule name, found " + DescribeEnd());
  return std::string(text_.substr(start, pos_ - start));
}

std::string Parser::DescribeEnd() const {
  if (AtEnd()) return "the end of the grammar";
  const char c = Peek();
  if (c == '\n' || c == '\r') return "the end of the line";
  if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
    return fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
  return fmt::format("'{}'", c);
}

int32_t Parser::RuleId(const std::string& name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(g_.rules.size());
  g_.rules.push_back(Rule{.name = name, .alternatives = {}});
  info_.emplace_back();
  ids_.emplace(name, id);
  return id;
}

int32_t Parser::NewRule(std::string base, size_t where) {
  // The first free "base-N", searched from the last one given (from 1 each
  // time, a rule of 20,000 optional items took 26 s to parse).
  int& i = last_suffix_[base];
  std::string name;
  do {
    name = fmt::format("{}-{}", base, ++i);
  } while (ids_.contains(name));
  const int32_t id = RuleId(name);
  info_[id].defined = true;
  info_[id].where = where;
  return id;
}

uint32_t Parser::DecodeUtf8() {
  const auto b0 = static_cast<unsigned char>(Peek());
  const size_t start = pos_;
  int n = 0;
  uint32_t cp = 0;
  if (b0 < 0x80) {
    ++pos_;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    n = 1, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3, cp = b0 & 0x07;
  } else {
    Fail(start, fmt::format("invalid UTF-8 byte 0x{:02x}", b0));
  }
  ++pos_;
  for (int i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(Peek());
    if (AtEnd() || (b & 0xC0) != 0x80) Fail(start, "invalid UTF-8 sequence");
    cp = (cp << 6) | (b & 0x3F);
    ++pos_;
  }
  if (cp > 0x10FFFF) Fail(start, "invalid UTF-8 sequence");
  return cp;
}

uint32_t Parser::ParseChar(bool in_class) {
  const size_t start = pos_;
  if (Peek() != '\\') {
    if (Peek() == '\n' || Peek() == '\r')
      Fail(start, in_class ? "unterminated character class '[' (a newline inside it)"
                           : "unterminated literal (a newline inside it)");
    return DecodeUtf8();
  }
  ++pos_;
  if (AtEnd()) Fail(start, "unfinished escape at the end of the grammar");
  const char e = Peek();
  ++pos_;
  int hex = 0;
  switch (e) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '^':
    case '\'':
    case '/':
      return static_cast<unsigned char>(e);
    case 'x':
      hex = 2;
      break;
    case 'u':
      hex = 4;
      break;
    case 'U':
      hex = 8;
      break;
    default:
      Fail(start, fmt::format("unknown escape '\\{}' (known: \\n \\r \\t \\\\ \\\" \\[ \\] "
                              "\\xHH \\uHHHH \\UHHHHHHHH)",
                              e));
  }
  uint32_t cp = 0;
  for (int i = 0; i < hex; ++i) {
    const char c = Peek();
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) Fail(start, fmt::format("escape '\\{}' needs {} hex digits", e, hex));
    cp = cp * 16 + static_cast<uint32_t>(d);
    ++pos_;
  }
  if (cp > 0x10FFFF) Fail(start, fmt::format("escape names U+{:X}, past U+10FFFF", cp));
  return cp;
}

int Parser::ParseCount() {
  const size_t start = pos_;
  int64_t v = 0;
  while (Peek() >= '0' && Peek() <= '9') {
    v = v * 10 + (Peek() - '0');
    if (v > kMaxRepeat)
      Fail(start, fmt::format("repetition count above the limit of {}", kMaxRepeat));
    ++pos_;
  }
  if (pos_ == start) return -1;
  return static_cast<int>(v);
}

// Replaces seq[start..] (one element or a literal's characters) S by
//   S S .. S (min times), then S* (max < 0) or up to max - min more optional S.
void Parser::Repeat(Alternative* seq, size_t start, int min, int max, int32_t rule, size_t where) {
  if (seq->size() == start) return;  // "" repeated matches nothing, as "" does
  const std::string base = g_.rules[rule].name;  // a copy: NewRule grows g_.rules
  // An item of several elements (a literal, a group's sequence) becomes a
  // rule of its own: copied per repetition, "abc...z"{1000} held 1000 copies
  // of every character.
  if (seq->size() - start > 1) {
    const int32_t r = NewRule(base, where);
    Alternative a(seq->begin() + static_cast<std::ptrdiff_t>(start), seq->end());
    a.push_back(Element{});
    g_.rules[r].alternatives = {std::move(a)};
    seq->resize(start);
    seq->push_back(Element{.kind = Element::Kind::kRef, .rule = r});
  }
  const Element item = seq->back();
  seq->resize(start);
  for (int i = 0; i < min; ++i) seq->push_back(item);
  if (max >= 0 && max == min) return;
  // rest ::= S rest | ""   (S*)   or a chain of  opt_k ::= S opt_k-1 | "",
  // shared by every repetition of the same item: opt_k is the same rule for
  // x{0,k} wherever it appears (each x{0,1000} of a rule made 1000 rules of
  // its own: 800 of them took 356 MB).
  const std::string key = ElementKey(item);
  auto rule_of = [&](int32_t tail) {
    const int32_t r = NewRule(base, where);
    Alternative a = {item};
    if (tail >= 0) a.push_back(Element{.kind = Element::Kind::kRef, .rule = tail});
    a.push_back(Element{});
    g_.rules[r].alternatives = {std::move(a), Alternative{Element{}}};
    return r;
  };
  int32_t ref = -1;
  if (max < 0) {
    auto [it, added] = stars_.try_emplace(key, -1);
    if (added) {
      it->second = NewRule(base, where);
      g_.rules[it->second].alternatives = {
          Alternative{item, Element{.kind = Element::Kind::kRef, .rule = it->second}, Element{}},
          Alternative{Element{}}};
    }
    ref = it->second;
  } else {
    std::vector<int32_t>& chain = chains_[key];  // chain[k - 1]: opt_k
    while (static_cast<int>(chain.size()) < max - min)
      chain.push_back(rule_of(chain.empty() ? -1 : chain.back()));
    ref = chain[max - min - 1];
  }
  seq->push_back(Element{.kind = Element::Kind::kRef, .rule = ref});
}

Alternative Parser::ParseSequence(int32_t rule, bool nested, int depth) {
  Alternative seq;
  size_t last_start = std::string::npos;  // where the last repeatable item begins
  for (;;) {
    const size_t at = pos_;
    const char c = Peek();
    if (AtEnd() || c == '|' || c == ')' || c == '\n' || c == '\r') break;
    if (c == '"') {
      ++pos_;
      last_start = seq.size();
      while (Peek() != '"') {
        if (AtEnd()) Fail(at, "unterminated literal '\"'");
        const uint32_t cp = ParseChar(false);
        seq.push_back(Element{.kind = Element::Kind::kChars, .ranges = {{cp, cp}}});
      }
      ++pos_;
    } else if (c == '[') {
      ++pos_;
      Element e{.kind = Element::Kind::kChars};
      if (Peek() == '^') {
        e.negated = true;
        ++pos_;
      }
      while (Peek() != ']') {
        if (AtEnd()) Fail(at, "unterminated character class '['");
        const uint32_t lo = ParseChar(true);
        uint32_t hi = lo;
        if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
          const size_t range_at = pos_;
          ++pos_;
          hi = ParseChar(true);
          if (hi < lo)
            Fail(range_at, fmt::format("character range U+{:04X}-U+{:04X} is reversed", lo, hi));
        }
        e.ranges.emplace_back(lo, hi);
      }
      ++pos_;
      last_start = seq.size();
      seq.push_back(std::move(e));
    } else if (c == '.') {
      ++pos_;
      last_start = seq.size();
      seq.push_back(Element{.kind = Element::Kind::kChars, .negated = true});
    } else if (IsNameChar(c)) {
      const std::string name = ParseName();
      const int32_t id = RuleId(name);
      if (info_[id].first_use == std::string_view::npos) info_[id].first_use = at;
      last_start = seq.size();
      seq.push_back(Element{.kind = Element::Kind::kRef, .rule = id});
    } else if (c == '(') {
      if (depth >= kMaxDepth) Fail(at, fmt::format("parentheses nested deeper than {}", kMaxDepth));
      ++pos_;
      SkipSpace(true);
      const int32_t group = NewRule(g_.rules[rule].name, at);
      ParseAlternatives(group, true, depth + 1);
      if (Peek() != ')') Fail(at, "unclosed '(': expected ')' before " + DescribeEnd());
      ++pos_;
      last_start = seq.size();
      seq.push_back(Element{.kind = Element::Kind::kRef, .rule = group});
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last_start == std::string::npos)
        Fail(at, fmt::format("'{}' has nothing before it to repeat", c));
      int min = 0, max = -1;
      ++pos_;
      if (c == '+') min = 1;
      if (c == '?') max = 1;
      if (c == '{') {
        SkipSpace(false);
        const int first = ParseCount();
        min = std::max(first, 0);
        SkipSpace(false);
        if (Peek() == ',') {
          ++pos_;
          SkipSpace(false);
          max = ParseCount();
          SkipSpace(false);
          if (first < 0 && max < 0) Fail(at, "'{,}' needs a count: {m}, {m,}, {m,n} or {,n}");
        } else {
          if (first < 0) Fail(at, "'{' needs a count: {m}, {m,}, {m,n} or {,n}");
          max = min;
        }
        if (Peek() != '}') Fail(at, "unclosed '{': expected '}' before " + DescribeEnd());
        ++pos_;
        if (max >= 0 && max < min)
          Fail(at, fmt::format("repetition {{{},{}}} has its maximum below its minimum", min, max));
      }
      Repeat(&seq, last_start, min, max, rule, at);
      last_start = std::string::npos;  // "a"** is an error, as in llama.cpp
    } else if (c == '<') {
      Fail(at, "token references ('<...>') are not supported");
    } else {
      Fail(at, "unexpected " + DescribeEnd());
    }
    SkipSpace(nested);
  }
  seq.push_back(Element{});
  return seq;
}

void Parser::ParseAlternatives(int32_t rule, bool nested, int depth) {
  // No reference into g_.rules is held: parsing adds rules (groups).
  Alternative first = ParseSequence(rule, nested, depth);
  g_.rules[rule].alternatives.push_back(std::move(first));
  for (;;) {
    if (Peek() != '|' && !(!nested && ContinuationFollows())) break;
    ++pos_;
    SkipSpace(true);
    Alternative a = ParseSequence(rule, nested, depth);
    g_.rules[rule].alternatives.push_back(std::move(a));
  }
}

// Left recursion: a rule that reaches itself through references that can be
// entered without consuming input (each earlier element of the sequence can
// match nothing).
void Parser::CheckLeftRecursion() {
  const size_t n = g_.rules.size();
  // Which rules can match nothing: an alternative of references only is
  // nullable once all of them are. A work list of the alternatives waiting on
  // each rule makes this linear; passes over every rule until none changed
  // were quadratic in a chain of such rules (64,000 of them, a 1 MB request:
  // 12.6 s).
  std::vector<char> nullable(n, 0);
  std::vector<int32_t> alt_rule, alt_left;       // [alternatives of references only]
  std::vector<std::vector<int32_t>> waiting(n);  // rule -> those alternatives, once a use
  std::vector<int32_t> todo;                     // rules found nullable, uses not counted
  for (size_t r = 0; r < n; ++r)
    for (const Alternative& a : g_.rules[r].alternatives) {
      int32_t refs = 0;
      bool chars = false;
      for (const Element& e : a) {
        if (e.kind == Element::Kind::kEnd) break;
        chars |= e.kind == Element::Kind::kChars;
        ++refs;
      }
      if (chars) continue;
      const auto id = static_cast<int32_t>(alt_rule.size());
      alt_rule.push_back(static_cast<int32_t>(r));
      alt_left.push_back(refs);
      for (const Element& e : a) {
        if (e.kind == Element::Kind::kEnd) break;
        waiting[e.rule].push_back(id);
      }
      if (refs == 0 && !nullable[r]) nullable[r] = 1, todo.push_back(static_cast<int32_t>(r));
    }
  while (!todo.empty()) {
    const int32_t x = todo.back();
    todo.pop_back();
    for (const int32_t id : waiting[x]) {
      const int32_t r = alt_rule[id];
      if (--alt_left[id] == 0 && !nullable[r]) nullable[r] = 1, todo.push_back(r);
    }
  }
  std::vector<std::vector<int32_t>> first(n);
  for (size_t r = 0; r < n; ++r)
    for (const Alternative& a : g_.rules[r].alternatives)
      for (const Element& e : a) {
        if (e.kind != Element::Kind::kRef) break;
        first[r].push_back(e.rule);
        if (!nullable[e.rule]) break;
      }
  // Iterative DFS with colours; on a back edge, report the cycle.
  std::vector<char> colour(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;
  for (size_t s = 0; s < n; ++s) {
    if (colour[s]) continue;
    path.push_back({static_cast<int32_t>(s), 0});
    colour[s] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == first[r].size()) {
        colour[r] = 2;
        path.pop_back();
        continue;
      }
      const int32_t next = first[r][i++];
      if (colour[next] == 1) {
        std::string cycle;
        bool in = false;
        for (const auto& [p, unused] : path) {
          in |= p == next;
          if (in) cycle += g_.rules[p].name + " -> ";
        }
        cycle += g_.rules[next].name;
        Fail(info_[next].where,
             fmt::format("left recursion: rule '{}' can reach itself without consuming any "
                         "character ({})",
                         g_.rules[next].name, cycle));
      }
      if (colour[next] == 0) {
        colour[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
}

Result<std::shared_ptr<const Grammar>> Parser::Parse() {
  try {
    SkipSpace(true);
    if (AtEnd()) Fail(pos_, "the grammar is empty (it needs at least a 'root ::= ...' rule)");
    while (!AtEnd()) {
      const size_t at = pos_;
      const std::string name = ParseName();
      SkipSpace(false);
      if (text_.substr(pos_, 3) != "::=")
        Fail(pos_,
             fmt::format("expected '::=' after rule name '{}', found {}", name, DescribeEnd()));
      pos_ += 3;
      SkipSpace(true);
      const int32_t id = RuleId(name);
      if (info_[id].defined) Fail(at, fmt::format("rule '{}' is defined twice", name));
      info_[id].defined = true;
      info_[id].where = at;
      ParseAlternatives(id, false, 0);
      if (!AtEnd() && Peek() != '\n' && Peek() != '\r')
        Fail(pos_, "expected the end of the line after the rule, found " + DescribeEnd());
      SkipSpace(true);
    }
    for (size_t r = 0; r < g_.rules.size(); ++r)
      if (!info_[r].defined)
        Fail(info_[r].first_use, fmt::format("undefined rule '{}'", g_.rules[r].name));
    g_.root = g_.Find("root");
    if (g_.root < 0) Fail(0, "no 'root' rule (generation starts from 'root ::= ...')");
    CheckLeftRecursion();
  } catch (const Error& e) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < std::min(e.pos, text_.size()); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Errorf("grammar: line {}, column {}: {}", line, col, e.message);
  }
  return std::shared_ptr<const Grammar>(std::make_shared<Grammar>(std::move(g_)));
}

}  // namespace

Result<std::shared_ptr<const Grammar>> ParseGrammar(std::string_view text) {
  return Parser(text).Parse();
}

}  // namespace rotor::grammar
