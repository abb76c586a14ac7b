#include "grammar/matcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "base/check.h"

namespace rotor::grammar {
namespace {

using Kind = Element::Kind;

// The smallest code point a UTF-8 sequence of each length may encode.
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};

// Drops repeated stacks, each kept in its first place: one hash a stack and
// a table of indices (sorting compared whole stacks: a quarter of a mask's
// time with 2,000 open alternatives).
void Dedupe(std::vector<SmallStack>* stacks) {
  const size_t n = stacks->size();
  if (n < 2) return;
  size_t mask = 1;
  while (mask < 2 * n) mask <<= 1;
  --mask;
  constexpr uint32_t kFree = UINT32_MAX;
  std::vector<uint32_t> table(mask + 1, kFree);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t h = SmallStack::Hash()((*stacks)[i]) & mask;
    bool seen = false;
    for (; table[h] != kFree; h = (h + 1) & mask)
      if ((*stacks)[table[h]] == (*stacks)[i]) {
        seen = true;
        break;
      }
    if (seen) continue;
    if (kept != i) (*stacks)[kept] = std::move((*stacks)[i]);
    table[h] = static_cast<uint32_t>(kept++);
  }
  stacks->resize(kept);
}

}  // namespace

struct Matcher::Expansion {
  std::unordered_set<Stack, SmallStack::Hash> expanded;  // stacks with a reference on top, seen
  std::vector<Stack> work;                        // still to expand
  size_t steps = 0;
};

std::string Matcher::OverflowMessage() {
  return fmt::format(
      "grammar: too ambiguous: the text so far matches it in more than {} ways at once (or "
      "needed more than {} expansion steps for one character); rewrite the grammar so that "
      "fewer alternatives stay open together",
      kMaxStacks, kMaxExpansions);
}

void Matcher::ClearOverflow() { overflowed_ = false; }

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  CHECK(grammar_ != nullptr && grammar_->root >= 0);
  Reset();
}

void Matcher::Reset() {
  state_ = State{};
  overflowed_ = false;
  dead_at_start_ = false;
  // The root's alternatives start the stacks; nothing continues after them.
  Expansion ex;
  for (const Alternative& alt : grammar_->rules[grammar_->root].alternatives) {
    Stack t;
    if (alt[0].kind != Kind::kEnd) t.push_back(&alt[0]);
    if (!Expand(std::move(t), &state_.stacks, &ex)) break;
  }
  Dedupe(&state_.stacks);
  if (ex.steps > kMaxExpansions || state_.stacks.size() > kMaxStacks) {
    dead_at_start_ = true;
    state_.stacks.clear();  // dead: every text is refused
  }
}

bool Matcher::Expand(Stack s, std::vector<Stack>* out, Expansion* ex) const {
  // A work list, not recursion: a chain of references that match nothing can
  // be as long as the grammar.
  ex->work.push_back(std::move(s));
  while (!ex->work.empty()) {
    Stack t = std::move(ex->work.back());
    ex->work.pop_back();
    if (++ex->steps > kMaxExpansions) return false;
    if (t.empty() || t.back()->kind == Kind::kChars) {
      out->push_back(std::move(t));
      // Deduplicated in batches: the limit counts distinct stacks.
      if (out->size() > 2 * kMaxStacks) {
        Dedupe(out);
        if (out->size() > kMaxStacks) return false;
      }
      continue;
    }
    // The same stack reached again (a rule matching nothing in two ways)
    // expands to the same stacks: once is enough.
    if (!ex->expanded.insert(t).second) continue;
    const Element* ref = t.back();
    t.pop_back();
    if ((ref + 1)->kind != Kind::kEnd) t.push_back(ref + 1);
    for (const Alternative& alt : grammar_->rules[ref->rule].alternatives) {
      Stack u = t;
      if (alt[0].kind != Kind::kEnd) u.push_back(&alt[0]);
      ex->work.push_back(std::move(u));
    }
  }
  return true;
}

bool Matcher::Step(const std::vector<Stack>& in, uint32_t cp, std::vector<Stack>* out) const {
  out->clear();
  Expansion ex;
  for (const Stack& s : in) {
    if (s.empty() || !s.back()->Matches(cp)) continue;
    Stack t(s.begin(), s.end() - 1);
    const Element* next = s.back() + 1;
    if (next->kind != Kind::kEnd) t.push_back(next);
    if (!Expand(std::move(t), out, &ex)) {
      overflowed_ = true;
      out->clear();
      return false;
    }
  }
  Dedupe(out);
  if (out->size() > kMaxStacks) {
    overflowed_ = true;
    out->clear();
    return false;
  }
  return true;
}

Matcher::ByteStep Matcher::FeedByte(const std::vector<Stack>& stacks, unsigned char b,
                                    Pending* p, std::vector<Stack>* next) const {
  if (p->need > 0) {
    if ((b & 0xC0) != 0x80) return ByteStep::kRefused;
    p->partial = (p->partial << 6) | (b & 0x3F);
    if (--p->need > 0) return ByteStep::kPending;
  } else if (b < 0x80) {
    p->partial = b;
  } else if ((b & 0xE0) == 0xC0 && b >= 0xC2) {
    *p = Pending{.partial = b & 0x1Fu, .need = 1, .len = 2};
    return ByteStep::kPending;
  } else if ((b & 0xF0) == 0xE0) {
    *p = Pending{.partial = b & 0x0Fu, .need = 2, .len = 3};
    return ByteStep::kPending;
  } else if ((b & 0xF8) == 0xF0 && b <= 0xF4) {
    *p = Pending{.partial = b & 0x07u, .need = 3, .len = 4};
    return ByteStep::kPending;
  } else {
    return ByteStep::kRefused;
  }
  const uint32_t cp = p->partial;
  p->partial = 0;
  // Overlong forms, surrogates and values past U+10FFFF are not characters.
  if (b >= 0x80 && (cp < kMinOfLength[p->len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)))
    return ByteStep::kRefused;
  if (!Step(stacks, cp, next) || next->empty()) return ByteStep::kRefused;
  return ByteStep::kStepped;
}

bool Matcher::PendingPossible(const std::vector<Stack>& stacks, const Pending& p) {
  const int bits = 6 * p.need;
  const uint32_t lo = std::max(p.partial << bits, kMinOfLength[p.len]);
  const uint32_t hi = std::min<uint32_t>(lo | ((1u << bits) - 1), 0x10FFFF);
  for (const Stack& s : stacks)
    if (!s.empty() && s.back()->MatchesAnyIn(lo, hi)) return true;
  return false;
}

bool Matcher::Feed(const State& from, std::string_view bytes, State* out) const {
  // Reads from.stacks until the first step, then its own stacks, so that a
  // test of a token's text copies nothing when the first character fails.
  const std::vector<Stack>* cur = &from.stacks;
  std::vector<Stack> next;
  Pending p = from.pending;
  for (const char ch : bytes) {
    switch (FeedByte(*cur, static_cast<unsigned char>(ch), &p, &next)) {
      case ByteStep::kRefused:
        return false;
      case ByteStep::kPending:
        continue;
      case ByteStep::kStepped:
        out->stacks.swap(next);
        cur = &out->stacks;
    }
  }
  if (cur != &out->stacks) out->stacks = from.stacks;
  out->pending = p;
  // A character is unfinished: some stack must accept one it can become.
  return p.need == 0 || PendingPossible(out->stacks, p);
}

bool Matcher::AllowedTokens(const TokenTrie& trie, std::span<uint8_t> allowed,
                            bool skip_leading_space) const {
  CHECK(allowed.size() >= static_cast<size_t>(trie.n_tokens()));
  for (const int32_t id : trie.ids()) allowed[id] = 0;
  if (state_.stacks.empty()) return true;
  // frames[d]: the matcher after the d bytes of the current node's path.
  // A byte that leaves a character pending shares its parent's stacks; the
  // parents of a node stay put while its subtree is walked (preorder).
  struct Frame {
    const std::vector<Stack>* stacks = nullptr;
    std::vector<Stack> own;
    Pending p;
    bool blank = false;  // skip_leading_space and the path is whitespace so far
  };
  std::vector<Frame> frames(trie.max_depth() + 1);
  frames[0].stacks = &state_.stacks;
  frames[0].p = state_.pending;
  frames[0].blank = skip_leading_space;
  const std::span<const TokenTrie::Node> nodes = trie.nodes();
  for (size_t i = 0; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    const Frame& up = frames[n.depth - 1];
    Frame& f = frames[n.depth];
    f.blank = up.blank && std::string_view(" \t\n\r\f\v").find(static_cast<char>(n.byte)) !=
                              std::string_view::npos;
    if (f.blank) {  // not the grammar's; a text ending here has nothing for it
      f.stacks = up.stacks;
      f.p = up.p;
      ++i;
      continue;
    }
    f.p = up.p;
    const ByteStep r = FeedByte(*up.stacks, n.byte, &f.p, &f.own);
    if (r == ByteStep::kRefused && overflowed_) return false;
    if (r == ByteStep::kRefused || (r == ByteStep::kPending && !PendingPossible(*up.stacks, f.p))) {
      i = n.end;  // every text under this prefix is refused
      continue;
    }
    f.stacks = r == ByteStep::kStepped ? &f.own : up.stacks;
    for (uint32_t k = n.ids_begin; k < n.ids_end; ++k) allowed[trie.ids()[k]] = 1;
    ++i;
  }
  return true;
}

bool Matcher::Accepts(std::string_view bytes) const {
  if (state_.stacks.empty()) return false;
  // Cheap rejection on the first whole byte before copying any stack.
  if (!bytes.empty() && state_.pending.need == 0 && static_cast<unsigned char>(bytes[0]) < 0x80) {
    const auto cp = static_cast<uint32_t>(static_cast<unsigned char>(bytes[0]));
    bool any = false;
    for (const Stack& s : state_.stacks) any |= !s.empty() && s.back()->Matches(cp);
    if (!any) return false;
  }
  State st;
  return Feed(state_, bytes, &st);
}

bool Matcher::Accept(std::string_view bytes) {
  if (state_.stacks.empty()) return false;
  State st;
  if (!Feed(state_, bytes, &st)) return false;
  state_ = std::move(st);
  return true;
}

bool Matcher::CanEnd() const {
  if (state_.pending.need != 0) return false;
  return std::any_of(state_.stacks.begin(), state_.stacks.end(),
                     [](const Stack& s) { return s.empty(); });
}

bool Matcher::Done() const {
  if (state_.pending.need != 0) return false;
  return std::all_of(state_.stacks.begin(), state_.stacks.end(),
                     [](const Stack& s) { return s.empty(); });
}

}  // namespace rotor::grammar
