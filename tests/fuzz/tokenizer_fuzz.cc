// A tokenizer (the vocabulary ROTOR_FUZZ_VOCAB: SentencePiece for fuzz_spm,
// byte-level BPE for fuzz_bpe) on arbitrary text. Besides no crash: every id is
// in the vocabulary, and without special-token parsing any bytes, valid UTF-8
// or not, come back byte for byte (Decode(Encode(s, true)) == s, tokenizer.h),
// except a literal U+2581 "▁", SentencePiece's escaped space, decoded as " "
// (as in sentencepiece and llama.cpp). Invalid UTF-8 was left out until the
// seventieth session: a bad lead byte swallowed the escaped space after it
// (spm_test.cc InvalidByteKeepsTheSpaceAfterIt).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

const rotor::Tokenizer& Vocab() {
  static const std::unique_ptr<rotor::Tokenizer> tok = [] {
    auto file = rotor::GgufFile::Open(ROTOR_FUZZ_VOCAB);
    if (!file.ok()) {
      std::fprintf(stderr, "%s\n", file.message().c_str());
      std::abort();
    }
    auto t = rotor::Tokenizer::FromGguf(**file);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.message().c_str());
      std::abort();
    }
    return std::move(*t);
  }();
  return *tok;
}

}  // namespace

// The vocabulary is loaded before fuzzing starts, so its load (seconds under
// ASan on a busy machine) never counts toward an input's timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)Vocab();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rotor::Tokenizer& tok = Vocab();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = text.find("\xe2\x96\x81") == std::string_view::npos;
  for (bool parse_special : {false, true}) {
    const std::vector<int32_t> ids = tok.Encode(text, /*add_special=*/true, parse_special);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.n_vocab()) {
        std::fprintf(stderr, "id %d out of the vocabulary of %d\n", id, tok.n_vocab());
        std::abort();
      }
    const std::string back = tok.Decode(ids);
    if (!parse_special && valid && back != text) {
      std::fprintf(stderr, "round trip changed the text: %zu bytes in, %zu out\n", text.size(),
                   back.size());
      std::abort();
    }
  }
  return 0;
}
