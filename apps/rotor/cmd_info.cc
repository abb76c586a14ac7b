// rotor info / rotor tokenize: look inside a GGUF file.
#include <fmt/format.h>
#include <fmt/ranges.h>

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
  sub->add_option("model", *path, "GGUF file")->required();
  return [path] {
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(*path);
    if (!file.ok()) return Fail(file.status());
    fmt::print("{}", FormatGgufInfo(**file, InfoOptions{}));
    return 0;
  };
}

Runner RegisterTokenize(CLI::App& app) {
  struct Args {
    std::string model = DefaultModelPath();
    std::string prompt;
    bool no_bos = false;
    bool pieces = false;
    bool special = false;
    bool show_eog = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of a text");
  sub->add_option("-m,--model", a->model, "GGUF model or vocabulary file")->capture_default_str();
  sub->add_option("-p,--prompt", a->prompt, "text")->required();
  sub->add_flag("--no-bos", a->no_bos, "do not add the BOS token");
  sub->add_flag("--pieces", a->pieces, "print each id with its text piece");
  sub->add_flag("--special", a->special,
                "parse special-token texts (<|im_start|>, <s>) as those tokens");
  sub->add_flag("--show-eog", a->show_eog,
                "also print the vocabulary's end-of-generation tokens (to stderr)");
  return [a] {
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

}  // namespace rotor::cli
