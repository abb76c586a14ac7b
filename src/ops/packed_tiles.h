// The tile loop of the kernels over row-interleaved weights (every ISA):
// m tokens go in tiles of up to kPackedTileTokens, and each tile's size
// becomes a compile-time constant of the kernel. Safe to include from ISA
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

}  // namespace rotor::ops::internal
