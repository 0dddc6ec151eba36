// Blocking, EINTR-safe reads and writes on a file descriptor, shared by the agent, the launcher
// and the SSH pump.
#pragma once

#include <cstddef>
#include <string_view>

namespace hvd {

// Writes every byte; false if the peer is gone (EPIPE) or another error ends it.
bool write_all(int fd, std::string_view bytes);

// One read; 0 at EOF, negative on error.
long read_some(int fd, char* buf, size_t size);

}  // namespace hvd
