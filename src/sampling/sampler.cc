#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"

namespace rotor {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The candidate order everywhere: higher value first, then lower id. A strict
// total order (ids are unique), so selections and sorts are deterministic.
template <typename C>
bool Better(const C& a, const C& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// NaN -> -inf, +inf -> FLT_MAX (keeps max - max == 0 in the softmax). Selects,
// not branches, so loops over the vocabulary vectorise.
inline float Sanitize(float v) {
  v = v != v ? kNegInf : v;
  return v < FLT_MAX ? v : FLT_MAX;
}

// exp(x) for x <= 0 (larger x is clamped to 0, NaN counts as -inf), relative
// error < 3e-7, 0 below about -87.7. Written to vectorise (this file is built
// with -fno-trapping-math) and to give the same bits on every x86-64, unlike
// libm's expf.
inline float ExpNonPositive(float x) {
  x = x >= -88.0f ? x : -88.0f;
  x = x <= 0.0f ? x : 0.0f;
  // x = n ln2 + r, |r| <= ln2 / 2; ln2 split in two (Cody-Waite) keeps r exact.
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720;  // Taylor to r^6: error < 1.2e-7 on |r| <= ln2 / 2
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n in [-127, 0]; n == -127 makes the scale 0.0f, which is the underflow.
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Whether any of x[0, kN) exceeds t (NaN does not); vectorises.
template <int kN>
inline bool AnyAbove(const float* x, float t) {
  int any = 0;
  for (int i = 0; i < kN; ++i) any |= x[i] > t;
  return any != 0;
}

// Sum of x[0, n) in 8 interleaved float lanes (vectorises; fixed order).
inline double SumFloats(const float* x, int32_t n) {
  float lanes[8] = {};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int32_t j = 0; j < 8; ++j) lanes[j] += x[i + j];
  }
  double sum = 0;
  for (; i < n; ++i) sum += x[i];
  for (float lane : lanes) sum += lane;
  return sum;
}

// Sum of the x[i] >= t in x[0, n), like SumFloats().
inline double MassAbove(const float* x, int32_t n, float t) {
  float lanes[8] = {};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int32_t j = 0; j < 8; ++j) lanes[j] += x[i + j] >= t ? x[i + j] : 0.0f;
  }
  double sum = 0;
  for (; i < n; ++i) sum += x[i] >= t ? x[i] : 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

// Sum of c[0, n).value in 4 interleaved chains (fixed order).
template <typename C>
double SumValues(const C* c, int32_t n) {
  double s[4] = {};
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int32_t j = 0; j < 4; ++j) s[j] += c[i + j].value;
  }
  for (; i < n; ++i) s[0] += c[i].value;
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The splitmix64 step: advances `state` and returns a well-mixed 64-bit value.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) from the top 53 bits (portable, unlike
// std::uniform_real_distribution, whose algorithm the standard leaves open).
inline double ToUnit(uint64_t r) { return static_cast<double>(r >> 11) * 0x1.0p-53; }

}  // namespace

// On the bits, without an early exit (integer compares vectorise; float ones
// with NaN did not): +inf and +NaN are 0x7f800000..0x7fffffff, -NaN
// 0xff800001..0xffffffff.
bool LogitsAreNumbers(std::span<const float> logits) {
  uint32_t bad = 0;
  for (const float x : logits) {
    const auto b = std::bit_cast<uint32_t>(x);
    bad |= static_cast<uint32_t>(b - 0x7f800000u < 0x00800000u) |
           static_cast<uint32_t>(b - 0xff800001u < 0x007fffffu);
  }
  return bad == 0;
}

Status ValidateSamplingParams(const SamplingParams& p) {
  // Comparisons are written so that NaN fails them.
  if (!(p.temperature >= 0 && std::isfinite(p.temperature))) {
    return Errorf("sampling: temperature {} out of range [0, inf) (0 = greedy)", p.temperature);
  }
  if (p.top_k < 0) return Errorf("sampling: top_k {} must be >= 0 (0 = off)", p.top_k);
  if (!(p.top_p >= 0 && p.top_p <= 1)) {
    return Errorf("sampling: top_p {} out of range [0, 1]", p.top_p);
  }
  if (!(p.min_p >= 0 && p.min_p <= 1)) {
    return Errorf("sampling: min_p {} out of range [0, 1]", p.min_p);
  }
  if (!(p.repeat_penalty > 0 && std::isfinite(p.repeat_penalty))) {
    return Errorf("sampling: repeat_penalty {} must be > 0 (1 = off)", p.repeat_penalty);
  }
  if (!std::isfinite(p.presence_penalty)) {
    return Errorf("sampling: presence_penalty {} must be a finite number (0 = off)",
                  p.presence_penalty);
  }
  if (!std::isfinite(p.frequency_penalty)) {
    return Errorf("sampling: frequency_penalty {} must be a finite number (0 = off)",
                  p.frequency_penalty);
  }
  for (const std::string& t : p.grammar_triggers)
    if (t.empty()) return Status::Error("sampling: a grammar trigger must not be empty");
  if (!p.grammar_triggers.empty() && !p.grammar)
    return Status::Error("sampling: grammar triggers without a grammar");
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) return Errorf("sampling: logit_bias token id {} must be >= 0", id);
    if (!(bias >= -kLogitBiasLimit && bias <= kLogitBiasLimit))
      return Errorf("sampling: logit_bias for token {}: {} out of range [-100, 100]", id, bias);
  }
  if (p.repeat_last_n < -1) {
    return Errorf("sampling: repeat_last_n {} must be >= -1 (0 = off, -1 = whole history)",
                  p.repeat_last_n);
  }
  return Status::Ok();
}

Status ValidateLogitBias(const SamplingParams& p, int32_t n_vocab) {
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || id >= n_vocab)
      return Errorf("sampling: logit_bias token id {} is out of the vocabulary [0, {})", id,
                    n_vocab);
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& p, int32_t n_vocab) : params_(p), n_vocab_(n_vocab) {
  Status valid = ValidateSamplingParams(p);
  CHECK_MSG(valid.ok(), valid.message().c_str());
  CHECK_GT(n_vocab, 0);
  seed_ = p.seed;
  if (seed_ == kRandomSeed) {
    std::random_device rd;
    // Never kRandomSeed itself, so that seed() can be passed back to reproduce a run.
    do {
      seed_ = (static_cast<uint64_t>(rd()) << 32) | rd();
    } while (seed_ == kRandomSeed);
  }
  rng_.seed(seed_);
  if (!p.logit_bias.empty()) {
    biased_.resize(n_vocab);
    for (const auto& [id, bias] : p.logit_bias) {
      CHECK_MSG(id < n_vocab, "sampling: logit_bias token id out of vocabulary");
      forced_ |= bias >= kLogitBiasLimit;
    }
  }

  // A temperature so small that 1 / T overflows is a greedy one.
  inv_temperature_ = 1.0f / p.temperature;
  greedy_ = !std::isfinite(inv_temperature_);
  int32_t capacity = n_vocab;
  if (greedy_) {
    capacity = 1;
  } else if (p.top_k > 0 && p.top_k < n_vocab) {
    capacity = p.top_k;
  }
  cand_.resize(capacity);
  if (!greedy_ && capacity == n_vocab) probs_.resize(n_vocab);

  const bool any_penalty =
      p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (any_penalty && p.repeat_last_n != 0) {
    counts_.assign(n_vocab, 0);
    if (p.repeat_last_n > 0) {
      // Grows in Accept() up to repeat_last_n, so a huge window costs only what is used.
      ring_.reserve(std::min(p.repeat_last_n, 4096));
    } else {
      distinct_.reserve(n_vocab);
    }
  }
}

float Sampler::Penalize(float logit, int32_t count) const {
  const float p = params_.repeat_penalty;
  float v = std::min(logit > 0 ? logit / p : logit * p, FLT_MAX);
  v -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  return v == v ? std::min(v, FLT_MAX) : kNegInf;  // -inf - -inf: still impossible
}

template <typename F>
void Sampler::ForEachPenalized(F&& fn) {
  if (!penalty_on()) return;
  if (params_.repeat_last_n < 0) {
    for (int32_t t : distinct_) fn(t, counts_[t]);
    return;
  }
  // A token may sit in the window several times but is penalised once: visiting
  // it negates its count, which the second loop restores.
  for (int32_t t : ring_) {
    if (counts_[t] > 0) {
      counts_[t] = -counts_[t];
      fn(t, -counts_[t]);
    }
  }
  for (int32_t t : ring_) {
    if (counts_[t] < 0) counts_[t] = -counts_[t];
  }
}

void Sampler::Accept(int32_t token) {
  CHECK_MSG(token >= 0 && token < n_vocab_, "sampling: Accept() token out of vocabulary");
  if (!penalty_on()) return;
  if (params_.repeat_last_n < 0) {
    if (counts_[token] == 0) distinct_.push_back(token);
    if (counts_[token] < std::numeric_limits<int32_t>::max()) ++counts_[token];
    return;
  }
  if (static_cast<int32_t>(ring_.size()) < params_.repeat_last_n) {
    ring_.push_back(token);
  } else {
    --counts_[ring_[ring_pos_]];
    ring_[ring_pos_] = token;
    ring_pos_ = (ring_pos_ + 1) % params_.repeat_last_n;
  }
  ++counts_[token];
}

void Sampler::Reset() {
  for (int32_t t : ring_) counts_[t] = 0;
  for (int32_t t : distinct_) counts_[t] = 0;
  ring_.clear();
  distinct_.clear();
  ring_pos_ = 0;
  rng_.seed(seed_);
}

int32_t Sampler::SelectTopK(std::span<const float> logits, int32_t k) {
  // cand_[0, size) is a heap whose front is the worst kept candidate; `threshold`
  // is its value once the heap is full, so most logits cost one comparison, made
  // a block at a time.
  Candidate* heap = cand_.data();
  int32_t size = 0;
  float threshold = kNegInf;
  auto offer = [&](float value, int32_t id) {
    const Candidate c{value, id};
    if (size < k) {
      heap[size++] = c;
      std::push_heap(heap, heap + size, Better<Candidate>);
    } else if (Better(c, heap[0])) {
      std::pop_heap(heap, heap + size, Better<Candidate>);
      heap[size - 1] = c;
      std::push_heap(heap, heap + size, Better<Candidate>);
    } else {
      return;
    }
    if (size == k) threshold = heap[0].value;
  };

  const float* l = logits.data();
  const int32_t* counts = penalty_on() ? counts_.data() : nullptr;
  auto scan = [&](int32_t begin, int32_t end) {
    for (int32_t i = begin; i < end; ++i) {
      const float v = l[i];
      // Ids rise through the scan, so a value equal to the threshold loses its
      // tie. NaN and -inf fail this test too.
      if (!(v > threshold)) continue;
      if (counts != nullptr && counts[i] != 0) continue;  // offered below, penalised
      offer(std::min(v, FLT_MAX), i);
    }
  };
  constexpr int32_t kBlock = 32;
  int32_t i = 0;
  for (; i + kBlock <= n_vocab_; i += kBlock) {
    if (AnyAbove<kBlock>(l + i, threshold)) scan(i, i + kBlock);
  }
  scan(i, n_vocab_);
  ForEachPenalized([&](int32_t t, int32_t count) {
    const float v = Penalize(Sanitize(l[t]), count);
    if (v > kNegInf) offer(v, t);
  });
  std::sort_heap(heap, heap + size, Better<Candidate>);
  return size;
}

bool Sampler::ProbabilitiesDense(std::span<const float> logits, double* mass) {
  if (SelectTopK(logits, 1) == 0) return false;
  const float max = cand_[0].value;  // of the penalised logits
  const float* l = logits.data();
  float* q = probs_.data();

  // Softmax numerators (the max maps to 1), then their sum in 8 fixed lanes:
  // both loops vectorise and the sum stays deterministic.
  // No Sanitize() needed: NaN and -inf come out 0, +inf (max is FLT_MAX then) 1.
  const float inv_t = inv_temperature_;
  const int32_t n = n_vocab_;
  for (int32_t i = 0; i < n; ++i) q[i] = ExpNonPositive((l[i] - max) * inv_t);
  *mass = SumFloats(q, n);
  // Penalised tokens got their raw logits above; put in their penalised ones.
  ForEachPenalized([&](int32_t t, int32_t count) {
    const float penalized = ExpNonPositive((Penalize(Sanitize(l[t]), count) - max) * inv_t);
    *mass += static_cast<double>(penalized) - q[t];
    q[t] = penalized;
  });
  return true;
}

int32_t Sampler::Compact(float keep_from) {
  // Usually few tokens are kept: whole blocks without one are skipped.
  const float above = std::nextafter(keep_from, 0.0f);  // q >= keep_from <=> q > above
  const float* q = probs_.data();
  Candidate* c = cand_.data();
  int32_t n = 0;
  auto compact = [&](int32_t begin, int32_t end) {
    for (int32_t i = begin; i < end; ++i) {
      c[n] = {q[i], i};
      n += q[i] > above;
    }
  };
  constexpr int32_t kBlock = 32;
  int32_t i = 0;
  for (; i + kBlock <= n_vocab_; i += kBlock) {
    if (AnyAbove<kBlock>(q + i, above)) compact(i, i + kBlock);
  }
  compact(i, n_vocab_);
  return n;
}

int32_t Sampler::TopPSorted(int32_t n, double mass, double* kept_mass) {
  const Candidate* c = cand_.data();
  const double target = static_cast<double>(params_.top_p) * mass;
  double cum = 0;
  for (int32_t i = 0; i < n; ++i) {
    cum += c[i].value;
    if (cum >= target) {
      *kept_mass = cum;
      return i + 1;
    }
  }
  *kept_mass = cum;
  return n;
}

int32_t Sampler::TopPUnsorted(int32_t n, double mass, double* kept_mass) {
  // A quickselect on probability mass: moves the best candidates to the front
  // until the smallest set reaching the target is found, in expected O(n). The
  // kept set is left in an order fixed by this code alone (not by std::).
  Candidate* c = cand_.data();
  const double target = static_cast<double>(params_.top_p) * mass;
  int32_t lo = 0, hi = n;  // the answer lies in [lo, hi); c[0, lo) are kept
  double before = 0;       // mass of c[0, lo)
  uint64_t state = 0;      // pivot positions: pseudo-random but fixed, so no input is adversarial
  auto pick = [&] { return &c[lo + static_cast<int32_t>(SplitMix64(state) % (hi - lo))]; };
  while (hi - lo > 32) {
    const Candidate* a = pick();
    const Candidate* b = pick();
    const Candidate* d = pick();
    if (Better(*b, *a)) std::swap(a, b);
    if (Better(*d, *b)) b = Better(*d, *a) ? a : d;
    const Candidate pivot = *b;  // the median of the three
    // Branch-free Lomuto partition of [lo, hi): better than the pivot first.
    int32_t i = lo;
    for (int32_t k = lo; k < hi; ++k) {
      const Candidate x = c[k];
      const bool better = (x.value > pivot.value) | ((x.value == pivot.value) & (x.id < pivot.id));
      c[k] = c[i];
      c[i] = x;
      i += better;
    }
    const double left = SumValues(c + lo, i - lo);
    if (i > lo && before + left >= target) {
      hi = i;
      continue;
    }
    // The pivot is the best of [i, hi): bring it to i and take it.
    int32_t p = i;
    while (c[p].id != pivot.id) ++p;
    std::swap(c[i], c[p]);
    before += left + pivot.value;
    lo = i + 1;
    if (before >= target) {
      *kept_mass = before;
      return lo;
    }
  }
  std::sort(c + lo, c + hi, Better<Candidate>);
  for (int32_t i = lo; i < hi; ++i) {
    before += c[i].value;
    if (before >= target) {
      *kept_mass = before;
      return i + 1;
    }
  }
  *kept_mass = before;
  return hi;
}

double Sampler::Mass(int32_t n) const { return SumValues(cand_.data(), n); }

int32_t Sampler::Draw(uint64_t random, int32_t n, double total) const {
  const Candidate* c = cand_.data();
  const double u = ToUnit(random) * total;
  double cum = 0;
  for (int32_t i = 0; i < n; ++i) {
    cum += c[i].value;
    if (u < cum) return c[i].id;
  }
  // Only rounding gets here: take the last token with a non-zero probability.
  int32_t i = n - 1;
  while (i > 0 && c[i].value == 0) --i;
  return c[i].id;
}

int32_t Sampler::DrawDense(uint64_t random, double total) const {
  // probs_ in id order; whole blocks are skipped on their (vectorised) sums.
  const float* q = probs_.data();
  const double u = ToUnit(random) * total;
  double cum = 0;
  constexpr int32_t kBlock = 256;
  int32_t i = 0;
  for (; i + kBlock <= n_vocab_; i += kBlock) {
    const double block = SumFloats(q + i, kBlock);
    if (u < cum + block) break;
    cum += block;
  }
  for (; i < n_vocab_; ++i) {
    cum += q[i];
    if (u < cum) return i;
  }
  i = n_vocab_ - 1;  // rounding: the last token with a non-zero probability
  while (i > 0 && q[i] == 0) --i;
  return i;
}

int32_t Sampler::Fallback(std::span<const float> logits) const {
  // Every logit is -inf or NaN: the lowest id that is not NaN (argmax tie rule).
  for (int32_t i = 0; i < n_vocab_; ++i) {
    if (!std::isnan(logits[i])) return i;
  }
  return 0;
}

int32_t Sampler::SampleTopK(std::span<const float> logits, uint64_t random) {
  const int32_t n = SelectTopK(logits, params_.top_k);
  if (n == 0) return Fallback(logits);
  // Survivors are sorted, so min-p keeps a prefix and top-p needs no sorting.
  const float max = cand_[0].value;
  const float keep_from = params_.min_p > 0 ? params_.min_p : FLT_TRUE_MIN;
  double mass = 0;
  int32_t kept = n;
  for (int32_t i = 0; i < n; ++i) {
    const float q = ExpNonPositive((cand_[i].value - max) * inv_temperature_);
    cand_[i].value = q;
    mass += q;
    if (kept == n && q < keep_from) kept = i;
  }
  kept = std::max(kept, 1);  // q[0] == 1 always passes; belt and braces
  double total = 0;
  if (params_.top_p < 1.0f) {
    kept = TopPSorted(kept, mass, &total);
  } else {
    total = Mass(kept);
  }
  return Draw(random, kept, total);
}

int32_t Sampler::SampleAll(std::span<const float> logits, uint64_t random) {
  double mass = 0;
  if (!ProbabilitiesDense(logits, &mass)) return Fallback(logits);
  const bool top_p_on = params_.top_p < 1.0f;
  if (params_.min_p == 0 && !top_p_on) return DrawDense(random, mass);  // nothing to cut
  // Min-p is q >= min_p (q is relative to the max). Zero-probability tokens go
  // too: they can never be drawn.
  float keep_from = params_.min_p > 0 ? params_.min_p : FLT_TRUE_MIN;
  if (top_p_on) {
    // The tokens with q >= bound form a prefix of the sorted order; if their mass
    // reaches the target, the nucleus lies inside it and top-p need see no others.
    const double target = static_cast<double>(params_.top_p) * mass;
    for (float bound : {0x1p-8f, 0x1p-16f}) {
      if (bound <= keep_from) break;
      if (MassAbove(probs_.data(), n_vocab_, bound) >= target) {
        keep_from = bound;
        break;
      }
    }
  }
  int32_t n = Compact(keep_from);
  double total = 0;
  if (top_p_on) {
    n = TopPUnsorted(n, mass, &total);
  } else {
    total = Mass(n);
  }
  return Draw(random, n, total);
}

std::span<const float> Sampler::Bias(std::span<const float> logits) {
  float* b = biased_.data();
  if (forced_) {
    // Only the +100 tokens stay, with their own logits (the model chooses among them).
    std::fill(biased_.begin(), biased_.end(), kNegInf);
    for (const auto& [id, bias] : params_.logit_bias)
      if (bias >= kLogitBiasLimit) b[id] = logits[id];
    return biased_;
  }
  std::copy(logits.begin(), logits.end(), b);
  for (const auto& [id, bias] : params_.logit_bias)
    b[id] = bias <= -kLogitBiasLimit ? kNegInf : b[id] + bias;
  return biased_;
}

int32_t Sampler::Sample(std::span<const float> logits) {
  CHECK_MSG(logits.size() == static_cast<size_t>(n_vocab_), "sampling: logits size != n_vocab");
  if (!biased_.empty()) logits = Bias(logits);
  if (greedy_) return SelectTopK(logits, 1) == 1 ? cand_[0].id : Fallback(logits);
  // Drawn up front so every non-greedy call consumes exactly one number.
  const uint64_t random = rng_();
  if (params_.top_k > 0 && params_.top_k < n_vocab_) return SampleTopK(logits, random);
  return SampleAll(logits, random);
}

}  // namespace rotor
