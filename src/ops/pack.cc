// PackWeight: q8_0 / q4_0 / q5_0 / iq4_nl / q2_K .. q6_K rows -> the row-interleaved
// layout of the AVX-512 and AVX2 kernels (kernels.h:
// kPackedRows, PackedBlockBytes, PackedK, PackedGroupBytes).
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/cpu.h"
#include "ops/kernels.h"
#include "ops/matmul.h"

namespace rotor::ops {

namespace {

bool Packable(DType t) {
  return internal::PackedLayout(t) == DType::kQ8_0 || t == DType::kQ4_0 || internal::IsPackedK(t);
}

// A q8_0 / q5_0 / iq4_nl block as q8_0: its f16 scale (2 bytes) and 32 int8
// values, the same weights (kernels.h: PackedLayout).
void AsQ8Block(DType t, const uint8_t* blk, uint8_t* scale, int8_t* q) {
  std::memcpy(scale, blk, 2);
  if (t == DType::kQ8_0) {
    std::memcpy(q, blk + 2, 32);
  } else if (t == DType::kQ5_0) {
    uint32_t qh;  // bit i: bit 4 of value i
    std::memcpy(&qh, blk + 2, 4);
    for (int i = 0; i < 16; ++i) {
      const uint8_t b = blk[6 + i];
      q[i] = static_cast<int8_t>(((b & 15) | ((qh >> i) & 1) << 4) - 16);
      q[i + 16] = static_cast<int8_t>(((b >> 4) | ((qh >> (i + 16)) & 1) << 4) - 16);
    }
  } else {  // iq4_nl: nibbles as q4_0's, values from the table
    for (int i = 0; i < 16; ++i) {
      q[i] = kIq4nlValues[blk[2 + i] & 15];
      q[i + 16] = kIq4nlValues[blk[2 + i] >> 4];
    }
  }
}

// A field of a K-quant block: `len` bytes at `src` in the block, at `dst` in
// the record; f16 fields go side by side (16 x 2 bytes), byte fields as
// zmm of 4 bytes x 16 rows.
struct Field {
  int src, len, dst;
  bool half;
};

// The 6-bit values of one q6_K block (row r of its group) into a record's
// quants (kernels.h: PackedQ6Byte).
void PackQ6Quants(const uint8_t* blk, uint8_t* qs, int r) {
  uint8_t q[kQK_K];  // [256] unsigned values, GGML's element order
  for (int e = 0; e < kQK_K; ++e) {
    const int n = e / 128, i = e % 128 / 32, l = e % 32;
    const uint8_t ql = blk[64 * n + l + 32 * (i % 2)], qh = blk[128 + 32 * n + l];
    q[e] = static_cast<uint8_t>(((i < 2 ? ql : ql >> 4) & 15) | ((qh >> (2 * i)) & 3) << 4);
  }
  for (int s = 0; s < kQK_K / 16; ++s)
    for (int b = 0; b < 4; ++b) {
      const uint8_t v3 = q[16 * s + 12 + b];
      for (int i = 0; i < 3; ++i)
        qs[internal::PackedQ6Byte(s, i, r, b)] =
            static_cast<uint8_t>(q[16 * s + 4 * i + b] | ((v3 >> (2 * i)) & 3) << 6);
    }
}

// The 5-bit values of one q5_K block (row r of its group) into a record's
// quants (kernels.h: PackedQ5Byte).
void PackQ5Quants(const uint8_t* blk, uint8_t* qs, int r) {
  const uint8_t* qh = blk + 16;  // [32]: bit j of qh[l] is bit 4 of element 32 j + l
  const uint8_t* ql = blk + 48;  // [128]: byte 32 c + l: elements 64 c + l, + 32 (nibbles)
  uint8_t q[kQK_K];              // [256] unsigned values
  for (int e = 0; e < kQK_K; ++e) {
    const int j = e / 32, l = e % 32;
    q[e] = static_cast<uint8_t>((ql[32 * (j / 2) + l] >> (4 * (j % 2)) & 15) | ((qh[l] >> j) & 1)
                                                                                   << 4);
  }
  for (int j = 0; j < kQK_K / 32; ++j)
    for (int b = 0; b < 4; ++b) {
      const int v5 = q[32 * j + 20 + b], v6 = q[32 * j + 24 + b], v7 = q[32 * j + 28 + b];
      const int top[5] = {v5 & 7, v6 & 7, v7 & 7, (v5 >> 3) | ((v7 >> 3) & 1) << 2,
                          (v6 >> 3) | (v7 >> 4) << 2};
      for (int i = 0; i < 5; ++i)
        qs[internal::PackedQ5Byte(j, i, r, b)] =
            static_cast<uint8_t>(q[32 * j + 4 * i + b] | top[i] << 5);
    }
}

// The 3-bit values and the 6-bit scales of one q3_K block (row r of its
// group) into a record (kernels.h: PackedQ3Byte; scales as int8 sc - 32).
void PackQ3(const uint8_t* blk, uint8_t* rec, int r) {
  const internal::PackedKLayout lay = internal::PackedK(DType::kQ3_K);
  const uint8_t* hmask = blk;    // [32]: bit 4 h + j of hmask[l]: bit 2 of element 128 h + 32 j + l
  const uint8_t* qs = blk + 32;  // [64]: bits 2 j of qs[32 h + l]: bits 0-1 of the same element
  const uint8_t* sc = blk + 96;  // [12]: scale s: 4 bits of sc[s % 8], 2 of sc[8 + s % 4]
  for (int s = 0; s < 16; ++s) {
    const int u = (sc[s % 8] >> (s < 8 ? 0 : 4) & 15) | (sc[8 + s % 4] >> (2 * (s / 4)) & 3) << 4;
    rec[lay.scales + 64 * (s / 4) + 4 * r + s % 4] = static_cast<uint8_t>(u - 32);
  }
  uint8_t q[kQK_K];  // [256] unsigned values, GGML's element order
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, j = e % 128 / 32, l = e % 32;
    q[e] =
        static_cast<uint8_t>((qs[32 * h + l] >> (2 * j) & 3) | (hmask[l] >> (4 * h + j) & 1) << 2);
  }
  uint8_t* out = rec + lay.qs;
  for (int j = 0; j < kQK_K / 32; ++j)
    for (int b = 0; b < 4; ++b) {
      const uint8_t* v = q + 32 * j + b;  // v[4 i]: value i of the block's quad b
      for (int i = 0; i < 3; ++i) {
        const int top = i < 2 ? (v[24 + 4 * i] & 3) : (v[24] >> 2 | (v[28] >> 2) << 1);
        out[internal::PackedQ3Byte(j, i, r, b)] =
            static_cast<uint8_t>(v[8 * i] | v[8 * i + 4] << 3 | top << 6);
      }
    }
}

// The 2-bit values of one q2_K block (row r of its group) into a record's
// quants (kernels.h: PackedQ2Byte).
void PackQ2Quants(const uint8_t* blk, uint8_t* qs, int r) {
  const uint8_t* src = blk + 16;  // [64]: bits 2 j of src[32 h + l]: element 128 h + 32 j + l
  uint8_t q[kQK_K];               // [256] values, GGML's element order
  for (int e = 0; e < kQK_K; ++e) q[e] = src[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32)) & 3;
  for (int s = 0; s < kQK_K / 16; ++s)
    for (int b = 0; b < 4; ++b) {
      const uint8_t* v = q + 16 * s + b;  // v[4 c]: value c of the sub-block's quad b
      qs[internal::PackedQ2Byte(s, r, b)] =
          static_cast<uint8_t>(v[0] | v[4] << 2 | v[8] << 4 | v[12] << 6);
    }
}

// K-quant rows [r0, r1) -> records (kernels.h: PackedK). Rows past n stay
// zero: d = dmin = 0, every value 0.
void PackK(const Weight& w, uint8_t* dst, int64_t r0, int64_t r1) {
  constexpr int kRows = internal::kPackedRows;
  const internal::PackedKLayout lay = internal::PackedK(w.type);
  Field fields[4];
  int nf = 0;
  if (w.type == DType::kQ6_K) {  // ql[128] qh[64] scales[16] d; quants by PackQ6Quants
    fields[nf++] = {192, 16, lay.scales, false};
    fields[nf++] = {208, 2, lay.d, true};
  } else if (w.type == DType::kQ3_K) {  // hmask[32] qs[64] scales[12] d; the rest by PackQ3
    fields[nf++] = {108, 2, lay.d, true};
  } else if (w.type == DType::kQ2_K) {  // scales[16] qs[64] d dmin; quants by PackQ2Quants
    fields[nf++] = {0, 16, lay.scales, false};
    fields[nf++] = {80, 2, lay.d, true};
    fields[nf++] = {82, 2, lay.dmin, true};
  } else {  // d dmin scales[12] (q5_K: qh[32]) qs[128]; q5_K quants by PackQ5Quants
    fields[nf++] = {0, 2, lay.d, true};
    fields[nf++] = {2, 2, lay.dmin, true};
    fields[nf++] = {4, 12, lay.scales, false};
    if (w.type == DType::kQ4_K) fields[nf++] = {16, 128, lay.qs, false};
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
        if (w.type == DType::kQ2_K) PackQ2Quants(src, rec + lay.qs, r);
        if (w.type == DType::kQ3_K) PackQ3(src, rec, r);
        if (w.type == DType::kQ6_K) PackQ6Quants(src, rec + lay.qs, r);
        if (w.type == DType::kQ5_K) PackQ5Quants(src, rec + lay.qs, r);
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

// Every packed type has an AVX-512 and an AVX2 kernel (the AVX2 ones read a
// 64-byte vector of 16 rows as two ymm halves of 8).
bool PackingHelps(DType type) { return Packable(type) && ActiveIsa() != Isa::kScalar; }

int64_t PackedWeightBytes(const Weight& w) {
  CHECK(Packable(w.type) && w.k % Traits(w.type).block_size == 0);
  return internal::PackedGroupCount(w.type, w.n) * internal::PackedGroupBytes(w.type, w.k);
}

void PackWeight(const Weight& w, uint8_t* dst, int64_t r0, int64_t r1) {
  const int kRows = internal::PackedRows(w.type);
  if (r0 == r1) return;
  CHECK(Packable(w.type) && w.k % Traits(w.type).block_size == 0);
  CHECK(r0 % kRows == 0 && r0 <= r1 && r1 <= w.n && (r1 % kRows == 0 || r1 == w.n));
  if (internal::IsPackedK(w.type)) return PackK(w, dst, r0, r1);
  const bool q8 = internal::PackedLayout(w.type) == DType::kQ8_0;
  // The quant bytes of a block in the layout: 32 int8 (q8_0's; q5_0 and
  // iq4_nl converted by AsQ8Block) or 16 of q4_0's nibbles.
  const int qbytes = q8 ? 32 : 16;
  const int64_t block = static_cast<int64_t>(Traits(w.type).type_size);  // as stored
  const uint8_t bias = q8 ? 0x80 : 0x00;  // q4_0 nibbles are already unsigned
  const int64_t nb = w.k / 32, stride = internal::PackedGroupBytes(w.type, w.k);
  for (int64_t g = r0 / kRows; g * kRows < r1; ++g) {
    uint8_t* group = dst + g * stride;  // [nb / 2 pairs: 2 x 32 f16 scales, 2 x quants]
    std::memset(group, 0, static_cast<size_t>(stride));
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = g * kRows + r;
      const uint8_t* src =
          row < w.n ? static_cast<const uint8_t*>(w.data) + row * w.row_bytes : nullptr;
      for (int64_t j = 0; j < nb; ++j) {
        // Rows past n: scale 0 and zero quants (value 0 either way).
        uint8_t q[32];
        if (src && q8) {
          AsQ8Block(w.type, src + j * block, group + internal::PackedScalesAt(w.type, j) + r * 2,
                    reinterpret_cast<int8_t*>(q));
        } else if (src) {
          std::memcpy(group + internal::PackedScalesAt(w.type, j) + r * 2, src + j * block, 2);
          std::memcpy(q, src + j * block + 2, static_cast<size_t>(qbytes));
        } else {
          std::memset(q, q8 ? 0 : 0x88, static_cast<size_t>(qbytes));
        }
        uint8_t* out = group + internal::PackedQuantsAt(w.type, j) + r * 4;
        for (int quad = 0; quad < qbytes / 4; ++quad)
          for (int b = 0; b < 4; ++b)
            out[quad * internal::kPackedLine + b] = q[quad * 4 + b] ^ bias;
      }
    }
  }
}

}  // namespace rotor::ops
