// rotor chat: an interactive conversation in the terminal. The reply streams
// to stdout, a one-line footer per turn to stderr; Ctrl-C stops a reply,
// Ctrl-D (end of input) ends the session. Works with piped input too.
#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/log.h"
#include "cli_common.h"
#include "cmd_chat_io.h"
#include "commands.h"
#include "engine/chat_session.h"

namespace rotor::cli {
namespace {

struct ChatArgs {
  EngineOptions engine;
  ChatOptions chat;
  std::string chat_template;
  int prefill_step = kDefaultPrefillStep;
  bool escape = true;  // -e / --no-escape
};

constexpr const char* kHelp =
    "  /clear        forget the conversation (the system prompt stays)\n"
    "  /save FILE    write the transcript as JSON, and its KV cache to FILE.kv\n"
    "  /load FILE    read a transcript written by /save and continue it (its KV\n"
    "                from FILE.kv where it matches, instead of prefilling it)\n"
    "  /n N          tokens per reply from now on (-1 = no limit)\n"
    "  /help         this list\n"
    "  /quit         end the session (as Ctrl-D)\n"
    "  A line ending in \\ continues on the next line; //text sends \"/text\".\n"
    "  Ctrl-C stops a reply; at the prompt, twice, it quits.\n";

Result<ChatTemplate> ResolveTemplate(const Engine& engine, const std::string& name) {
  if (!name.empty()) return ChatTemplate::FromName(name);
  ASSIGN_OR_RETURN(std::string jinja,
                   engine.model().file().GetStringOr("tokenizer.chat_template", ""));
  Result<ChatTemplate> t = ChatTemplate::Detect(jinja);
  if (t.ok()) return t;
  fmt::print(stderr, "rotor chat: {}; using 'plain' (choose with --chat-template)\n", t.message());
  return ChatTemplate();
}

std::string Footer(const ChatTurn& t, const ChatSession& chat, int n_ctx) {
  std::string context = chat.cache().Remaining() < 0
                            ? fmt::format("{} tokens, {} cached", t.n_past, chat.cache().n_used())
                            : fmt::format("{}/{}", t.n_past, chat.cache().n_cells());
  std::string finish(FinishReasonName(t.finish));
  if (t.finish == FinishReason::kError) finish += ": " + t.error;
  if (t.finish == FinishReason::kContext && t.longer_than_context)
    finish += fmt::format(" (the message is longer than the context of {} tokens)", n_ctx);
  else if (t.finish == FinishReason::kContext)
    finish += fmt::format(" (the context of {} tokens is full: /clear to start again)", n_ctx);
  return fmt::format(
      "[prompt {} tokens, {:.1f} tok/s | reply {} tokens, {:.1f} tok/s | "
      "finish: {} | context {}]",
      t.n_prompt, t.prompt_tps(), t.n_generated, t.gen_tps(), finish, context);
}

class ChatLoop {
 public:
  ChatLoop(ChatSession& chat, const ChatArgs& args, int n_ctx)
      : chat_(chat), args_(args), n_ctx_(n_ctx), tty_(isatty(0) != 0) {}

  int Run() {
    if (tty_)
      fmt::print(stderr, "rotor chat: {} | template {} | context {} | kv {} | /help for commands\n",
                 args_.engine.model_path, chat_.chat_template().name(), n_ctx_,
                 chat_.cache().config().policy);
    LineReader in(0);
    std::string message;  // lines joined by a trailing backslash
    int interrupts = 0;
    for (;;) {
      std::fputs(message.empty() ? "> " : "... ", stdout);
      std::fflush(stdout);
      std::string line;
      const LineReader::Got got = in.Read(&line);
      if (got == LineReader::Got::kEof) {
        if (tty_) std::fputc('\n', stdout);
        if (!message.empty()) Say(message);
        return 0;
      }
      if (got == LineReader::Got::kInterrupted) {
        message.clear();
        if (++interrupts >= 2) {
          std::fputc('\n', stdout);
          return 0;
        }
        std::fputc('\n', stdout);
        fmt::print(stderr, "(Ctrl-C again or Ctrl-D to quit)\n");
        continue;
      }
      interrupts = 0;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty() && line.back() == '\\') {
        line.pop_back();
        message += line + "\n";
        continue;
      }
      message += line;
      std::string text;
      text.swap(message);
      if (text.starts_with("//")) {
        Say(text.substr(1));
      } else if (text.starts_with("/")) {
        if (!Command(text)) return 0;
      } else if (text.find_first_not_of(" \t\n") != std::string::npos) {
        Say(text);
      }
    }
  }

 private:
  void Say(const std::string& text) {
    SigintFlag::flag().store(false);
    SigintFlag::Take();
    Result<ChatTurn> t = chat_.Send(
        text,
        [](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
          return true;
        },
        &SigintFlag::flag());
    SigintFlag::Take();  // a Ctrl-C during the reply is spent on it
    if (!t.ok()) {
      fmt::print(stderr, "rotor: error: {}\n", t.message());
      return;
    }
    if (t->finish == FinishReason::kContext && t->longer_than_context)
      fmt::print(stderr,
                 "rotor: the message takes {} tokens (with the chat template), more than the "
                 "context holds ({} tokens with --kv {}): shorten it, or choose a policy that "
                 "evicts (--kv sink)\n",
                 t->n_refused, chat_.cache().n_cells(), chat_.cache().config().policy);
    else if (t->finish == FinishReason::kContext && t->n_prompt == 0)
      fmt::print(stderr,
                 "rotor: the message takes {} tokens, more than is left of the context: /clear "
                 "to start again\n",
                 t->n_refused);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    fmt::print(stderr, "{}\n", Footer(*t, chat_, n_ctx_));
  }

  // False to end the session.
  bool Command(const std::string& text) {
    const size_t space = text.find_first_of(" \t");
    const std::string name = text.substr(0, space);
    std::string arg = space == std::string::npos ? "" : text.substr(space + 1);
    arg.erase(0, arg.find_first_not_of(" \t"));
    arg.erase(arg.find_last_not_of(" \t\n") + 1);
    if (name == "/help") {
      fmt::print(stderr, "{}", kHelp);
    } else if (name == "/quit" || name == "/exit") {
      return false;
    } else if (name == "/n") {
      int n = 0;
      const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), n);
      if (arg.empty() || ec != std::errc() || end != arg.data() + arg.size() || n < -1) {
        fmt::print(stderr, "rotor: /n needs a number of tokens >= -1, not '{}'\n", arg);
      } else {
        chat_.set_n_predict(n);
        fmt::print(stderr, "(replies up to {} tokens)\n", n < 0 ? "any number of" : arg);
      }
    } else if (name == "/clear") {
      chat_.Clear();
      fmt::print(stderr, "(conversation cleared)\n");
    } else if (name == "/save" || name == "/load") {
      if (arg.empty()) {
        fmt::print(stderr, "rotor: {} needs a file name\n", name);
      } else if (name == "/save") {
        Save(arg);
      } else {
        Load(arg);
      }
    } else {
      fmt::print(stderr, "rotor: unknown command '{}' (/help lists the commands)\n", name);
    }
    return true;
  }

  // The transcript as JSON, its KV cache beside it (PATH.kv).
  void Save(const std::string& path) {
    Status s = SaveTranscript(path, std::filesystem::path(args_.engine.model_path).stem(),
                              std::string(chat_.chat_template().name()), chat_.messages());
    if (!s.ok()) {
      fmt::print(stderr, "rotor: error: /save: {}\n", s.message());
      return;
    }
    const std::string kv = path + ".kv";
    Result<int64_t> bytes = chat_.SaveKv(kv);
    if (bytes.ok())
      fmt::print(stderr, "(saved {} messages to {}, {} tokens of K/V to {})\n",
                 chat_.messages().size(), path, chat_.tokens().size(), kv);
    else
      fmt::print(stderr, "(saved {} messages to {}; K/V not saved: {})\n", chat_.messages().size(),
                 path, bytes.message());
  }

  void Load(const std::string& path) {
    Result<std::vector<ChatMessage>> messages = LoadTranscript(path);
    if (!messages.ok()) {
      fmt::print(stderr, "rotor: error: /load: {}\n", messages.message());
      return;
    }
    const size_t n = messages->size();
    const std::string kv = path + ".kv";
    const bool has_kv = std::filesystem::exists(kv);
    Result<ChatSession::Loaded> loaded = chat_.Load(std::move(*messages), has_kv ? kv : "");
    if (!loaded.ok()) {
      fmt::print(stderr, "rotor: error: /load: {}\n", loaded.message());
      return;
    }
    if (!loaded->kv.ok())
      fmt::print(stderr, "(K/V not restored: {}; prefilling the transcript)\n",
                 loaded->kv.message());
    const std::string restored =
        has_kv ? fmt::format("{} tokens restored from {}, ", loaded->n_restored, kv) : "";
    fmt::print(stderr, "(loaded {} messages from {}; {}prompt {} tokens)\n", n, path, restored,
               loaded->n_prompt);
  }

  ChatSession& chat_;
  const ChatArgs& args_;
  int n_ctx_;
  bool tty_;
};

int RunChat(ChatArgs& a) {
  if (a.escape) {  // the command line's texts, as llama.cpp's (typed messages are not)
    a.chat.system = ProcessEscapes(a.chat.system);
    for (std::string& stop : a.chat.stop) stop = ProcessEscapes(stop);
  }
  // Worker threads start with SIGINT blocked: the signal goes to the thread
  // that reads input, so Ctrl-C interrupts a wait at the prompt.
  SigintFlag::Block();
  Result<std::unique_ptr<Engine>> engine = Engine::Create(a.engine);
  SigintFlag::Unblock();
  if (!engine.ok()) return Fail(engine.status());
  Result<ChatTemplate> tmpl = ResolveTemplate(**engine, a.chat_template);
  if (!tmpl.ok()) return Fail(tmpl.status());
  a.chat.chat_template = *tmpl;
  Result<std::unique_ptr<ChatSession>> chat = ChatSession::Create(**engine, a.chat, a.prefill_step);
  if (!chat.ok()) return Fail(chat.status());
  Log(LogLevel::kInfo, "chat: kv {}; prefill step {}", DescribeKvConfig((*chat)->cache().config()),
      a.prefill_step);
  if (std::string w = (*engine)->TrainedContextWarning((*chat)->cache().config(), -1); !w.empty())
    fmt::print(stderr, "rotor: warning: {}\n", w);
  SigintFlag::Install();
  return ChatLoop(**chat, a, (*engine)->n_ctx()).Run();
}

}  // namespace

Runner RegisterChat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* sub = app.add_subcommand("chat", "talk with a model in the terminal");
  AddEngineOptions(sub, &a->engine);
  AddSamplingOptions(sub, &a->chat.sampling);
  AddKvOptions(sub, &a->chat.kv);
  sub->add_option("--system,--system-prompt", a->chat.system, "system prompt (llama.cpp's -sys)");
  sub->add_flag("--conversation")->description("llama-cli's -cnv: chat is always a conversation");
  sub->add_flag("--jinja")->description(
      "llama-cli's: the chat template comes from the GGUF (see --chat-template)");
  sub->add_option("--chat-template", a->chat_template,
                  "llama2|llama3|chatml|mistral|phi3|gemma|zephyr|plain (default: from the "
                  "model's tokenizer.chat_template; plain without one)");
  sub->add_option("-n,--n-predict", a->chat.n_predict,
                  "tokens per reply (-1 = until the end of the turn or a full context)")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
  sub->add_option("--stop,-r,--reverse-prompt", a->chat.stop,
                  "also end a reply at this string (repeatable)");
  sub->add_flag("--ignore-eos", a->chat.ignore_eos,
                "run past end-of-text and end-of-turn tokens (replies end at -n or Ctrl-C)");
  AddEscapeOptions(sub, &a->escape);
  AddPrefillStepOptions(sub, &a->prefill_step);
  return [a] { return RunChat(*a); };
}

}  // namespace rotor::cli
