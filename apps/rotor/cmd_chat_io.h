// The terminal side of rotor chat: reading lines from stdin (a terminal or a
// pipe) with Ctrl-C delivered as a flag, and transcripts saved as JSON.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template.h"

namespace rotor::cli {

// SIGINT sets this flag (and counts); nothing else happens in the handler.
// Install before any thread is started with BlockSigintInThisThread() so only
// the thread that reads input receives the signal and sees its read fail.
class SigintFlag {
 public:
  static void Install();
  // Blocks SIGINT in the calling thread (threads it starts inherit the mask);
  // Unblock() undoes it.
  static void Block();
  static void Unblock();
  static std::atomic<bool>& flag();
  // Whether a SIGINT arrived since the last Take(); clears it.
  static bool Take();
};

// Lines from a file descriptor, by read(2) so that a SIGINT interrupts a wait.
class LineReader {
 public:
  enum class Got { kLine, kEof, kInterrupted };
  explicit LineReader(int fd) : fd_(fd) {}
  // A line without its "\n" (a last line without one counts); kInterrupted if
  // a SIGINT arrived while waiting (a terminal drops what was typed).
  Got Read(std::string* line);

 private:
  int fd_;
  std::string buffer_;  // bytes read past the last line returned
  bool eof_ = false;
};

// {"model": ..., "chat_template": ..., "messages": [{"role": ..., "content": ...}]}
Status SaveTranscript(const std::string& path, const std::string& model,
                      const std::string& chat_template, const std::vector<ChatMessage>& messages);
// The messages of a file written by SaveTranscript (errors name the file and field).
Result<std::vector<ChatMessage>> LoadTranscript(const std::string& path);

}  // namespace rotor::cli
