// Blocking, EINTR-safe reads and writes on a file descriptor, shared by the agent, the launcher
// and the SSH pump.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hvd {

// Writes every byte; false if the peer is gone (EPIPE) or another error ends it.
bool write_all(int fd, std::string_view bytes);

// One read; 0 at EOF, negative on error.
long read_some(int fd, char* buf, size_t size);

// A whole file read with a bound: `too_large` when it holds more than `max_bytes` (then no more
// than max_bytes + 1 bytes were read); `error` (an errno value) when it cannot be opened or read.
struct BoundedFile {
  std::string bytes;
  bool too_large = false;
  int error = 0;
};
BoundedFile read_file_bounded(const std::string& path, size_t max_bytes);

// A file the user named with `flag` (--hostfile, --config-file), read whole with a bound; a
// UsageError (exit 64) naming the flag, the file and what went wrong when it cannot be read or
// holds more than `max_bytes` (whole MiB). `holds` says what such a file holds, for the hints
// ("a hostfile has one line 'host slots=N' per host").
std::string read_user_file(std::string_view flag, const std::string& path, size_t max_bytes,
                           std::string_view holds);

}  // namespace hvd
