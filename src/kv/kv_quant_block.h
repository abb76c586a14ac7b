// The choice of a q4_0 / q5_0 block's levels and scale (kv_quant.h,
// KvRounding), written once over the arithmetic on the block's values that
// an `Ops` class supplies: kv_quant.cc's scalar ops are the reference,
// kv_quant_avx2.cc's do the same arithmetic in registers (same bits). Sums
// of doubles run in 4 lanes, lane i % 4, added as (l0 + l1) + (l2 + l3), so
// both orders are the same; their terms x * l and x * x are exact in double.
//
// Ops over one block of B values x:
//   void MaxAbs(float* max, float* amax)   the first value of largest
//                                          magnitude (sign kept), and |it|
//   void Ggml(float id, float off, int top, int* u)
//                                          u = min(top, (int)(x * id + off))
//   void Round(float id, int lo, int hi, int* u)
//                                          u = clamp(lrintf(x * id), lo, hi) - lo
//   double Sxx()                           sum x * x
//   void Sums(const int* u, int lo, double* sxl, double* sll)
//                                          sum x * l and l * l, l = u + lo
//   static float F16Round(float d)         d rounded to f16 and back
//   static void Pack(KvType t, int B, float d, const int* u, uint8_t* out)
//                                          the block: f16 d, then u[B]
//                                          (level - lo) as kv_quant.h lays out
#pragma once

#include <algorithm>
#include <cstdint>

#include "kv/kv_quant.h"

namespace rotor::kv_internal {

// A q4_0 / q5_0 block of B (<= 32) values chosen as `rounding` says, written
// to out.
template <class Ops>
void QuantizeBlock(KvType t, int B, Ops& x, uint8_t* out, KvRounding rounding) {
  const bool q5 = t == KvType::kQ5_0;
  const int lo = q5 ? -16 : -8, hi = -lo - 1;
  float max = 0.f, amax = 0.f;
  x.MaxAbs(&max, &amax);
  // GGML's choice: d = max / lo, u = min(hi - lo, (int)(x / d + 0.5 - lo)).
  int ggml[32], best[32], u[32];  // [B] unsigned quants (level - lo)
  float best_d = max / static_cast<float>(lo);
  x.Ggml(best_d != 0.f ? 1.f / best_d : 0.f, 0.5f - static_cast<float>(lo), hi - lo, ggml);
  const int* best_u = ggml;
  if (rounding == KvRounding::kLeastSquares && amax > 0.f) {
    const double sxx = x.Sxx();
    // The squared error of x stored as d (rounded to f16, as stored) times
    // levels l: sum (x - d l)^2 = sxx - 2 d sxl + d^2 sll.
    auto error = [&](float d, double sxl, double sll) {
      const double dh = Ops::F16Round(d);
      return sxx - 2 * dh * sxl + dh * dh * sll;
    };
    double sxl = 0, sll = 0;
    x.Sums(ggml, lo, &sxl, &sll);
    double best_e = error(best_d, sxl, sll);
    // The levels whose sums are sxl, sll with their least-squares scale
    // sxl / sll: better than the best so far? GGML's levels, then those of
    // the extreme mapped to lo + 1, lo and lo - 1.
    auto fit = [&] {
      if (sll == 0) return false;
      const float d = static_cast<float>(sxl / sll);
      const double e = error(d, sxl, sll);
      if (!(e < best_e)) return false;
      best_e = e, best_d = d;
      return true;
    };
    fit();
    for (int k : {lo + 1, lo, lo - 1}) {
      x.Round(static_cast<float>(k) / max, lo, hi, u);
      x.Sums(u, lo, &sxl, &sll);
      if (fit()) std::copy(u, u + B, best), best_u = best;
    }
  }
  Ops::Pack(t, B, best_d, best_u, out);
}

namespace avx2 {
// n values in blocks of B = 8, 16 or 32, q4_0 or q5_0: the bytes of the
// scalar reference (kv_quant_avx2.cc; also the AVX-512 machines' path).
void QuantizeBlocks(KvType t, int B, int64_t n, const float* x, uint8_t* out, KvRounding rounding);
}  // namespace avx2

}  // namespace rotor::kv_internal
