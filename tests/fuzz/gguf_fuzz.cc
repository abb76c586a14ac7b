// The GGUF reader on arbitrary bytes, and what reads a GGUF's metadata after it:
// `rotor info`'s listing, the model configuration and the tokenizer's vocabulary.
// Any outcome is fine but a crash, a sanitizer report, a hang or a blow-up.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_info.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A view, not a copy: libFuzzer's input is its own allocation of exactly
  // `size` bytes, so a read past its end is still a sanitizer report.
  auto file = rotor::GgufFile::FromView(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  const rotor::GgufFile& f = **file;
  (void)rotor::FormatGgufInfo(f);
  for (const rotor::GgufKv& kv : f.metadata()) {
    (void)f.GetInt(kv.key);
    (void)f.GetFloat(kv.key);
    (void)f.GetString(kv.key);
    (void)f.GetStringArray(kv.key);
    (void)f.GetFloatArray(kv.key);
    (void)f.GetIntArray(kv.key);
  }
  (void)rotor::ReadModelConfig(f);
  auto tok = rotor::Tokenizer::FromGguf(f);
  if (tok.ok()) {
    const std::vector<int32_t> ids = (*tok)->Encode("Once upon a time <s> \xe2\x96\x81x\xff", true, true);
    (void)(*tok)->Decode(ids);
  }
  return 0;
}
