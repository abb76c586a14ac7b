// rotor info: look inside a GGUF file (its metadata and tensor table, which
// the C API does not expose).
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "gguf/gguf_info.h"

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

}  // namespace rotor::cli
