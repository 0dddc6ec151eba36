#include "common/fd_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace hvd {

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

long read_some(int fd, char* buf, size_t size) {
  while (true) {
    const ssize_t n = ::read(fd, buf, size);
    if (n >= 0 || errno != EINTR) return n;
  }
}

BoundedFile read_file_bounded(const std::string& path, size_t max_bytes) {
  BoundedFile out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    out.error = errno;
    return out;
  }
  char buf[64 * 1024];
  while (true) {
    const long n = read_some(fd, buf, sizeof buf);
    if (n < 0) {
      out.error = errno;
      break;
    }
    if (n == 0) break;
    const size_t room = max_bytes + 1 - out.bytes.size();
    out.bytes.append(buf, std::min(static_cast<size_t>(n), room));
    if (out.bytes.size() > max_bytes) {
      out.too_large = true;
      break;
    }
  }
  ::close(fd);
  return out;
}

std::string read_user_file(std::string_view flag, const std::string& path, size_t max_bytes,
                           std::string_view holds) {
  BoundedFile file = read_file_bounded(path, max_bytes);
  const std::string which = std::string(flag) + " " + path;
  if (file.error != 0) {
    throw UsageError(which + ": cannot read it: " + std::strerror(file.error),
                     "check the path (and that this user may read it); " + std::string(holds));
  }
  if (file.too_large) {
    throw UsageError(
        which + ": larger than " + std::to_string(max_bytes >> 20) + " MiB, the most hvdrun reads",
        std::string(holds) + "; check that this is the file you meant");
  }
  return std::move(file.bytes);
}

}  // namespace hvd
