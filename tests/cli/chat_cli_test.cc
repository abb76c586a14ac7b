// rotor chat end to end: with piped input, and in a real terminal (tmux) with
// Ctrl-C and Ctrl-D as a user presses them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "run_cli.h"
#include "tokenizer/tokenizer.h"

namespace rotor::testing {
namespace {

using ::testing::HasSubstr;

const Tokenizer& BundledTokenizer() {
  static std::unique_ptr<GgufFile> file = GgufFile::Open(BundledModel()).value();
  static std::unique_ptr<Tokenizer> tok = Tokenizer::FromGguf(*file).value();
  return *tok;
}

// Tokens of the plain format's first turn (BOS, space prefix) and of a later
// turn's new text (a continuation: no space prefix).
int64_t FirstTurnTokens(const std::string& text) {
  return static_cast<int64_t>(BundledTokenizer().Encode(text, true).size());
}
int64_t ContinuationTokens(const std::string& text) {
  std::vector<int32_t> ids;
  const Tokenizer::TextPiece piece{text, false};
  BundledTokenizer().EncodeAppend(std::span(&piece, 1), false, &ids);
  return static_cast<int64_t>(ids.size());
}

// The "prompt N tokens" of every footer, in order.
std::vector<int64_t> PromptCounts(const std::string& text) {
  std::vector<int64_t> counts;
  static const std::regex kFooter(R"(\[prompt (\d+) tokens)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kFooter);
       it != std::sregex_iterator(); ++it)
    counts.push_back(std::stoll((*it)[1]));
  return counts;
}

TEST(ChatCli, PipedInputRunsTurnsAndCommands) {
  TempDir dir;
  const std::string saved = dir.File("chat.json");
  const std::string input = WriteFile(dir, "in.txt",
                                      "Hello there\n/help\n/bogus\nTell me \\\nabout the cat\n"
                                      "/save " +
                                          saved + "\n");
  CliResult r =
      RunRotor({"chat", "-m", BundledModel(), "--temp", "0", "-n", "16", "-t", "2"}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("> ", 0), 0u) << r.out;
  EXPECT_THAT(r.err, HasSubstr("unknown command '/bogus'"));
  EXPECT_THAT(r.err, HasSubstr("/save FILE"));  // the help
  const std::vector<int64_t> counts = PromptCounts(r.err);
  ASSERT_EQ(counts.size(), 2u) << r.err;
  EXPECT_EQ(counts[0], FirstTurnTokens("User: Hello there\nAssistant:"));
  EXPECT_EQ(counts[1], ContinuationTokens("\nUser: Tell me \nabout the cat\nAssistant:"));

  std::ifstream in(saved);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["chat_template"], "plain");
  ASSERT_EQ(j["messages"].size(), 4u);
  EXPECT_EQ(j["messages"][0]["role"], "user");
  EXPECT_EQ(j["messages"][2]["content"], "Tell me \nabout the cat");
  EXPECT_EQ(j["messages"][3]["role"], "assistant");

  // /load re-prefills the transcript; the next message is all the next turn runs.
  const std::string input2 = WriteFile(dir, "in2.txt", "/load " + saved + "\nAnd then?\n");
  CliResult r2 =
      RunRotor({"chat", "-m", BundledModel(), "--temp", "0", "-n", "8", "-t", "2"}, input2);
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_THAT(r2.err, HasSubstr("loaded 4 messages"));
  const std::vector<int64_t> counts2 = PromptCounts(r2.err);
  ASSERT_EQ(counts2.size(), 1u) << r2.err;
  EXPECT_EQ(counts2[0], ContinuationTokens("User: And then?\nAssistant:"));
}

// /save writes FILE.kv beside the transcript; /load restores from it the
// tokens that agree with the transcript's rendering instead of prefilling
// them, and the conversation goes on as after a prefill; a file it cannot
// use is noted and the transcript prefilled.
TEST(ChatCli, SaveAndLoadRestoreTheKvCache) {
  TempDir dir;
  const std::string saved = dir.File("chat.json");
  const std::vector<std::string> args = {"chat", "-m", BundledModel(), "--temp", "0",
                                         "-n",   "16", "-t",           "2"};
  const std::string input =
      WriteFile(dir, "in.txt", "Hello there\nTell me about the cat\n/save " + saved + "\n");
  CliResult r = RunRotor(args, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tokens of K/V to " + saved + ".kv"));
  ASSERT_TRUE(std::filesystem::exists(saved + ".kv"));

  const std::string input2 = WriteFile(dir, "in2.txt", "/load " + saved + "\nAnd then?\n");
  CliResult restored = RunRotor(args, input2);
  ASSERT_EQ(restored.exit_code, 0) << restored.err;
  static const std::regex kRestored(
      R"((\d+) tokens restored from .*chat\.json\.kv, prompt (\d+) tokens)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(restored.err, m, kRestored)) << restored.err;
  const int64_t n_restored = std::stoll(m[1]), n_prompt = std::stoll(m[2]);
  EXPECT_GT(n_restored, FirstTurnTokens("User: Hello there\nAssistant:"));

  // The same conversation prefilled (no K/V file): the same replies, and the
  // whole transcript prefilled.
  std::filesystem::copy_file(saved + ".kv", dir.File("keep.kv"));
  std::filesystem::remove(saved + ".kv");
  CliResult prefilled = RunRotor(args, input2);
  ASSERT_EQ(prefilled.exit_code, 0) << prefilled.err;
  EXPECT_EQ(prefilled.out, restored.out);
  EXPECT_THAT(prefilled.err,
              HasSubstr("prompt " + std::to_string(n_restored + n_prompt) + " tokens)"));

  // A truncated K/V file: noted, prefilled, the same replies.
  std::filesystem::copy_file(dir.File("keep.kv"), saved + ".kv");
  std::filesystem::resize_file(saved + ".kv", 1000);
  CliResult cut = RunRotor(args, input2);
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_THAT(cut.err, HasSubstr("K/V not restored: kv file " + saved + ".kv: truncated"));
  EXPECT_THAT(cut.err, HasSubstr("0 tokens restored"));
  EXPECT_EQ(cut.out, restored.out);
}

TEST(ChatCli, BadTemplateNameAndBadLoadFile) {
  CliResult r = RunRotor({"chat", "-m", BundledModel(), "--chat-template", "vicuna"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("'vicuna'"));
  TempDir dir;
  const std::string bad = WriteFile(dir, "bad.json", R"({"messages": [{"role": 1}]})");
  const std::string input = WriteFile(dir, "in.txt", "/load " + bad + "\n");
  CliResult l = RunRotor({"chat", "-m", BundledModel(), "-t", "1"}, input);
  EXPECT_EQ(l.exit_code, 0);
  EXPECT_THAT(l.err, HasSubstr("messages[0]"));
}

// A tmux server of its own (unique socket), killed when the test ends.
class Tmux {
 public:
  Tmux() : socket_("rotor-chat-test-" + std::to_string(getpid()) + "-" + std::to_string(next_++)) {}
  ~Tmux() {
    Run("kill-server");
    if (!socket_path_.empty()) std::remove(socket_path_.c_str());  // tmux leaves it behind
    std::remove(status_path_.c_str());
  }

  // Runs `tmux -L socket <args>` (args already quoted for the shell).
  std::string Run(const std::string& args, int* status = nullptr) const {
    const std::string cmd = "tmux -L " + socket_ + " -f /dev/null " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return "popen failed";
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int rc = pclose(p);
    if (status) *status = rc;
    return out;
  }
  // Runs `command` in the pane under a shell that records its exit status in a
  // file: tmux 3.3 sometimes leaves an exited pane process unreaped (a zombie
  // without #{pane_dead_status}), so the status is not taken from tmux. The
  // shell's own Ctrl-C trap keeps it alive while the program handles SIGINT.
  bool Start(const std::string& command) {
    int status = 0;
    std::remove(status_path_.c_str());
    const std::string wrapped =
        "trap : INT; " + command + "; echo $? > " + Quote(status_path_ + ".tmp") + " && mv " +
        Quote(status_path_ + ".tmp") + " " + Quote(status_path_);
    const std::string out = Run("new-session -d -s chat -x 160 -y 50 " +
                                    Quote("sh -c " + Quote(wrapped)) +
                                    " ';' set-option -t chat remain-on-exit on",
                                &status);
    if (status != 0) ADD_FAILURE() << "tmux new-session: " << out;
    socket_path_ = Run("display-message -p '#{socket_path}'");
    while (!socket_path_.empty() && socket_path_.back() == '\n') socket_path_.pop_back();
    return status == 0;
  }
  void Type(const std::string& text) const { Run("send-keys -t chat -l " + Quote(text)); }
  void Keys(const std::string& keys) const { Run("send-keys -t chat " + keys); }
  std::string Screen() const { return Run("capture-pane -p -J -t chat -S -2000"); }
  // The program's exit status once it has exited ("" while it runs).
  std::string ExitStatus() const {
    std::ifstream in(status_path_);
    std::string s;
    std::getline(in, s);
    return s;
  }
  bool Exited() const { return !ExitStatus().empty(); }

  // Polls the screen until `done` holds (or 30 s pass: the test cannot hang).
  bool WaitFor(const std::function<bool(const std::string&)>& done, const char* what) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string screen;
    while (std::chrono::steady_clock::now() < deadline) {
      screen = Screen();
      if (done(screen)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; the screen:\n" << screen;
    return false;
  }

  static std::string Quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  }

 private:
  static inline int next_ = 0;
  std::string socket_;
  std::string socket_path_;
  std::string status_path_ = ::testing::TempDir() + "/" + socket_ + ".status";
};

bool TmuxInstalled() { return std::system("tmux -V >/dev/null 2>&1") == 0; }

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The last non-empty line of the screen.
std::string LastLine(const std::string& screen) {
  std::string s = screen;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

std::string ChatCommand(const std::string& extra) {
  return std::string(ROTOR_BINARY_DIR) + "/rotor chat -m " + BundledModel() +
         " --temp 0 -n 24 -t 1 --kv sink --ignore-eos " + extra;
}

TEST(ChatCli, TerminalSessionWithCtrlCAndCtrlD) {
  ASSERT_TRUE(TmuxInstalled()) << "tmux is not installed (apt-get install tmux)";
  Tmux tmux;
  ASSERT_TRUE(tmux.Start(ChatCommand("")));
  ASSERT_TRUE(tmux.WaitFor([](const std::string& s) { return LastLine(s) == ">"; }, "the prompt"));
  EXPECT_THAT(tmux.Screen(), HasSubstr("/help for commands"));

  tmux.Type("Hello there");
  tmux.Keys("Enter");
  ASSERT_TRUE(tmux.WaitFor(
      [](const std::string& s) { return Count(s, "[prompt ") == 1 && LastLine(s) == ">"; },
      "the first reply"));
  tmux.Type("Tell me about the cat");
  tmux.Keys("Enter");
  ASSERT_TRUE(tmux.WaitFor(
      [](const std::string& s) { return Count(s, "[prompt ") == 2 && LastLine(s) == ">"; },
      "the second reply"));
  std::vector<int64_t> counts = PromptCounts(tmux.Screen());
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0], FirstTurnTokens("User: Hello there\nAssistant:"));
  // The second turn ran only the new tokens: the first reply's closing newline,
  // the user's line and the assistant header.
  EXPECT_EQ(counts[1], ContinuationTokens("\nUser: Tell me about the cat\nAssistant:"));

  // A reply without end, stopped by Ctrl-C.
  tmux.Type("/n 100000000");
  tmux.Keys("Enter");
  ASSERT_TRUE(tmux.WaitFor(
      [](const std::string& s) { return s.find("(replies up to") != std::string::npos; }, "/n"));
  tmux.Type("Tell me a long story");
  tmux.Keys("Enter");
  const std::string before = tmux.Screen();
  ASSERT_TRUE(tmux.WaitFor(
      [&](const std::string& s) {
        const size_t at = s.rfind("Tell me a long story");
        return at != std::string::npos && s.size() - at > 400;  // the reply is streaming
      },
      "the long reply to stream"));
  tmux.Keys("C-c");
  ASSERT_TRUE(tmux.WaitFor(
      [](const std::string& s) { return Count(s, "[prompt ") == 3 && LastLine(s) == ">"; },
      "the cancelled reply's footer and the prompt"));
  const std::string after = tmux.Screen();
  EXPECT_THAT(after, HasSubstr("finish: cancelled"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(tmux.Screen(), after);                // the reply stopped
  EXPECT_FALSE(tmux.Exited());  // still running

  // The conversation goes on after the cancelled reply.
  tmux.Type("/n 8");
  tmux.Keys("Enter");
  tmux.Type("Bye");
  tmux.Keys("Enter");
  ASSERT_TRUE(tmux.WaitFor(
      [](const std::string& s) { return Count(s, "[prompt ") == 4 && LastLine(s) == ">"; },
      "the reply after the cancelled one"));

  tmux.Keys("C-d");
  ASSERT_TRUE(
      tmux.WaitFor([&](const std::string&) { return tmux.Exited(); }, "the process to exit"));
  EXPECT_EQ(tmux.ExitStatus(), "0");
}

TEST(ChatCli, CtrlCTwiceAtThePromptQuits) {
  ASSERT_TRUE(TmuxInstalled()) << "tmux is not installed (apt-get install tmux)";
  Tmux tmux;
  ASSERT_TRUE(tmux.Start(ChatCommand("")));
  ASSERT_TRUE(tmux.WaitFor([](const std::string& s) { return LastLine(s) == ">"; }, "the prompt"));
  tmux.Type("half a line");
  tmux.Keys("C-c");
  ASSERT_TRUE(tmux.WaitFor(
      [](const std::string& s) {
        return s.find("Ctrl-C again") != std::string::npos && LastLine(s) == ">";
      },
      "the hint"));
  EXPECT_EQ(Count(tmux.Screen(), "[prompt "), 0u);  // the line was dropped, not sent
  EXPECT_FALSE(tmux.Exited());
  tmux.Keys("C-c");
  ASSERT_TRUE(
      tmux.WaitFor([&](const std::string&) { return tmux.Exited(); }, "the process to exit"));
  EXPECT_EQ(tmux.ExitStatus(), "0");
}

}  // namespace
}  // namespace rotor::testing
