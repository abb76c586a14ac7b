#include "base/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rotor {

Result<std::string> ReadInputFile(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO nobody writes must not hang before fstat says what it is.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Errorf("cannot open '{}': {}", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Errorf("cannot stat '{}': {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Errorf("'{}' is a directory, not a file", path);
  if (!S_ISREG(st.st_mode))
    return Errorf("'{}' is not a regular file (a device, pipe or socket is not read)", path);
  if (st.st_size > max_bytes)
    return Errorf("'{}' is {} bytes, more than the limit of {} bytes", path,
                  static_cast<int64_t>(st.st_size), max_bytes);
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      // The file may have grown since fstat: read on, never past the bound.
      if (static_cast<int64_t>(got) >= max_bytes) {
        char probe;
        const ssize_t n = ::read(fd, &probe, 1);
        if (n > 0)
          return Errorf("'{}' grew past the limit of {} bytes while it was read", path, max_bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Errorf("cannot read '{}': {}", path, std::strerror(errno));
        break;
      }
      out.resize(std::min<size_t>(static_cast<size_t>(max_bytes), got + 65536));
    }
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errorf("cannot read '{}': {}", path, std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace rotor
