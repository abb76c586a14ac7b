// The tile loop of the kernels over row-interleaved weights (every ISA):
// m tokens go in tiles of up to kPackedTileTokens, and each tile's size
// (ForEachTile: AVX-512) or its stride (ForEachStridedTile: AVX2) becomes a
// compile-time constant of the kernel. Safe to include from ISA
// units despite kernels.h's rule: ForEachTile is instantiated only with the
// caller's own lambda, whose type is unique to its translation unit, so no
// copy compiled with ISA flags can be shared with another unit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/kernels.h"

namespace rotor::ops::internal {

// f(std::integral_constant<int, n>{}, a, yt) with n = tokens (<= kTok).
template <int kTok, class F>
void CallTile(int tokens, const uint8_t* a, float* yt, F& f) {
  if constexpr (kTok > 1) {
    if (tokens < kTok) return CallTile<kTok - 1>(tokens, a, yt, f);
  }
  f(std::integral_constant<int, kTok>{}, a, yt);
}

// f(std::integral_constant<int, kTok>, tile activations, tile outputs) for
// each tile of up to kPackedTileTokens tokens of m (nb activation blocks per
// token; acts in QuantizeActivationsPacked's layout, y rows ldy apart).
template <class F>
void ForEachTile(int64_t nb, int64_t m, const uint8_t* acts, float* y, int64_t ldy, F&& f) {
  for (int64_t t0 = 0; t0 < m; t0 += kPackedTileTokens) {
    const int tokens = static_cast<int>(std::min<int64_t>(kPackedTileTokens, m - t0));
    CallTile<kPackedTileTokens>(tokens, acts + t0 * nb * kPackedActBytes, y + t0 * ldy, f);
  }
}

// f(std::integral_constant<int, S>, tokens, tile activations, tile outputs)
// for each tile of up to kPackedTileTokens tokens of m, S its stride
// (PackedTileStride: 1, 2, 3 or 8): the kernel is compiled per stride.
template <class F>
void ForEachStridedTile(int64_t nb, int64_t m, const uint8_t* acts, float* y, int64_t ldy, F&& f) {
  static_assert(kPackedTightTokens == 3, "the strides below");
  for (int64_t t0 = 0; t0 < m; t0 += kPackedTileTokens) {
    const int tokens = static_cast<int>(std::min<int64_t>(kPackedTileTokens, m - t0));
    const uint8_t* a = acts + t0 * nb * kPackedActBytes;
    float* yt = y + t0 * ldy;
    switch (tokens) {
      case 1:
        f(std::integral_constant<int, 1>{}, 1, a, yt);
        break;
      case 2:
        f(std::integral_constant<int, 2>{}, 2, a, yt);
        break;
      case 3:
        f(std::integral_constant<int, 3>{}, 3, a, yt);
        break;
      default:
        f(std::integral_constant<int, kPackedTileTokens>{}, tokens, a, yt);
    }
  }
}

}  // namespace rotor::ops::internal
