// Three replicas of the bundled model behind HAProxy, as deploy/local.sh runs
// them, on 127.0.0.1: prefix affinity against round robin, a replica killed
// (SIGKILL) or drained (SIGTERM) under load. Every loop here is bounded in
// count and time; the setup's process group is killed at the end whatever
// happened.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "local_setup.h"

namespace rotor::replicas_testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Words(int n, uint32_t seed) {
  static const char* kWords[] = {"the", "little", "dog", "ran",  "to",   "park", "and", "saw",
                                 "a",   "big",    "red", "ball", "Lily", "Tom",  "sun", "was"};
  std::mt19937 rng(seed);
  std::string s;
  for (int i = 0; i < n; ++i) (s += i ? " " : "") += kWords[rng() % 16];
  return s + ".";
}

std::vector<int> Ports(const LocalSetup& setup) {
  std::vector<int> ports;
  for (const Replica& r : setup.replicas()) ports.push_back(r.port);
  return ports;
}

// Six groups of chat requests; a group shares a long system prompt (about
// 190 tokens), each request has a question of its own. Ten rounds of the six
// groups in turn, each round starting one group later (a fixed order: both
// balancers see the same sequence; with a plain repeated order, round robin
// over three replicas would send each group to the same replica every time).
std::vector<std::pair<int, json>> GroupedRequests() {
  constexpr int kGroups = 6, kRounds = 10;
  std::vector<std::pair<int, json>> out;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kGroups; ++i) {
      const int g = (i + round) % kGroups;
      json messages = json::array({{{"role", "system"}, {"content", Words(110, 1000 + g)}},
                                   {{"role", "user"}, {"content", Words(8, 7 * round + 100 * g)}}});
      out.emplace_back(g, json{{"messages", messages}, {"max_tokens", 4}, {"temperature", 0}});
    }
  }
  return out;
}

struct GroupRun {
  std::map<int, std::set<std::string>> replicas_of_group;
  double hit_tokens = 0, query_tokens = 0;
  int failed = 0;
};

// Sends the requests one after another and sums the replicas' prefix-cache
// counters (vLLM's names) afterwards.
GroupRun RunGroups(const SetupOptions& options) {
  GroupRun run;
  LocalSetup setup(options);
  EXPECT_TRUE(setup.ok()) << setup.error();
  if (!setup.ok()) return run;
  for (const auto& [group, body] : GroupedRequests()) {
    const Outcome o = Send(setup.port(), "/v1/chat/completions", body);
    if (!o.complete) {
      ++run.failed;
      ADD_FAILURE() << "status " << o.status << ": " << o.error;
      continue;
    }
    run.replicas_of_group[group].insert(o.replica);
  }
  // The engine thread publishes its counters after the step that ended the
  // last request; the response may come first.
  std::this_thread::sleep_for(milliseconds(100));
  run.hit_tokens = SumMetric(Ports(setup), "vllm:prefix_cache_hits_total");
  run.query_tokens = SumMetric(Ports(setup), "vllm:prefix_cache_queries_total");
  EXPECT_EQ(setup.Stop(seconds(40)), 0) << setup.Output();
  for (const Replica& r : setup.replicas()) EXPECT_FALSE(Alive(r.pid)) << r.name;
  EXPECT_FALSE(Alive(setup.haproxy_pid()));
  return run;
}

// The K/V memory of a replica (1 MiB: 51 blocks of 16 tokens) holds the
// system prompts (12 blocks each) of about four groups, not six. With
// affinity each replica sees only its groups, whose prefixes stay cached;
// round robin sends every group to every replica, and each replica's LRU
// cache evicts a prefix before it comes back (docs/BENCHMARKS.md, "Several
// replicas", has the same comparison with shuffled rounds: a smaller gain).
TEST(Replicas, PrefixAffinityKeepsEachGroupOnOneReplica) {
  if (!HaveHaproxy()) GTEST_SKIP() << "haproxy or curl is not installed (make deps installs them)";
  // 1 MiB of f32 K/V per replica (see the comment above the test): the
  // system prompts of about four groups, not six (f16 would hold eight).
  const std::vector<std::string> serve_args = {"-t",          "1", "--parallel", "2",
                                               "--kv-memory", "1", "--kv-type",  "f32"};
  const GroupRun affinity = RunGroups({.balance = "affinity", .serve_args = serve_args});
  const GroupRun round_robin = RunGroups({.balance = "roundrobin", .serve_args = serve_args});
  ASSERT_EQ(affinity.failed, 0);
  ASSERT_EQ(round_robin.failed, 0);
  ASSERT_EQ(affinity.replicas_of_group.size(), 6u);
  std::set<std::string> used;
  for (const auto& [group, replicas] : affinity.replicas_of_group) {
    EXPECT_EQ(replicas.size(), 1u)
        << "group " << group << " went to " << replicas.size() << " replicas";
    used.insert(replicas.begin(), replicas.end());
  }
  EXPECT_GE(used.size(), 2u) << "every group on one replica";
  // Round robin spreads each group over the replicas (the check that the
  // comparison compares something).
  for (const auto& [group, replicas] : round_robin.replicas_of_group)
    EXPECT_GT(replicas.size(), 1u) << "group " << group;
  std::printf("prefix-cache hit tokens: affinity %.0f of %.0f, round robin %.0f of %.0f\n",
              affinity.hit_tokens, affinity.query_tokens, round_robin.hit_tokens,
              round_robin.query_tokens);
  EXPECT_EQ(affinity.query_tokens, round_robin.query_tokens);  // the same prompts
  EXPECT_GE(affinity.hit_tokens, 3 * round_robin.hit_tokens);
  EXPECT_GT(affinity.hit_tokens, 0);
}

// Load through the balancer: `clients` threads, each sending up to
// `per_client` requests (half of them streams, each prompt its own so they
// spread over the replicas) until `budget` passes. `on_progress` is called
// with the number of completed requests after each one.
std::vector<Outcome> Load(int port, int clients, int per_client, Clock::duration budget,
                          const std::function<void(int)>& on_progress) {
  std::vector<Outcome> all;
  std::mutex mu;
  std::atomic<int> completed{0};
  const auto deadline = Clock::now() + budget;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < per_client && Clock::now() < deadline; ++i) {
        const bool stream = (c + i) % 2 == 0;
        const json body = {{"prompt", "Story " + std::to_string(c) + "-" + std::to_string(i) +
                                          ": " + Words(20, 31 * c + i)},
                           {"max_tokens", 48},
                           {"ignore_eos", true},
                           {"stream", stream}};
        Outcome o = Send(port, "/v1/completions", body);
        {
          std::lock_guard<std::mutex> lock(mu);
          all.push_back(std::move(o));
        }
        on_progress(++completed);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return all;
}

// SIGKILL to one replica under load: what had not started on it goes to the
// others, everything else completes, HAProxy marks it down within its
// health-check interval (300 ms, two failures), nothing hangs.
TEST(Replicas, AReplicaKilledUnderLoad) {
  if (!HaveHaproxy()) GTEST_SKIP() << "haproxy or curl is not installed (make deps installs them)";
  LocalSetup setup({.check_interval = "300ms",
                    .serve_args = {"-t", "1", "--parallel", "4", "--drain-timeout", "10"}});
  ASSERT_TRUE(setup.ok()) << setup.error();
  const Replica* victim = setup.Find("r2");
  ASSERT_NE(victim, nullptr);
  std::atomic<bool> killed{false};
  Clock::time_point killed_at;
  std::atomic<double> down_after_s{-1};
  std::thread watch;
  const auto started = Clock::now();
  const std::vector<Outcome> outcomes = Load(setup.port(), 4, 15, seconds(40), [&](int completed) {
    if (completed < 8 || killed.exchange(true)) return;
    killed_at = Clock::now();
    kill(victim->pid, SIGKILL);
    watch = std::thread([&] {
      const auto until = killed_at + seconds(5);
      while (Clock::now() < until) {
        if (setup.ServerStatus("r2").rfind("DOWN", 0) == 0) {
          down_after_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
          return;
        }
        std::this_thread::sleep_for(milliseconds(20));
      }
    });
  });
  if (watch.joinable()) watch.join();
  ASSERT_TRUE(killed);
  EXPECT_LT(Clock::now() - started, seconds(45)) << "the load did not end in time";
  EXPECT_EQ(outcomes.size(), 60u);
  int failed = 0, in_flight_at_kill = 0, after_kill = 0;
  for (const Outcome& o : outcomes) {
    const bool spanned = o.start < killed_at && o.end > killed_at;
    in_flight_at_kill += spanned;
    if (o.start > killed_at) {
      ++after_kill;
      EXPECT_TRUE(o.complete) << "a request sent after the kill failed: status " << o.status << " "
                              << o.error;
      EXPECT_NE(o.replica, "r2");
    }
    if (!o.complete) {
      ++failed;
      EXPECT_TRUE(spanned) << "a request not in flight at the kill failed: " << o.error;
    }
  }
  std::printf(
      "killed r2 with %d requests in flight: %d failed, %d sent after it all completed; "
      "HAProxy marked it down after %.2f s\n",
      in_flight_at_kill, failed, after_kill, down_after_s.load());
  EXPECT_GT(after_kill, 0);
  EXPECT_LE(failed, in_flight_at_kill);
  // Two failed checks 300 ms apart, plus one interval of phase and a margin
  // for a loaded 2-core machine.
  EXPECT_GE(down_after_s.load(), 0) << "HAProxy never marked r2 down";
  EXPECT_LE(down_after_s.load(), 2.0);
}

// SIGTERM to one replica under load: it drains, and not one request fails
// (what arrives at it while it drains is answered 503 and HAProxy sends it
// to another replica; what it had in flight, streams included, it finishes).
TEST(Replicas, AReplicaDrainedUnderLoadFailsNothing) {
  if (!HaveHaproxy()) GTEST_SKIP() << "haproxy or curl is not installed (make deps installs them)";
  LocalSetup setup({.check_interval = "300ms",
                    .serve_args = {"-t", "1", "--parallel", "4", "--drain-timeout", "20"}});
  ASSERT_TRUE(setup.ok()) << setup.error();
  const Replica* victim = setup.Find("r2");
  ASSERT_NE(victim, nullptr);
  std::atomic<bool> signalled{false};
  Clock::time_point signalled_at;
  const std::vector<Outcome> outcomes = Load(setup.port(), 4, 15, seconds(40), [&](int completed) {
    if (completed < 8 || signalled.exchange(true)) return;
    signalled_at = Clock::now();
    kill(victim->pid, SIGTERM);
  });
  ASSERT_TRUE(signalled);
  EXPECT_EQ(outcomes.size(), 60u);
  int failed = 0, by_victim_after = 0;
  for (const Outcome& o : outcomes) {
    if (!o.complete) {
      ++failed;
      ADD_FAILURE() << "status " << o.status << " from " << o.replica << ": " << o.error;
    }
    by_victim_after += o.replica == "r2" && o.start > signalled_at;
  }
  std::printf(
      "drained r2 under load: %zu requests, %d failed, %d sent after the signal and answered "
      "by r2\n",
      outcomes.size(), failed, by_victim_after);
  EXPECT_EQ(failed, 0);
  // It exits once drained; its log says so.
  EXPECT_TRUE([&] {
    const auto until = Clock::now() + seconds(25);
    while (Clock::now() < until && Alive(victim->pid))
      std::this_thread::sleep_for(milliseconds(20));
    return !Alive(victim->pid);
  }()) << "r2 still runs after its drain";
  std::ifstream log(victim->log);
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("draining"), std::string::npos) << text;
  EXPECT_NE(text.find("drained, shutting down"), std::string::npos) << text;
}

}  // namespace
}  // namespace rotor::replicas_testing
