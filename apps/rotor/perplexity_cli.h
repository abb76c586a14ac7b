// rotor perplexity: the pieces shared by its chunked and stream modes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/perplexity.h"
#include "kv_args/kv_args.h"

namespace rotor::cli {

struct PerplexityArgs {
  std::string model_path;
  int n_threads = 0;
  int n_ctx = 0;           // chunk size (chunked mode) or cache context (stream); 0 = default
  bool ctx_given = false;  // -c was on the command line
  std::string text_file;
  int n_chunks = -1;
  int prefill_step = 512;
  // KV options; lists run every combination.
  KvLists kv;  // every KV option as a list (kv_args.h)
  // KL divergence against a full-cache base.
  std::string kl_base;
  bool kl_read = false;
  // Stream mode.
  int64_t stream = 0;
  int64_t window = 1000;
  std::string csv;
  std::string plot;
  bool no_progress = false;
};

// One configuration to score.
struct PerplexityRun {
  std::string label;  // the policy, then what tells its runs apart: "sink-128-compact"
  KvConfig kv;        // as given (size 0 = the context)
  KvConfig resolved;  // against the context it was expanded for
};

// Every combination of the KV lists, full once, each checked against a context
// of n_ctx tokens (errors name the flag).
Result<std::vector<PerplexityRun>> ExpandPerplexityRuns(const PerplexityArgs& a, const Model& model,
                                                        int n_ctx);

// Everything a mode needs: the loaded engine and the tokenized text.
struct PerplexityInput {
  const PerplexityArgs* args = nullptr;
  Engine* engine = nullptr;
  std::vector<int32_t> tokens;
};

int RunChunkedPerplexity(const PerplexityInput& in);
int RunStreamPerplexity(const PerplexityInput& in);

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled);
  ~ProgressBar();
  void Start(std::string label, int64_t total);
  void Update(int64_t done);
  void Clear();  // erases the line (before printing to the same terminal)
  void Finish();

 private:
  void Draw();
  bool enabled_;
  std::string label_;
  int64_t total_ = 0, done_ = 0;
  int64_t start_ns_ = 0, last_draw_ns_ = 0;
  bool drawn_ = false;
};

std::string FileName(const std::string& path);  // the last path component

}  // namespace rotor::cli
