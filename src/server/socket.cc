#include "server/socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

namespace rotor::serve {
namespace {

struct SockName {
  std::string addr;
  int port = -1;
};

bool Describe(const sockaddr_storage& ss, SockName* out) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    out->port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    out->port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  out->addr = buf;
  return true;
}

bool Local(int fd, SockName* out) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && Describe(ss, out);
}

bool Remote(int fd, SockName* out) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  return getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && Describe(ss, out);
}

}  // namespace

ClientProbe::ClientProbe(const httplib::Request& req) {
  if (req.remote_port < 0 || req.local_port < 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  int by_port = -1;  // ports match; the address text may be spelled differently
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    SockName local, remote;
    if (!Local(static_cast<int>(fd), &local) || local.port != req.local_port) continue;
    if (!Remote(static_cast<int>(fd), &remote) || remote.port != req.remote_port) continue;
    if (remote.addr == req.remote_addr && local.addr == req.local_addr) {
      fd_ = static_cast<int>(fd);
      break;
    }
    by_port = static_cast<int>(fd);
  }
  closedir(dir);
  if (fd_ < 0) fd_ = by_port;
}

bool ClientProbe::Gone() const {
  if (fd_ < 0) return false;
  char c;
  const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // the next request of a pipelining client
  if (n == 0) return true;  // end of stream
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace rotor::serve
