// Noticing that an HTTP client went away while its request is generating.
//
// cpp-httplib 0.11 gives a handler no access to its connection, and a
// non-streaming handler writes nothing until the end, so a write cannot fail
// early. The probe finds the connection's socket among the process's file
// descriptors by its address pair (the request's local and remote address and
// port identify it uniquely) and peeks at it: end of stream or a reset means
// the client closed the connection. The descriptor stays valid while the
// handler (and its content provider) runs, since httplib closes it only after
// the response. Linux only (/proc/self/fd); elsewhere, or if no socket
// matches, Gone() is always false. A client that half-closes its sending side
// while waiting for the answer counts as gone (HTTP clients do not do this).
#pragma once

#include <string>

namespace httplib {
struct Request;
}

namespace rotor::serve {

class ClientProbe {
 public:
  explicit ClientProbe(const httplib::Request& req);
  // True once the peer has closed or reset the connection.
  bool Gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace rotor::serve
