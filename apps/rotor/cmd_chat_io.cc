#include "cmd_chat_io.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "cli_common.h"

namespace rotor::cli {
namespace {

std::atomic<bool> g_cancel{false};
volatile sig_atomic_t g_sigint = 0;

void OnSigint(int) {
  g_cancel.store(true);
  g_sigint = 1;
}

void SetSigintMask(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  pthread_sigmask(how, &set, nullptr);
}

}  // namespace

void SigintFlag::Install() {
  struct sigaction sa = {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read waiting for input returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

void SigintFlag::Block() { SetSigintMask(SIG_BLOCK); }
void SigintFlag::Unblock() { SetSigintMask(SIG_UNBLOCK); }
std::atomic<bool>& SigintFlag::flag() { return g_cancel; }

bool SigintFlag::Take() {
  const bool got = g_sigint != 0;
  g_sigint = 0;
  return got;
}

LineReader::Got LineReader::Read(std::string* line) {
  for (;;) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      line->assign(buffer_, 0, nl);
      buffer_.erase(0, nl + 1);
      return Got::kLine;
    }
    if (eof_) {
      if (buffer_.empty()) return Got::kEof;
      line->swap(buffer_);
      buffer_.clear();
      return Got::kLine;
    }
    char chunk[4096];
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0) {
      eof_ = true;
    } else if (errno == EINTR) {
      if (SigintFlag::Take()) {
        buffer_.clear();
        return Got::kInterrupted;
      }
    } else {
      eof_ = true;  // an unreadable stdin ends the session like EOF
    }
  }
}

Status SaveTranscript(const std::string& path, const std::string& model,
                      const std::string& chat_template, const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["chat_template"] = chat_template;
  j["messages"] = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages)
    j["messages"].push_back({{"role", m.role}, {"content", m.content}});
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Errorf("cannot write '{}': {}", path, std::strerror(errno));
  // Invalid UTF-8 in a reply (a cancelled multi-byte character) becomes U+FFFD.
  out << j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) return Errorf("cannot write '{}'", path);
  return Status::Ok();
}

Result<std::vector<ChatMessage>> LoadTranscript(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::json j = ParseBoundedJson<nlohmann::json>(text);
  if (j.is_discarded())
    return Errorf("'{}' is not JSON (or nests deeper than {} levels)", path, kMaxJsonNesting);
  if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
    return Errorf("'{}': expected an object with a \"messages\" array", path);
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const nlohmann::json& m = j["messages"][i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      return Errorf("'{}': messages[{}] needs string \"role\" and \"content\"", path, i);
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      return Errorf("'{}': messages[{}] has role '{}' (system, user or assistant)", path, i, role);
    messages.push_back({role, m["content"].get<std::string>()});
  }
  return messages;
}

}  // namespace rotor::cli
