#include "cli_common.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rotor::cli {

int Fail(const Status& status) {
  fmt::print(stderr, "rotor: error: {}\n", status.message());
  return 1;
}

void AddEngineOptions(CLI::App* app, EngineOptions* o) {
  o->model_path = kDefaultModel;
  app->add_option("-m,--model", o->model_path, "GGUF model file")->capture_default_str();
  app->add_option("-t,--threads", o->n_threads, "threads (default: all hardware threads)")
      ->check(CLI::Range(1, 1024));
  app->add_option("-c,--ctx-size", o->n_ctx, "context size per sequence (0 = the model's)")
      ->check(CLI::Range(0, 1 << 24));
}

void AddSamplingOptions(CLI::App* app, SamplingParams* p) {
  app->add_option("--temp", p->temperature, "temperature (0 = greedy)")->capture_default_str();
  app->add_option("--top-k", p->top_k, "top-k (0 = off)")->capture_default_str();
  app->add_option("--top-p", p->top_p, "top-p (1 = off)")->capture_default_str();
  app->add_option("--min-p", p->min_p, "min-p (0 = off)")->capture_default_str();
  app->add_option("--repeat-penalty", p->repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str();
  app->add_option("--repeat-last-n", p->repeat_last_n,
                  "tokens the penalty looks back over (0 = off, -1 = all)")
      ->capture_default_str();
  app->add_option("-s,--seed", p->seed, "RNG seed (default: random)");
}

void AddKvOptions(CLI::App* app, KvConfig* kv) {
  static const std::map<std::string, KvPolicy> kPolicies = {
      {"full", KvPolicy::kFull}, {"sink", KvPolicy::kSink}, {"window", KvPolicy::kWindow},
      {"h2o", KvPolicy::kH2o}};
  static const std::map<std::string, RopeK> kRope = {{"cached", RopeK::kCached},
                                                     {"deferred", RopeK::kDeferred}};
  static const std::map<std::string, KvType> kTypes = {{"f32", KvType::kF32},
                                                      {"f16", KvType::kF16}};
  static const std::map<std::string, KvPositions> kPositions = {
      {"original", KvPositions::kOriginal}, {"compact", KvPositions::kCompact}};
  app->add_option("--kv", kv->policy, "KV cache policy: full|sink|window|h2o")
      ->transform(CLI::CheckedTransformer(kPolicies, CLI::ignore_case));
  app->add_option("--kv-size", kv->size, "cells per sequence (0 = the context size)")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option("--kv-keep", kv->keep, "sink tokens never evicted (sink)")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option("--kv-recent", kv->recent, "recent window of h2o (default: size / 2)")
      ->check(CLI::Range(-1, 1 << 24));
  app->add_option("--rope-k", kv->rope_k, "keys stored after RoPE (cached) or before (deferred)")
      ->transform(CLI::CheckedTransformer(kRope, CLI::ignore_case));
  app->add_option("--kv-type", kv->type,
                  "element type of stored K and V: f32 (exact) | f16 (half the memory and reads)")
      ->transform(CLI::CheckedTransformer(kTypes, CLI::ignore_case));
  app->add_option("--kv-positions", kv->positions,
                  "positions after eviction: original|compact")
      ->transform(CLI::CheckedTransformer(kPositions, CLI::ignore_case));
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Errorf("cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Errorf("cannot read '{}'", path);
  return ss.str();
}

std::string HumanBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", bytes / double(1 << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", bytes / double(1 << 20));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

}  // namespace rotor::cli
