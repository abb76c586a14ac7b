#include "eval/perplexity.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "base/check.h"

namespace rotor {

static_assert(std::endian::native == std::endian::little, "the KL base format is little-endian");

// ---- Statistics.

MeanError MeanAndError(double sum, double sum2, int64_t count) {
  if (count < 1) return {};
  const double mean = sum / count;
  const double var = sum2 / count - mean * mean;
  return {mean, var > 0 && count > 1 ? std::sqrt(var / (count - 1)) : 0.0};
}

double Percentile(std::span<const float> sorted, double fraction) {
  if (sorted.empty()) return 0;
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * (sorted.size() - 1);
  const size_t i = static_cast<size_t>(p);
  const double t = p - i;
  return (1 - t) * sorted[i] + t * sorted[std::min(i + 1, sorted.size() - 1)];
}

double NllStats::Ppl() const { return count > 0 ? std::exp(sum / count) : 0.0; }
double NllStats::PplError() const { return Ppl() * MeanAndError(sum, sum2, count).error; }

namespace {

// max logit, its index, and log(sum exp(logit - max)) in double.
struct RowNorm {
  float max;
  int32_t argmax;
  double log_sum;
};

RowNorm Normalize(std::span<const float> logits) {
  RowNorm r{logits[0], 0, 0};
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > r.max) r.max = logits[i], r.argmax = static_cast<int32_t>(i);
  double sum = 0;
  for (float l : logits) sum += std::exp(l - r.max);
  r.log_sum = std::log(sum);
  return r;
}

}  // namespace

double TokenNll(std::span<const float> logits, int32_t target) {
  const RowNorm r = Normalize(logits);
  return r.log_sum - static_cast<double>(logits[target] - r.max);
}

int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<int32_t> TokenizeForScoring(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> tokens = tokenizer.Encode(text, /*add_special=*/true);
  if (tokenizer.add_eos() && !tokens.empty() && tokens.back() == tokenizer.eos()) tokens.pop_back();
  return tokens;
}

// ---- KL base file.

namespace {

constexpr char kMagic[8] = {'R', 'O', 'T', 'O', 'R', 'K', 'L', 'B'};
constexpr uint32_t kVersion = 1;
// Log-probabilities more than this below the top one are stored as the floor.
constexpr float kLogProbRange = 32.f;
constexpr size_t kRowHeader = 16;  // nll, lo, step (f32), top1 (i32)

size_t RowBytes(int n_vocab) { return kRowHeader + 2 * static_cast<size_t>(n_vocab); }
int ScoredPerChunk(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }

template <typename T>
void Put(std::vector<unsigned char>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void PutString(std::vector<unsigned char>& out, const std::string& s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

template <typename T>
bool Get(std::FILE* f, T* v) {
  return std::fread(v, sizeof(T), 1, f) == 1;
}

bool GetString(std::FILE* f, std::string* s) {
  uint32_t n = 0;
  if (!Get(f, &n) || n > (1u << 20)) return false;
  s->resize(n);
  return n == 0 || std::fread(s->data(), 1, n, f) == n;
}

uint64_t Fnv1a(uint64_t h, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

Result<uint64_t> ModelFingerprint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Errorf("cannot open '{}': {}", path, std::strerror(errno));
  std::fseek(f, 0, SEEK_END);
  const int64_t size = std::ftell(f);
  uint64_t h = Fnv1a(0xcbf29ce484222325ull, reinterpret_cast<const unsigned char*>(&size), 8);
  std::vector<unsigned char> buf(1 << 20);
  auto hash_at = [&](int64_t offset, size_t n) {
    std::fseek(f, offset, SEEK_SET);
    const size_t got = std::fread(buf.data(), 1, n, f);
    h = Fnv1a(h, buf.data(), got);
  };
  hash_at(0, buf.size());
  constexpr int kSamples = 64;
  constexpr int64_t kBlock = 4096;
  if (size > kBlock)
    for (int i = 0; i < kSamples; ++i) hash_at((size - kBlock) / (kSamples - 1) * i, kBlock);
  std::fclose(f);
  return h;
}

Result<std::unique_ptr<KlBaseWriter>> KlBaseWriter::Create(const std::string& path,
                                                           const KlBaseInfo& info) {
  if (info.n_vocab <= 0 || info.n_ctx < 2 || info.n_chunks <= 0 ||
      info.tokens.size() != static_cast<size_t>(info.n_ctx) * info.n_chunks)
    return Errorf("kl base: inconsistent header for '{}'", path);
  std::unique_ptr<KlBaseWriter> w(new KlBaseWriter());
  w->path_ = path;
  w->f_ = std::fopen(path.c_str(), "wb");
  if (w->f_ == nullptr) return Errorf("cannot create '{}': {}", path, std::strerror(errno));
  std::vector<unsigned char> h(kMagic, kMagic + 8);
  Put<uint32_t>(h, kVersion);
  Put<uint32_t>(h, info.n_vocab);
  Put<uint32_t>(h, info.n_ctx);
  Put<uint32_t>(h, info.n_chunks);
  Put<uint64_t>(h, info.model_fingerprint);
  PutString(h, info.model);
  PutString(h, info.text);
  PutString(h, info.kv);
  for (int32_t t : info.tokens) Put<int32_t>(h, t);
  if (std::fwrite(h.data(), 1, h.size(), w->f_) != h.size())
    return Errorf("cannot write '{}': {}", path, std::strerror(errno));
  w->rows_left_ = static_cast<int64_t>(info.n_chunks) * ScoredPerChunk(info.n_ctx);
  w->buf_.resize(RowBytes(info.n_vocab));
  return w;
}

KlBaseWriter::~KlBaseWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

Status KlBaseWriter::AddRow(std::span<const float> logits, int32_t target) {
  if (rows_left_ <= 0) return Errorf("kl base: '{}' already holds every row", path_);
  const size_t n_vocab = logits.size();
  if (buf_.size() != RowBytes(static_cast<int>(n_vocab)))
    return Errorf("kl base: a row of {} logits does not match the header", n_vocab);
  const RowNorm r = Normalize(logits);
  const double log_z = r.max + r.log_sum;  // log p(i) = logit(i) - log_z
  const float top = static_cast<float>(r.max - log_z);
  const float min_logit = *std::min_element(logits.begin(), logits.end());
  const float lo = std::max(static_cast<float>(min_logit - log_z), top - kLogProbRange);
  const float step = (top - lo) / 65535.f;
  const float nll = static_cast<float>(log_z - logits[target]);
  std::memcpy(buf_.data(), &nll, 4);
  std::memcpy(buf_.data() + 4, &lo, 4);
  std::memcpy(buf_.data() + 8, &step, 4);
  std::memcpy(buf_.data() + 12, &r.argmax, 4);
  unsigned char* codes = buf_.data() + kRowHeader;
  for (size_t i = 0; i < n_vocab; ++i) {
    const double q = step > 0 ? (logits[i] - log_z - lo) / step : 0.0;
    const uint16_t c = static_cast<uint16_t>(std::clamp(std::lround(q), 0l, 65535l));
    std::memcpy(codes + 2 * i, &c, 2);
  }
  if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
    return Errorf("cannot write '{}': {}", path_, std::strerror(errno));
  --rows_left_;
  return Status::Ok();
}

Status KlBaseWriter::Close() {
  if (f_ == nullptr) return Status::Ok();
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok) return Errorf("cannot write '{}': {}", path_, std::strerror(errno));
  if (rows_left_ != 0) return Errorf("kl base: '{}' is missing {} rows", path_, rows_left_);
  return Status::Ok();
}

Result<std::unique_ptr<KlBaseReader>> KlBaseReader::Open(const std::string& path) {
  std::unique_ptr<KlBaseReader> r(new KlBaseReader());
  r->path_ = path;
  r->f_ = std::fopen(path.c_str(), "rb");
  if (r->f_ == nullptr) return Errorf("cannot open '{}': {}", path, std::strerror(errno));
  std::FILE* f = r->f_;
  char magic[8];
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, kMagic, 8) != 0)
    return Errorf("'{}' is not a rotor KL base (no ROTORKLB header)", path);
  uint32_t version = 0, n_vocab = 0, n_ctx = 0, n_chunks = 0;
  if (!Get(f, &version) || version != kVersion)
    return Errorf("'{}': KL base version {} is not supported (expected {})", path, version,
                  kVersion);
  KlBaseInfo& info = r->info_;
  if (!Get(f, &n_vocab) || !Get(f, &n_ctx) || !Get(f, &n_chunks) ||
      !Get(f, &info.model_fingerprint) || !GetString(f, &info.model) || !GetString(f, &info.text) ||
      !GetString(f, &info.kv))
    return Errorf("'{}': truncated KL base header", path);
  if (n_vocab == 0 || n_vocab > (1u << 24) || n_ctx < 2 || n_ctx > (1u << 24) || n_chunks == 0 ||
      n_chunks > (1u << 24))
    return Errorf("'{}': implausible KL base header (n_vocab {}, n_ctx {}, n_chunks {})", path,
                  n_vocab, n_ctx, n_chunks);
  info.n_vocab = static_cast<int32_t>(n_vocab);
  info.n_ctx = static_cast<int32_t>(n_ctx);
  info.n_chunks = static_cast<int32_t>(n_chunks);
  // The token ids are n_ctx * n_chunks (up to 2^48) u32s: check the file has them
  // before allocating for them.
  const int64_t at = std::ftell(f);
  std::fseek(f, 0, SEEK_END);
  const int64_t file_bytes = std::ftell(f);
  std::fseek(f, at, SEEK_SET);
  if (static_cast<int64_t>(n_ctx) * n_chunks * 4 > file_bytes - at)
    return Errorf("'{}': truncated KL base: {} bytes cannot hold {} chunks of {} tokens", path,
                  file_bytes, n_chunks, n_ctx);
  info.tokens.resize(static_cast<size_t>(n_ctx) * n_chunks);
  if (std::fread(info.tokens.data(), 4, info.tokens.size(), f) != info.tokens.size())
    return Errorf("'{}': truncated KL base (tokens)", path);
  r->rows_left_ = static_cast<int64_t>(n_chunks) * ScoredPerChunk(info.n_ctx);
  r->buf_.resize(RowBytes(info.n_vocab));
  const int64_t here = std::ftell(f);
  std::fseek(f, 0, SEEK_END);
  const int64_t expected = here + r->rows_left_ * static_cast<int64_t>(r->buf_.size());
  if (std::ftell(f) != expected)
    return Errorf("'{}': KL base is {} bytes, its header promises {} (truncated or corrupt)", path,
                  std::ftell(f), expected);
  std::fseek(f, here, SEEK_SET);
  return r;
}

KlBaseReader::~KlBaseReader() {
  if (f_ != nullptr) std::fclose(f_);
}

Status KlBaseReader::NextRow(KlBaseRow* row) {
  if (rows_left_ <= 0) return Errorf("'{}': no more rows in the KL base", path_);
  if (std::fread(buf_.data(), 1, buf_.size(), f_) != buf_.size())
    return Errorf("'{}': cannot read a KL base row", path_);
  --rows_left_;
  std::memcpy(&row->nll, buf_.data(), 4);
  std::memcpy(&row->lo, buf_.data() + 4, 4);
  std::memcpy(&row->step, buf_.data() + 8, 4);
  std::memcpy(&row->top1, buf_.data() + 12, 4);
  row->code.resize(info_.n_vocab);
  std::memcpy(row->code.data(), buf_.data() + kRowHeader, 2 * row->code.size());
  // The row as KlBaseWriter makes it (the format has no checksum: a damaged
  // row gave NaN or infinite statistics that printed, with exit status 0).
  const int64_t index = rows_read_++;
  const float top = row->lo + 65535.f * row->step;  // log p of the most likely token
  const char* what = nullptr;
  if (!std::isfinite(row->nll) || row->nll < -1e-3f)
    what = "its -log p is not a number >= 0";
  else if (!std::isfinite(row->lo) || !std::isfinite(row->step) || row->step < 0 ||
           top > 1e-3f || top < -std::log(static_cast<float>(info_.n_vocab)) - 1e-3f ||
           row->lo < top - kLogProbRange - 1e-3f)
    what = "its log-probability range is impossible";
  else if (row->top1 < 0 || row->top1 >= info_.n_vocab ||
           (row->step > 0 && row->code[row->top1] != 65535))
    what = "its most likely token is not one";
  if (what == nullptr) {
    // The probabilities, for KlStats::Add too: their sum is 1 within the
    // 16-bit codes' rounding.
    row->p.resize(row->code.size());
    double sum = 0;
    for (size_t i = 0; i < row->code.size(); ++i) {
      row->p[i] =
          std::exp(static_cast<double>(row->lo) + static_cast<double>(row->step) * row->code[i]);
      sum += row->p[i];
    }
    row->p_sum = sum;
    if (!(std::fabs(sum - 1.0) < 0.01)) what = "its probabilities do not sum to 1";
  }
  if (what != nullptr)
    return Errorf("'{}': row {} of the KL base is damaged ({}); delete it and run the full cache "
                  "with --kl-base again to write it",
                  path_, index, what);
  return Status::Ok();
}

double KlStats::Add(std::span<const float> logits, int32_t target, const KlBaseRow& base) {
  const RowNorm r = Normalize(logits);
  const double log_z = r.max + r.log_sum;
  const double nll_q = r.log_sum - static_cast<double>(logits[target] - r.max);
  // KL(base || policy) = sum_i p_base(i) * (log p_base(i) - log p_policy(i)),
  // with the base's 16-bit log-probabilities renormalised (sum s), so that the
  // estimate is a true divergence: never negative, 0 only for equal rows.
  CHECK_EQ(base.p.size(), logits.size());
  double a = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double lp_base = base.lo + static_cast<double>(base.step) * base.code[i];
    a += base.p[i] * (lp_base - (logits[i] - log_z));
  }
  const double s = base.p_sum;
  const double kl = a / s - std::log(s);
  nll.Add(nll_q);
  nll_base.Add(base.nll);
  sum_nll_nll_base += nll_q * base.nll;
  sum_kld += kl;
  sum_kld2 += kl * kl;
  same_top += r.argmax == base.top1;
  kld.push_back(static_cast<float>(kl));
  return nll_q;
}

MeanError KlStats::SameTop() const {
  const int64_t n = count();
  if (n < 1) return {};
  const double p = static_cast<double>(same_top) / n;
  return {p, n > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : 0.0};
}

MeanError KlStats::LogPplRatio() const {
  const int64_t n = count();
  const MeanError a = MeanAndError(nll.sum, nll.sum2, n);
  const MeanError b = MeanAndError(nll_base.sum, nll_base.sum2, n);
  double cov = 0;
  if (n > 1) cov = (sum_nll_nll_base / n - a.mean * b.mean) / (n - 1);
  const double var = a.error * a.error + b.error * b.error - 2 * cov;
  return {a.mean - b.mean, var > 0 ? std::sqrt(var) : 0.0};
}

double KlStats::KldPercentile(double fraction) const {
  std::vector<float> sorted = kld;
  std::sort(sorted.begin(), sorted.end());
  return Percentile(sorted, fraction);
}

// ---- Chunked perplexity.

Result<int> CountChunks(int64_t n_tokens, int n_ctx, int n_chunks) {
  // A chunk scores its positions n_ctx / 2 .. n_ctx - 2: none below 3 tokens.
  if (ScoredPerChunk(n_ctx) < 1)
    return Errorf(
        "perplexity: -c {} is too small: a chunk scores its second half (positions -c/2 .. "
        "-c - 2), which needs at least 3 tokens",
        n_ctx);
  const int64_t available = n_tokens / n_ctx;
  if (available < 1)
    return Errorf("perplexity: the text has {} tokens, fewer than one chunk of -c {}", n_tokens,
                  n_ctx);
  if (n_chunks == 0) return Status::Error("perplexity: --chunks 0 scores nothing");
  return static_cast<int>(n_chunks < 0 ? available : std::min<int64_t>(n_chunks, available));
}

namespace {

Status CheckBase(const KlBaseInfo& base, int n_vocab, int n_ctx, int n_chunks,
                 std::span<const int32_t> tokens) {
  if (base.n_vocab != n_vocab)
    return Errorf(
        "the KL base was made with a vocabulary of {} tokens, this model has {} (model "
        "of the base: {})",
        base.n_vocab, n_vocab, base.model);
  if (base.n_ctx != n_ctx)
    return Errorf("the KL base was made with -c {}, this run uses -c {}", base.n_ctx, n_ctx);
  if (base.n_chunks < n_chunks)
    return Errorf("the KL base holds {} chunks, this run scores {} (use --chunks {})",
                  base.n_chunks, n_chunks, base.n_chunks);
  const size_t n = static_cast<size_t>(n_chunks) * n_ctx;
  const auto [a, b] = std::mismatch(tokens.begin(), tokens.begin() + n, base.tokens.begin());
  if (a != tokens.begin() + n)
    return Errorf("the KL base was made from a different text ({}): token {} is {} there, {} here",
                  base.text, a - tokens.begin(), *b, *a);
  return Status::Ok();
}

}  // namespace

Result<PerplexityResult> ChunkedPerplexity(Runner& runner, int32_t bos,
                                           std::span<const int32_t> tokens,
                                           const PerplexityOptions& o,
                                           const PerplexityHooks& hooks) {
  const Model& model = runner.model();
  const int n_vocab = model.config().n_vocab;
  const int n_ctx = o.n_ctx;
  ASSIGN_OR_RETURN(const int n_chunks,
                   CountChunks(static_cast<int64_t>(tokens.size()), n_ctx, o.n_chunks));
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                   KvCache::Create(model.kv_shape(n_ctx), o.kv));
  if (hooks.compare_base != nullptr) {
    Status s = CheckBase(hooks.compare_base->info(), n_vocab, n_ctx, n_chunks, tokens);
    if (!s.ok()) return s.WithContext("perplexity");
  }
  PerplexityResult r;
  r.n_chunks = n_chunks;
  r.first = n_ctx / 2;
  r.token_nll.reserve(static_cast<size_t>(n_chunks) * ScoredPerChunk(n_ctx));
  if (hooks.compare_base != nullptr) r.kl = std::make_unique<KlStats>();
  std::vector<int32_t> chunk(n_ctx);
  KlBaseRow base_row;
  for (int c = 0; c < n_chunks; ++c) {
    std::span<const int32_t> text = tokens.subspan(static_cast<size_t>(c) * n_ctx, n_ctx);
    std::copy(text.begin(), text.end(), chunk.begin());
    if (bos >= 0) chunk[0] = bos;
    cache->Clear();
    // The unscored first half is the prompt; the scored half runs as if generated.
    Feed feed{.cache = cache.get(), .tokens = chunk, .n_prompt = r.first, .logits_from = r.first};
    RETURN_IF_ERROR(runner.Run(feed, [&](int64_t p0, int64_t n, const float* logits) {
      for (int64_t p = p0; p < std::min<int64_t>(p0 + n, n_ctx - 1); ++p) {
        std::span<const float> row(logits + (p - p0) * n_vocab, n_vocab);
        const int32_t target = text[p + 1];
        double nll = 0;
        if (hooks.compare_base != nullptr) {
          RETURN_IF_ERROR(hooks.compare_base->NextRow(&base_row));
          nll = r.kl->Add(row, target, base_row);
        } else {
          nll = TokenNll(row, target);
        }
        r.nll.Add(nll);
        r.token_nll.push_back(static_cast<float>(nll));
        if (hooks.write_base != nullptr) RETURN_IF_ERROR(hooks.write_base->AddRow(row, target));
      }
      return Status::Ok();
    }));
    r.running_ppl.push_back(r.nll.Ppl());
    if (hooks.on_tokens) hooks.on_tokens(static_cast<int64_t>(c + 1) * n_ctx);
    if (hooks.on_chunk) hooks.on_chunk(c, r);
  }
  return r;
}

// ---- Stream.

Result<std::vector<float>> StreamNll(Runner& runner, std::span<const int32_t> tokens,
                                     const StreamOptions& o,
                                     const std::function<void(int64_t)>& on_tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) return Errorf("stream: {} tokens: at least 2 are needed to predict one", n);
  const Model& model = runner.model();
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                   KvCache::Create(model.kv_shape(o.n_ctx), o.kv));
  if (!FitsCache(*cache, n).ok())
    return Errorf(
        "stream: the {} cache has room for {} tokens: a stream of {} needs -c {} or more "
        "(it is {})",
        cache->config().policy, cache->Remaining(), n, n, o.n_ctx);
  const int n_vocab = model.config().n_vocab;
  std::vector<float> nll(n - 1);
  // The first min(n, n_ctx) tokens are the prompt; the rest run as if generated.
  Feed feed{.cache = cache.get(), .tokens = tokens, .n_prompt = std::min<int64_t>(n, o.n_ctx)};
  RETURN_IF_ERROR(runner.Run(feed, [&](int64_t p0, int64_t rows, const float* logits) {
    for (int64_t p = p0; p < std::min(p0 + rows, n - 1); ++p)
      nll[p] = static_cast<float>(
          TokenNll(std::span<const float>(logits + (p - p0) * n_vocab, n_vocab), tokens[p + 1]));
    if (on_tokens) on_tokens(p0 + rows);
    return Status::Ok();
  }));
  return nll;
}

std::vector<WindowPpl> WindowPerplexity(std::span<const float> nll, int64_t window) {
  std::vector<WindowPpl> out;
  if (window <= 0) return out;
  const int64_t n_pos = static_cast<int64_t>(nll.size()) + 1;  // positions 0 .. n_pos - 1
  for (int64_t begin = 0; begin < n_pos; begin += window) {
    WindowPpl w;
    w.begin = begin;
    w.end = std::min(n_pos, begin + window);
    double sum = 0;
    for (int64_t pos = std::max<int64_t>(begin, 1); pos < w.end; ++pos) sum += nll[pos - 1];
    w.n = w.end - std::max<int64_t>(begin, 1);
    if (w.n <= 0) continue;
    w.ppl = std::exp(sum / w.n);
    out.push_back(w);
  }
  return out;
}

}  // namespace rotor
