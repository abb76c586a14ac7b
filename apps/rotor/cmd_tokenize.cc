// rotor tokenize / detokenize, on the C API (include/rotor/rotor.h) as the
// examples use it: the model is loaded vocab_only, so a vocabulary-only GGUF
// works too.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <climits>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "rotor/rotor.h"

namespace rotor::cli {
namespace {

using ModelPtr = std::unique_ptr<rotor_model, decltype(&rotor_model_free)>;

// Reported as every command reports errors (Fail); the C API's messages
// carry a "rotor: " of their own.
int FailC(rotor_status* s) {
  std::string_view message = rotor_status_message(s);
  if (message.starts_with("rotor: ")) message.remove_prefix(7);
  const Status status = Status::Error(std::string(message));
  rotor_status_free(s);
  return Fail(status);
}

rotor_status* LoadVocab(const std::string& path, ModelPtr* out) {
  rotor_model_params p = rotor_model_default_params();
  p.vocab_only = true;
  rotor_model* m = nullptr;
  rotor_status* s = rotor_model_load(path.c_str(), &p, &m);
  out->reset(m);
  return s;
}

// Calls fill(buffer, capacity, &size) and, when the buffer was too small,
// once more with the size it asked for.
template <typename T, typename Fill>
rotor_status* Sized(std::vector<T>* out, Fill fill) {
  size_t n = 0;
  rotor_status* s = fill(out->data(), out->size(), &n);
  if (rotor_status_code(s) == ROTOR_ERR_BUFFER_TOO_SMALL) {
    rotor_status_free(s);
    out->resize(n);
    s = fill(out->data(), out->size(), &n);
  }
  if (s == nullptr) out->resize(n);
  return s;
}

// Bytes that start a valid UTF-8 character at s[0] (1..4), 0 when they do not
// (a byte token's lone byte, an overlong form, a surrogate, past U+10FFFF).
size_t Utf8Char(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3, lo = b0 == 0xE0 ? 0xA0 : lo, hi = b0 == 0xED ? 0x9F : hi;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4, lo = b0 == 0xF0 ? 0x90 : lo, hi = b0 == 0xF4 ? 0x8F : hi;
  } else {
    return 0;
  }
  if (s.size() < need) return 0;
  for (size_t i = 1; i < need; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (i == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return 0;
  }
  return need;
}

// "   428 -> ' this'": the piece quoted, control characters and bytes that are
// not part of a whole UTF-8 character escaped.
std::string ShowPiece(int32_t id, std::string_view piece) {
  std::string shown;
  for (size_t i = 0; i < piece.size();) {
    const size_t n = Utf8Char(piece.substr(i));
    const char c = piece[i];
    if (n == 0) {
      shown += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      i += 1;
      continue;
    }
    if (n > 1) {
      shown.append(piece.substr(i, n));
    } else if (c == '\n') {
      shown += "\\n";
    } else if (c == '\t') {
      shown += "\\t";
    } else if (c == '\r') {
      shown += "\\r";
    } else if (c == '\\' || c == '\'') {
      shown += '\\', shown += c;
    } else if (c < 0x20 || c == 0x7F) {
      shown += fmt::format("\\x{:02x}", static_cast<int>(c));
    } else {
      shown.push_back(c);
    }
    i += n;
  }
  return fmt::format("{:6} -> '{}'\n", id, shown);
}

rotor_status* ShowPieces(const rotor_model* m, const std::vector<int32_t>& ids, std::string* out) {
  std::vector<char> piece(64);
  for (int32_t id : ids) {
    rotor_status* s = Sized(&piece, [&](char* text, size_t capacity, size_t* n) {
      return rotor_token_piece(m, id, /*special=*/true, text, capacity, n);
    });
    if (s != nullptr) return s;
    *out += ShowPiece(id, std::string_view(piece.data(), piece.size()));
  }
  return nullptr;
}

// Token ids separated by commas or whitespace: "1 2 3", "1,2,3", "[1, 2, 3]"
// (tokenize's output). An empty item ("1,,2", "1,"), a bracket without its
// pair or inside the list is an error.
Result<std::vector<int32_t>> ParseIds(std::string_view text, std::string_view where) {
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  const bool open = text.starts_with('['), close = text.ends_with(']');
  if (open != close || (open && text.size() < 2))
    return Errorf("detokenize: {}: '{}' has a bracket without its pair", where, text);
  if (open) text = text.substr(1, text.size() - 2);
  std::vector<int32_t> ids;
  bool comma = false;  // since the last id (an item must come before the next one)
  size_t i = 0;
  while (i < text.size()) {
    if (space(text[i])) {
      ++i;
      continue;
    }
    if (text[i] == ',') {
      if (ids.empty() || comma)
        return Errorf("detokenize: {}: an empty item before the comma at character {}", where,
                      i + 1 + (open ? 1 : 0));
      comma = true;
      ++i;
      continue;
    }
    size_t end = text.find_first_of(" ,\n\t\r", i);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(i, end - i);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc() || ptr != word.data() + word.size() || v < 0 || v > INT32_MAX)
      return Errorf("detokenize: {}: '{}' is not a token id", where, word);
    ids.push_back(static_cast<int32_t>(v));
    comma = false;
    i = end;
  }
  if (comma) return Errorf("detokenize: {}: an empty item after the last comma", where);
  return ids;
}

}  // namespace

Runner RegisterTokenize(CLI::App& app) {
  struct Args {
    std::string model = DefaultModelPath();
    std::string prompt;
    std::string file;
    bool no_bos = false;
    bool pieces = false;
    bool special = false;
    bool show_eog = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of a text");
  sub->add_option("-m,--model", a->model, "GGUF model or vocabulary file")->capture_default_str();
  auto* p = sub->add_option("-p,--prompt", a->prompt, "text");
  auto* f = sub->add_option("-f,--file", a->file, "read the text from a file");
  p->excludes(f);
  sub->add_flag("--no-bos", a->no_bos, "do not add the BOS token");
  sub->add_flag("--pieces", a->pieces, "print each id with its text piece");
  sub->add_flag("--special", a->special,
                "parse special-token texts (<|im_start|>, <s>) as those tokens");
  sub->add_flag("--show-eog", a->show_eog,
                "also print the vocabulary's end-of-generation tokens (to stderr)");
  return [a, p, f] {
    if (p->count() == 0 && f->count() == 0)
      return Fail(Status::Error("tokenize: give the text with -p TEXT or -f FILE"));
    if (!a->file.empty()) {
      Result<std::string> text = ReadFile(a->file);
      if (!text.ok()) return Fail(text.status().WithContext("tokenize: -f"));
      a->prompt = *text;
    }
    ModelPtr model(nullptr, rotor_model_free);
    if (rotor_status* s = LoadVocab(a->model, &model)) return FailC(s);
    std::vector<int32_t> ids(a->prompt.size() + 2);
    rotor_status* s = Sized(&ids, [&](int32_t* tokens, size_t capacity, size_t* n) {
      return rotor_tokenize(model.get(), a->prompt.data(), a->prompt.size(), !a->no_bos, a->special,
                            tokens, capacity, n);
    });
    if (s != nullptr) return FailC(s);
    if (a->pieces) {
      std::string out;
      if (rotor_status* e = ShowPieces(model.get(), ids, &out)) return FailC(e);
      fmt::print("{}", out);
    } else {
      fmt::print("[{}]\n", fmt::join(ids, ", "));
    }
    if (a->show_eog) {
      std::vector<int32_t> eog;
      for (int32_t id = 0; id < rotor_model_n_vocab(model.get()); ++id)
        if (rotor_model_token_is_eog(model.get(), id)) eog.push_back(id);
      std::string out;
      if (rotor_status* e = ShowPieces(model.get(), eog, &out)) return FailC(e);
      fmt::print(stderr, "end of generation:\n{}", out);
    }
    return 0;
  };
}

Runner RegisterDetokenize(CLI::App& app) {
  struct Args {
    std::string model = DefaultModelPath();
    std::vector<std::string> ids;
    std::string file;
    bool special = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("detokenize", "print the text of token ids");
  sub->add_option("-m,--model", a->model, "GGUF model or vocabulary file")->capture_default_str();
  auto* ids = sub->add_option("ids", a->ids, "token ids: 1 2 3, 1,2,3 or [1, 2, 3]");
  auto* f = sub->add_option("-f,--file", a->file, "read the ids from a file (tokenize's output)");
  ids->excludes(f);
  sub->add_flag("--special", a->special, "print control tokens' text (<s>, <|im_end|>)");
  return [a, f] {
    std::string text;
    std::string where = "arguments";
    if (f->count() > 0) {
      Result<std::string> r = ReadFile(a->file);
      if (!r.ok()) return Fail(r.status().WithContext("detokenize: -f"));
      text = *r;
      where = a->file;
    } else {
      for (const std::string& s : a->ids) text += s + " ";
    }
    Result<std::vector<int32_t>> parsed = ParseIds(text, where);
    if (!parsed.ok()) return Fail(parsed.status());
    if (parsed->empty())
      return Fail(Status::Error("detokenize: no token ids (give them as arguments or -f FILE)"));
    ModelPtr model(nullptr, rotor_model_free);
    if (rotor_status* s = LoadVocab(a->model, &model)) return FailC(s);
    const int32_t n_vocab = rotor_model_n_vocab(model.get());
    for (int32_t id : *parsed)
      if (id >= n_vocab)
        return Fail(
            Errorf("detokenize: token id {} is out of range [0, {}) of {}", id, n_vocab, a->model));
    std::vector<char> out(4 * parsed->size() + 16);
    rotor_status* s = Sized(&out, [&](char* buf, size_t capacity, size_t* n) {
      return rotor_detokenize(model.get(), parsed->data(), parsed->size(), a->special, buf,
                              capacity, n);
    });
    if (s != nullptr) return FailC(s);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  };
}

}  // namespace rotor::cli
