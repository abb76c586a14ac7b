// PackWeight: q8_0 rows -> the row-interleaved layout of the AVX-512 kernels
// (kernels.h: kPackedRows, kPackedBlockBytes, PackedGroupBytes).
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/matmul.h"

namespace rotor::ops {

bool PackingHelps(DType type) { return type == DType::kQ8_0 && ActiveIsa() == Isa::kAvx512; }

int64_t PackedWeightBytes(const Weight& w) {
  CHECK(w.type == DType::kQ8_0 && w.k % 32 == 0);
  const int64_t groups = (w.n + internal::kPackedRows - 1) / internal::kPackedRows;
  return groups * internal::PackedGroupBytes(w.k);
}

void PackWeight(const Weight& w, uint8_t* dst, int64_t r0, int64_t r1) {
  constexpr int kRows = internal::kPackedRows;
  CHECK(w.type == DType::kQ8_0 && w.k % 32 == 0);
  if (r0 == r1) return;
  CHECK(r0 % kRows == 0 && r0 <= r1 && r1 <= w.n && (r1 % kRows == 0 || r1 == w.n));
  const int64_t nb = w.k / 32, stride = internal::PackedGroupBytes(w.k);
  for (int64_t g = r0 / kRows; g * kRows < r1; ++g) {
    uint8_t* quants = dst + g * stride;                   // [nb, 8, 16 rows, 4]
    uint8_t* scales = quants + nb * internal::kPackedBlockBytes;  // [nb, 16 rows] f16
    std::memset(scales, 0, static_cast<size_t>(stride - nb * internal::kPackedBlockBytes));
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = g * kRows + r;
      const uint8_t* src =
          row < w.n ? static_cast<const uint8_t*>(w.data) + row * w.row_bytes : nullptr;
      for (int64_t j = 0; j < nb; ++j) {
        // q8_0 block: f16 scale, 32 int8 quants. Rows past n: scale 0, q = 0.
        uint8_t q[32];
        if (src) {
          std::memcpy(scales + (j * kRows + r) * 2, src + j * 34, 2);
          std::memcpy(q, src + j * 34 + 2, 32);
        } else {
          std::memset(q, 0, 32);
        }
        uint8_t* out = quants + j * internal::kPackedBlockBytes + r * 4;
        for (int quad = 0; quad < 8; ++quad)
          for (int b = 0; b < 4; ++b) out[quad * 64 + b] = q[quad * 4 + b] ^ 0x80;
      }
    }
  }
}

}  // namespace rotor::ops
