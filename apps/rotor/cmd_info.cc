// rotor info / tokenize / detokenize: look inside a GGUF file.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <climits>
#include <cstdio>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "gguf/gguf_info.h"
#include "tokenizer/tokenizer.h"

namespace rotor::cli {

Runner RegisterInfo(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("info", "print a GGUF file's metadata and tensor table");
  sub->add_option("model,-m,--model", *path, "GGUF file (as an argument, or -m FILE)")->required();
  return [path] {
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(*path);
    if (!file.ok()) return Fail(file.status());
    fmt::print("{}", FormatGgufInfo(**file, InfoOptions{}));
    return 0;
  };
}

namespace {

Runner Tokenize(CLI::App& app) {
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
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(a->model);
    if (!file.ok()) return Fail(file.status());
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
    if (!tok.ok()) return Fail(tok.status());
    std::vector<int32_t> ids = (*tok)->Encode(a->prompt, !a->no_bos, a->special);
    if (a->pieces) {
      fmt::print("{}", FormatTokens(**tok, ids));
    } else {
      fmt::print("[{}]\n", fmt::join(ids, ", "));
    }
    if (a->show_eog) {
      fmt::print(stderr, "end of generation:\n{}", FormatTokens(**tok, (*tok)->eog_ids()));
    }
    return 0;
  };
}

// Token ids in free form: "1 2 3", "1,2,3", "[1, 2, 3]" (tokenize's output).
Result<std::vector<int32_t>> ParseIds(std::string_view text, std::string_view where) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == ',' || c == '[' || c == ']' || c == '\n' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    size_t end = text.find_first_of(" ,[]\n\t\r", i);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(i, end - i);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc() || ptr != word.data() + word.size() || v < 0 || v > INT32_MAX)
      return Errorf("detokenize: {}: '{}' is not a token id", where, word);
    ids.push_back(static_cast<int32_t>(v));
    i = end;
  }
  return ids;
}

}  // namespace

Runner RegisterTokenize(CLI::App& app) { return Tokenize(app); }

Runner RegisterDetokenize(CLI::App& app) {
  struct Args {
    std::string model = kDefaultModel;
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
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(a->model);
    if (!file.ok()) return Fail(file.status());
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
    if (!tok.ok()) return Fail(tok.status());
    for (int32_t id : *parsed)
      if (id >= (*tok)->n_vocab())
        return Fail(Errorf("detokenize: token id {} is out of range [0, {}) of {}", id,
                           (*tok)->n_vocab(), a->model));
    const std::string out = (*tok)->Decode(*parsed, a->special);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  };
}

}  // namespace rotor::cli
