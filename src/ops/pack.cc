// PackWeight: q8_0 / q4_0 rows -> the row-interleaved layout of the AVX-512
// kernels (kernels.h: kPackedRows, PackedBlockBytes, PackedGroupBytes).
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/matmul.h"

namespace rotor::ops {

namespace {
bool Packable(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }
}  // namespace

bool PackingHelps(DType type) { return Packable(type) && ActiveIsa() == Isa::kAvx512; }

int64_t PackedWeightBytes(const Weight& w) {
  CHECK(Packable(w.type) && w.k % 32 == 0);
  const int64_t groups = (w.n + internal::kPackedRows - 1) / internal::kPackedRows;
  return groups * internal::PackedGroupBytes(w.type, w.k);
}

void PackWeight(const Weight& w, uint8_t* dst, int64_t r0, int64_t r1) {
  constexpr int kRows = internal::kPackedRows;
  if (r0 == r1) return;
  CHECK(Packable(w.type) && w.k % 32 == 0);
  CHECK(r0 % kRows == 0 && r0 <= r1 && r1 <= w.n && (r1 % kRows == 0 || r1 == w.n));
  const bool q8 = w.type == DType::kQ8_0;
  // A block as stored: f16 scale, then 32 (q8_0) or 16 (q4_0) quant bytes.
  const int qbytes = q8 ? 32 : 16, block = 2 + qbytes;
  const uint8_t bias = q8 ? 0x80 : 0x00;  // q4_0 nibbles are already unsigned
  const int64_t nb = w.k / 32, stride = internal::PackedGroupBytes(w.type, w.k);
  for (int64_t g = r0 / kRows; g * kRows < r1; ++g) {
    uint8_t* group = dst + g * stride;  // [nb / 2 pairs: 2 x 16 f16 scales, 2 x quants]
    std::memset(group, 0, static_cast<size_t>(stride));
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = g * kRows + r;
      const uint8_t* src =
          row < w.n ? static_cast<const uint8_t*>(w.data) + row * w.row_bytes : nullptr;
      for (int64_t j = 0; j < nb; ++j) {
        // Rows past n: scale 0 and zero quants (value 0 either way).
        uint8_t q[32];
        if (src) {
          std::memcpy(group + internal::PackedScalesAt(w.type, j) + r * 2, src + j * block, 2);
          std::memcpy(q, src + j * block + 2, static_cast<size_t>(qbytes));
        } else {
          std::memset(q, q8 ? 0 : 0x88, static_cast<size_t>(qbytes));
        }
        uint8_t* out = group + internal::PackedQuantsAt(w.type, j) + r * 4;
        for (int quad = 0; quad < qbytes / 4; ++quad)
          for (int b = 0; b < 4; ++b) out[quad * 64 + b] = q[quad * 4 + b] ^ bias;
      }
    }
  }
}

}  // namespace rotor::ops
