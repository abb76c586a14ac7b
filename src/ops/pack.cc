// PackWeight: q8_0 / q4_0 / q4_K / q5_K / q6_K rows -> the row-interleaved
// layout of the AVX-512 kernels (kernels.h: kPackedRows, PackedBlockBytes,
// PackedK, PackedGroupBytes).
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/matmul.h"

namespace rotor::ops {

namespace {

bool Packable(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0 || internal::IsPackedK(t); }

// A field of a K-quant block: `len` bytes at `src` in the block, at `dst` in
// the record; f16 fields go side by side (16 x 2 bytes), byte fields as
// zmm of 4 bytes x 16 rows.
struct Field {
  int src, len, dst;
  bool half;
};

// K-quant rows [r0, r1) -> records (kernels.h: PackedK). Rows past n stay
// zero: d = dmin = 0, every value 0.
void PackK(const Weight& w, uint8_t* dst, int64_t r0, int64_t r1) {
  constexpr int kRows = internal::kPackedRows;
  const internal::PackedKLayout lay = internal::PackedK(w.type);
  Field fields[5];
  int nf = 0;
  if (w.type == DType::kQ6_K) {  // ql[128] qh[64] scales[16] d
    fields[nf++] = {0, 128, lay.qs, false};
    fields[nf++] = {128, 64, lay.qh, false};
    fields[nf++] = {192, 16, lay.scales, false};
    fields[nf++] = {208, 2, lay.d, true};
  } else {  // d dmin scales[12] (q5_K: qh[32]) qs[128]
    const bool q5 = w.type == DType::kQ5_K;
    fields[nf++] = {0, 2, lay.d, true};
    fields[nf++] = {2, 2, lay.dmin, true};
    fields[nf++] = {4, 12, lay.scales, false};
    if (q5) fields[nf++] = {16, 32, lay.qh, false};
    fields[nf++] = {q5 ? 48 : 16, 128, lay.qs, false};
  }
  const int64_t nsb = w.k / kQK_K, block = static_cast<int64_t>(Traits(w.type).type_size);
  const int64_t stride = internal::PackedGroupBytes(w.type, w.k);
  for (int64_t g = r0 / kRows; g * kRows < r1; ++g) {
    uint8_t* group = dst + g * stride;  // [nsb records]
    std::memset(group, 0, static_cast<size_t>(stride));
    for (int r = 0; r < kRows && g * kRows + r < w.n; ++r) {
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + (g * kRows + r) * w.row_bytes;
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t* src = row + sb * block;
        uint8_t* rec = group + sb * lay.bytes;
        for (int f = 0; f < nf; ++f) {
          const Field& fd = fields[f];
          if (fd.half) {
            std::memcpy(rec + fd.dst + r * 2, src + fd.src, 2);
            continue;
          }
          for (int q = 0; q < fd.len / 4; ++q)
            std::memcpy(rec + fd.dst + q * 64 + r * 4, src + fd.src + q * 4, 4);
        }
      }
    }
  }
}

}  // namespace

bool PackingHelps(DType type) { return Packable(type) && ActiveIsa() == Isa::kAvx512; }

int64_t PackedWeightBytes(const Weight& w) {
  CHECK(Packable(w.type) && w.k % Traits(w.type).block_size == 0);
  const int64_t groups = (w.n + internal::kPackedRows - 1) / internal::kPackedRows;
  return groups * internal::PackedGroupBytes(w.type, w.k);
}

void PackWeight(const Weight& w, uint8_t* dst, int64_t r0, int64_t r1) {
  constexpr int kRows = internal::kPackedRows;
  if (r0 == r1) return;
  CHECK(Packable(w.type) && w.k % Traits(w.type).block_size == 0);
  CHECK(r0 % kRows == 0 && r0 <= r1 && r1 <= w.n && (r1 % kRows == 0 || r1 == w.n));
  if (internal::IsPackedK(w.type)) return PackK(w, dst, r0, r1);
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
