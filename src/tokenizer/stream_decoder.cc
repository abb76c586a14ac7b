#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace rotor {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool strip_leading_space)
    : tokenizer_(tokenizer),
      strip_leading_space_(strip_leading_space && tokenizer.add_space_prefix()) {}

std::string StreamDecoder::Push(int32_t id) {
  std::string_view piece = tokenizer_.PieceView(id);
  if (piece.empty()) return {};
  if (at_start_ && strip_leading_space_ && piece.front() == ' ') piece.remove_prefix(1);
  at_start_ = false;
  std::string out;
  if (pending_.empty()) {
    // The common case: a piece of whole characters passes without a copy into pending_.
    const size_t used = AppendValidUtf8(piece, /*final=*/false, &out);
    pending_.assign(piece.substr(used));
    return out;
  }
  pending_.append(piece);
  const size_t used = AppendValidUtf8(pending_, /*final=*/false, &out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  AppendValidUtf8(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

void StreamDecoder::Reset() {
  pending_.clear();
  at_start_ = true;
}

}  // namespace rotor
