// rotor bench: end-to-end prompt processing (pp) and generation (tg) speed in
// llama-bench's style, with the machine's roofline beside it. Only the
// table/data goes to stdout; progress and errors go to stderr.
//
// A case that fails while running (for example a KV policy this build does
// not have) is reported on stderr and skipped; the sweep goes on and the exit
// code is 1. Errors in the flags, models or contexts stop before anything runs.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "bench_runner/bench_config.h"
#include "bench_runner/bench_output.h"
#include "bench_runner/bench_run.h"
#include "bench_runner/roofline.h"
#include "cli_common.h"
#include "commands.h"

namespace rotor::cli {

using bench::BenchArgs;
using bench::BenchCase;
using bench::BenchCaseRun;
using bench::BenchColumns;
using bench::BenchFormat;
using bench::BenchModel;
using bench::BenchResult;
using bench::BenchRow;
using bench::BenchWriter;
using bench::ExpandBenchCases;
using bench::LoadBenchModel;
using bench::MakeBenchRow;
using bench::MakeBenchWriter;
using bench::MeasureRoofline;
using bench::ParseBenchFormat;
using bench::Roofline;
using bench::RooflineOptions;
using bench::RoofProbe;
using bench::RunBenchCase;

namespace {

// Progress on stderr: one line per case, rewritten in place on a terminal.
class Progress {
 public:
  // lines (--progress): off a terminal too, each phase as a line of its own.
  explicit Progress(bool lines) : tty_(isatty(fileno(stderr)) != 0), lines_(lines) {}
  void Start(const std::string& what) {
    what_ = what;
    if (tty_) {
      Show("starting");
    } else {
      fmt::print(stderr, "rotor: bench {}\n", what_);
    }
  }
  void Update(const char* phase, int rep, int reps) {
    const std::string state = rep > 0 ? fmt::format("{} {}/{}", phase, rep, reps) : phase;
    if (tty_) {
      Show(state);
    } else if (lines_) {
      fmt::print(stderr, "rotor: bench {}: {}\n", what_, state);
    }
  }
  // Clears the live line so that stdout rows and stderr messages start clean.
  void Clear() {
    if (tty_) fmt::print(stderr, "\r\033[K");
  }

 private:
  void Show(const std::string& state) {
    fmt::print(stderr, "\r\033[Krotor: bench {}: {}", what_, state);
  }
  bool tty_;
  bool lines_;
  std::string what_;
};

BenchColumns ColumnsFor(const BenchArgs& a, const std::vector<BenchCase>& cases) {
  BenchColumns cols;
  for (const BenchCase& c : cases) {
    cols.kv_size |= KvPolicyEvicts(c.kv.policy);
    cols.rope_k |= c.kv.rope_k != RopeK::kCached;
    cols.positions |= KvPolicyEvicts(c.kv.policy) && KvPolicyUses(c.kv.policy, KvOpt::kPositions);
    cols.kv_type |= c.kv.types != KvTypes{} || c.kv.rotate;
    cols.prefill_step |= c.prefill_step != 512;
    cols.n_seq |= c.n_seq != 1;
  }
  cols.n_ctx = std::any_of(a.n_ctx.begin(), a.n_ctx.end(), [](int c) { return c > 0; });
  cols.repack = a.no_repack;
  cols.mmap = !a.mmap;
  cols.roofline = a.roofline;
  return cols;
}

int RunBench(BenchArgs a) {
  if (a.list_devices) {
    fmt::print("{}", bench::DeviceList());
    return 0;
  }
  if (a.models.empty()) a.models = {DefaultModelPath()};
  if (a.threads.empty()) a.threads = {HardwareThreads()};
  Result<BenchFormat> format = ParseBenchFormat(a.output);
  if (!format.ok()) return Fail(format.status());
  std::optional<BenchFormat> format_err;
  if (!a.output_err.empty()) {
    Result<BenchFormat> f = ParseBenchFormat(a.output_err);
    if (!f.ok()) return Fail(f.status().WithContext("bench: -oe"));
    format_err = *f;
  }

  std::vector<BenchModel> models;
  for (const std::string& path : a.models) {
    Result<BenchModel> m = LoadBenchModel(path, !a.no_repack, a.mmap);
    if (!m.ok()) return Fail(m.status().WithContext("bench: -m"));
    models.push_back(std::move(*m));
  }
  Result<std::vector<BenchCase>> cases = ExpandBenchCases(a, models);
  if (!cases.ok()) return Fail(cases.status());

  // One roofline per thread count, before any case (so a table is not interrupted).
  std::vector<Roofline> rooflines;
  if (a.roofline) {
    std::vector<int> counts;
    for (int t : a.threads)
      if (std::find(counts.begin(), counts.end(), t) == counts.end()) counts.push_back(t);
    for (int t : counts) {
      fmt::print(stderr, "rotor: bench: measuring the roofline on {} thread{}\n", t,
                 t == 1 ? "" : "s");
      ThreadPool pool(t);
      Result<Roofline> r = MeasureRoofline(
          pool, RooflineOptions{.buffer_bytes = static_cast<size_t>(a.roofline_mib) << 20,
                                .passes = a.roofline_passes});
      if (!r.ok()) return Fail(r.status().WithContext("bench: --roofline"));
      rooflines.push_back(*r);
    }
  }
  // Both ceilings next to a generation test: a 256 MiB buffer (8x the L3;
  // --roofline-mib when that is smaller) read kProbePasses times, and as many
  // ~10 ms passes of the int8 loop, before each repetition and after the last
  // (RoofProbe; a read pass takes ~5 ms, three smooth out the host's shortest
  // hiccups).
  constexpr int kProbePasses = 3;
  // The passes beside one test: GB/s and GOP/s.
  struct Passes {
    std::vector<double> read, int8;
    void Append(const Passes& o) {
      read.insert(read.end(), o.read.begin(), o.read.end());
      int8.insert(int8.end(), o.int8.begin(), o.int8.end());
    }
  };
  auto run_passes = [&](RoofProbe* probe, Passes& out) {
    for (int k = 0; k < kProbePasses; ++k) {
      out.read.push_back(probe->ReadPass());
      out.int8.push_back(probe->Int8Pass());
    }
  };
  std::map<int, std::pair<std::unique_ptr<ThreadPool>, std::unique_ptr<RoofProbe>>> probes;
  auto probe_for = [&](int threads) -> Result<RoofProbe*> {
    auto& [pool, probe] = probes[threads];
    if (!probe) {
      pool = std::make_unique<ThreadPool>(threads);
      ASSIGN_OR_RETURN(probe, RoofProbe::Create(
                                  *pool, static_cast<size_t>(std::min(a.roofline_mib, 256)) << 20));
    }
    return probe.get();
  };
  auto roofline_for = [&](int threads) -> const Roofline* {
    for (const Roofline& r : rooflines)
      if (r.threads == threads) return &r;
    return nullptr;
  };

  // The rows on stdout, and again on stderr with -oe (whose roofline lines,
  // if any, the first writer has shown).
  std::vector<std::unique_ptr<BenchWriter>> writers;
  writers.push_back(MakeBenchWriter(*format, ColumnsFor(a, *cases), stdout));
  writers.front()->Begin(rooflines);
  if (format_err) {
    writers.push_back(MakeBenchWriter(*format_err, ColumnsFor(a, *cases), stderr));
    writers.back()->Begin({});
  }
  Progress progress(a.progress);
  // llama-bench's --delay: the machine rests before each test.
  auto rest = [&] {
    if (a.delay > 0) std::this_thread::sleep_for(std::chrono::seconds(a.delay));
  };
  const int n_cases = static_cast<int>(cases->size());
  auto name = [&](int i) {
    const BenchCase& c = (*cases)[i];
    return fmt::format("[{}/{}] {} {} (t={}, kv={}{})", i + 1, n_cases, models[c.model].path,
                       c.test.Name(), c.threads, c.kv.policy,
                       c.kv.size > 0 ? fmt::format(" {}", c.kv.size) : "");
  };
  // The probe beside a generation test (nullptr: none).
  auto probe_of = [&](const BenchCase& c) -> Result<RoofProbe*> {
    if (!a.roofline || c.test.n_prompt != 0) return nullptr;
    Result<RoofProbe*> p = probe_for(c.threads);
    if (!p.ok()) return p.status().WithContext("bench: --roofline");
    return *p;
  };
  int failed = 0;
  bool warned_rss = false;
  auto fail = [&](int i, const Status& st) {
    ++failed;
    fmt::print(stderr, "rotor: bench {}: error: {} (skipped)\n", name(i), st.message());
  };
  auto write_row = [&](int i, const BenchResult& r, const Passes& passes) {
    const BenchCase& c = (*cases)[i];
    if (!r.peak_rss_scoped && !warned_rss) {
      warned_rss = true;
      fmt::print(stderr, "rotor: bench: {}\n",
                 a.interleave ? "--interleave: peak_rss_bytes is the process's peak"
                              : "cannot reset the peak RSS counter (/proc/self/clear_refs); "
                                "peak_rss_bytes is the process's peak so far");
    }
    const Roofline* roof = roofline_for(c.threads);
    Roofline adjacent;
    if (roof != nullptr && c.test.n_prompt == 0 && !passes.read.empty()) {
      // A generation test's ceilings are those measured between its
      // repetitions (their means), not at the start of the run: the
      // bandwidth, and the int8 peak that batched decode can reach.
      adjacent = *roof;
      adjacent.read_gbps = bench::Mean(passes.read);
      adjacent.read_best_gbps = *std::max_element(passes.read.begin(), passes.read.end());
      if (roof->int8_gops > 0 && !passes.int8.empty()) adjacent.int8_gops = bench::Mean(passes.int8);
      roof = &adjacent;
    }
    const BenchRow row = MakeBenchRow(models[c.model], c, r, roof);
    for (auto& w : writers) w->Row(row);
  };
  // Cases run model by model; a model is unmapped after its last case, so its
  // pages do not count in the next model's peak RSS.
  for (int first = 0; first < n_cases;) {
    const int model = (*cases)[first].model;
    int end = first;
    while (end < n_cases && (*cases)[end].model == model) ++end;
    // Once, at the model's first case (LoadBenchModel); -nr: never.
    if (models[model].repack) models[model].model->PackMatrices();
    if (a.interleave) {
      // Every case of the model is started (its warm-up), then the rounds.
      struct Live {
        int i;
        std::unique_ptr<BenchCaseRun> run;  // null once it failed
        RoofProbe* probe;
        Passes passes;  // before and after each round's timed steps
      };
      std::vector<Live> live;
      std::map<int, std::unique_ptr<ThreadPool>> pools;  // one per thread count
      for (int i = first; i < end; ++i) {
        const BenchCase& c = (*cases)[i];
        Result<RoofProbe*> probe = probe_of(c);
        if (!probe.ok()) return Fail(probe.status());
        std::unique_ptr<ThreadPool>& pool = pools[c.threads];
        if (!pool) pool = std::make_unique<ThreadPool>(c.threads);
        progress.Start(name(i));
        Result<std::unique_ptr<BenchCaseRun>> run = BenchCaseRun::Start(
            models[model], c, a.seed, *pool, /*scoped_rss=*/false,
            [&](const char* phase, int rep) { progress.Update(phase, rep, a.repetitions); });
        progress.Clear();
        if (!run.ok()) {
          fail(i, run.status());
          continue;
        }
        live.push_back(Live{.i = i, .run = std::move(*run), .probe = *probe, .passes = {}});
      }
      auto drop = [&](Live& l, const Status& st) {
        fail(l.i, st);
        l.run.reset();
      };
      const size_t n_live = live.size();
      for (int rep = 1; rep <= a.repetitions; ++rep) {
        // This round's order: the list's on odd rounds, reversed on even ones.
        std::vector<Live*> order;
        for (size_t k = 0; k < n_live; ++k)
          order.push_back(&live[rep % 2 == 1 ? k : n_live - 1 - k]);
        for (Live* l : order) {  // every depth first (untimed)
          if (!l->run) continue;
          progress.Start(fmt::format("{}, round {}/{}", name(l->i), rep, a.repetitions));
          Status st = l->run->Fill(
              rep, [&](const char* phase, int r) { progress.Update(phase, r, a.repetitions); });
          progress.Clear();
          if (!st.ok()) drop(*l, st);
        }
        // Then the tests' timed units in turn, with the probes before
        // and after them (each probe's passes go to every test of its
        // thread count in the round).
        std::map<RoofProbe*, Passes> round_passes;
        auto probe_passes = [&] {
          std::set<RoofProbe*> done;
          for (Live* l : order)
            if (l->run && l->probe != nullptr && done.insert(l->probe).second)
              run_passes(l->probe, round_passes[l->probe]);
        };
        rest();  // --interleave: before each round's timed steps
        progress.Start(fmt::format("round {}/{}: the tests' steps in turn", rep, a.repetitions));
        probe_passes();
        std::vector<Live*> pending;
        for (Live* l : order)
          if (l->run) pending.push_back(l);
        while (!pending.empty()) {
          std::vector<Live*> next;
          for (Live* l : pending) {
            Result<bool> done = l->run->Step();
            if (!done.ok()) {
              drop(*l, done.status());
            } else if (!*done) {
              next.push_back(l);
            }
          }
          pending = std::move(next);
        }
        probe_passes();
        progress.Clear();
        for (Live* l : order)
          if (l->probe != nullptr) l->passes.Append(round_passes[l->probe]);
      }
      for (Live& l : live)
        if (l.run) write_row(l.i, l.run->Finish(), l.passes);
    } else {
      for (int i = first; i < end; ++i) {
        const BenchCase& c = (*cases)[i];
        Result<RoofProbe*> probe = probe_of(c);
        if (!probe.ok()) return Fail(probe.status());
        Passes passes;  // before each repetition and after the last
        rest();
        progress.Start(name(i));
        Result<BenchResult> r =
            RunBenchCase(models[model], c, a.repetitions, a.seed, [&](const char* phase, int rep) {
              if (*probe != nullptr && std::strcmp(phase, "run") == 0) run_passes(*probe, passes);
              progress.Update(phase, rep, a.repetitions);
            });
        if (*probe != nullptr) run_passes(*probe, passes);
        progress.Clear();
        if (!r.ok()) {
          fail(i, r.status());
          continue;
        }
        write_row(i, *r, passes);
      }
    }
    models[model].model.reset();  // rows need only its numbers
    first = end;
  }
  for (auto& w : writers) w->End();
  if (failed > 0) {
    fmt::print(stderr, "rotor: bench: {} of {} tests failed\n", failed, n_cases);
    return 1;
  }
  return 0;
}

}  // namespace

Runner RegisterBench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand(
      "bench", "measure prompt processing (pp) and generation (tg) speed, llama-bench style");
  sub->add_option("-m,--model", a->models, "GGUF model file(s): repeat -m or separate with ','")
      ->delimiter(',')
      ->default_str("the bundled model");
  CLI::Option* p =
      sub->add_option("-p,--n-prompt", a->n_prompt, "prompt-processing test sizes (0 = none)")
          ->delimiter(',')
          ->check(CLI::Range(0, 1 << 24))
          ->capture_default_str();
  CLI::Option* n = sub->add_option("-n,--n-gen", a->n_gen, "generation test sizes (0 = none)")
                       ->delimiter(',')
                       ->check(CLI::Range(0, 1 << 24))
                       ->capture_default_str();
  CLI::Option* d =
      sub->add_option("-d,--n-depth", a->n_depth,
                      "tokens already in the cache before each test (random ids, not timed)")
          ->delimiter(',')
          ->check(CLI::Range(0, 1 << 24))
          ->capture_default_str();
  // One pair per -pg, as llama-bench's (repeat it for more).
  CLI::Option* pg =
      sub->add_option_function<std::vector<std::string>>(
             "--pg",
             [a](const std::vector<std::string>& values) {
               for (const std::string& v : values) {
                 int pp = -1, tg = -1;
                 const size_t comma = v.find(',');
                 const char* end = v.data() + v.size();
                 if (comma != std::string::npos) {
                   const auto [e1, ec1] = std::from_chars(v.data(), v.data() + comma, pp);
                   const auto [e2, ec2] = std::from_chars(v.data() + comma + 1, end, tg);
                   if (ec1 != std::errc() || e1 != v.data() + comma || ec2 != std::errc() ||
                       e2 != end)
                     pp = tg = -1;
                 }
                 if (pp < 0 || tg < 0 || pp > (1 << 24) || tg > (1 << 24))
                   throw CLI::ValidationError(
                       "-pg", fmt::format("'{}' is not PP,TG (two token counts, as 512,128)", v));
                 a->n_pg.emplace_back(pp, tg);
               }
             },
             "llama-bench's -pg PP,TG: a prompt of PP tokens, then TG generated ones, timed "
             "together (test pp512+tg128; t/s counts both); repeatable")
          ->type_name("PP,TG")
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
          ->allow_extra_args(false);
  sub->add_option("--tests", a->tests,
                  "explicit tests instead of -p/-n/-d/-pg, e.g. pp512,tg128,tg128@d4096")
      ->delimiter(',')
      ->excludes(p)
      ->excludes(n)
      ->excludes(d)
      ->excludes(pg);
  sub->add_option("-r,--repetitions", a->repetitions, "timed runs per test (after one warm-up)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "thread counts (default: all hardware threads)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  AddKvListOptions(sub, &a->kv);
  sub->add_option("--prefill-step,--ubatch-size", a->prefill_step,
                  "tokens per forward pass for pp tests and the depth fill (0 = all at once; "
                  "llama-bench's -ub)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  // llama-bench's -b: a forward pass takes at most that many tokens too.
  auto batch_sizes = std::make_shared<std::vector<int>>();
  sub->add_option("-b,--batch-size", *batch_sizes,
                  "llama-bench's logical batch: caps each --prefill-step (a list runs each cap)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 24));
  sub->parse_complete_callback([a, batch_sizes] {
    if (batch_sizes->empty()) return;
    std::vector<int> steps;
    for (int b : *batch_sizes)
      for (int s : a->prefill_step) {
        const int step = s == 0 ? b : std::min(s, b);
        if (std::find(steps.begin(), steps.end(), step) == steps.end()) steps.push_back(step);
      }
    a->prefill_step = steps;
  });
  sub->add_option("--batch", a->batch,
                  "sequences run together, each with its own cache (aggregate t/s; JSON n_seq)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  sub->add_flag("--shared-prefix", a->shared_prefix,
                "with --batch and -d: the depth is one prefix the sequences share (the first "
                "computes it, the others take its K/V blocks from the prefix cache, as "
                "llama-batched-bench's -pps); JSON kv_blocks, kv_bytes, prefix_hit_tokens");
  sub->add_flag("--interleave", a->interleave,
                "run each model's tests in rounds: round k fills every test's depth (odd rounds "
                "in the list's order, even ones reversed), then times one step of each test in "
                "turn, so that tests compared with each other see the host in the same state; "
                "peak_rss_bytes is then the process's");
  sub->add_option("-c,--ctx-size", a->n_ctx,
                  "context sizes (0 = what each test needs: depth + its tokens, at least "
                  "--kv-size)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  sub->add_option("-o,--output", a->output, "output format: md|json|jsonl|csv|sql")
      ->check(CLI::IsMember({"md", "json", "jsonl", "csv", "sql"}).description(""))
      ->capture_default_str();
  sub->add_option("--output-err", a->output_err,
                  "the rows again on stderr in this format: md|json|jsonl|csv|sql (llama-bench's "
                  "-oe)")
      ->check(CLI::IsMember({"md", "json", "jsonl", "csv", "sql"}).description(""));
  sub->add_flag("--list-devices", a->list_devices,
                "print the device the tests run on (the CPU: its ISA, threads and memory) and "
                "exit (llama-bench's)");
  sub->add_flag("--progress", a->progress,
                "each test's phases (warm-up, fill, run k/r) on stderr as lines, also off a "
                "terminal (on one, the live status line shows them anyway)");
  sub->add_option("--delay", a->delay,
                  "seconds of sleep before each test (with --interleave: before each round's "
                  "timed steps), so that the machine cools between them")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  sub->add_flag_callback(
      "--no-warmup", [a] { a->warmup = false; },
      "time the repetitions without the untimed run of each test before them");
  // llama-bench's -nr <0|1>: one value (a sweep of both is two runs: the
  // copies are made once per model).
  sub->add_option_function<std::string>(
         "--no-repack",
         [a](const std::string& v) {
           if (v.empty() || v == "1" || v == "true") {
             a->no_repack = true;
           } else if (v == "0" || v == "false") {
             a->no_repack = false;
           } else {
             throw CLI::ValidationError(fmt::format(
                 "-nr '{}' is not 0 or 1 (rotor runs one setting per run: -nr 0 and -nr 1 are "
                 "two runs)",
                 v));
           }
         },
         "run the matrices as stored, without the row-interleaved copies rotor makes of "
         "q8_0, q4_0, q5_0, iq4_nl and q2_K..q6_K weights (llama-bench's -nr; JSON repack)")
      ->expected(0, 1)
      ->default_str("1")
      ->type_name("0|1");
  sub->add_option_function<std::string>(
         "--mmap",
         [a](const std::string& v) {
           if (v != "0" && v != "1")
             throw CLI::ValidationError(fmt::format(
                 "-mmp '{}' is not 0 or 1 (one setting per run: -mmp 0 and -mmp 1 are two runs)",
                 v));
           a->mmap = v == "1";
         },
         "1 (default): map the model files; 0: read them into memory (llama-bench's -mmp; JSON "
         "use_mmap)")
      ->type_name("0|1");
  sub->add_flag_callback(
      "--no-mmap", [a] { a->mmap = false; }, "read the model files into memory (-mmp 0)");
  sub->add_flag("--roofline", a->roofline,
                "measure memory read bandwidth and the f32 and int8 arithmetic peaks; give each "
                "test's % of the roof that binds it");
  sub->add_option("--roofline-mib", a->roofline_mib, "buffer streamed by the bandwidth test")
      ->check(CLI::Range(64, 1 << 20))
      ->capture_default_str();
  sub->add_option("--roofline-passes", a->roofline_passes,
                  "runs of each roofline measurement (read, FMA, int8, matmul); the best counts")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "seed of the random token ids")->capture_default_str();
  AddLlamaCppNotes(sub);
  return [a] { return RunBench(*a); };
}

}  // namespace rotor::cli
