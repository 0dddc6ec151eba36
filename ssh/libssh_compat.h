// The libssh calls whose API differs between libssh 0.10 (Debian 12) and 0.11 (Debian 13): the one
// place that knows both. It goes when Debian 12 does.
#pragma once

#include <libssh/libssh.h>

#include <cstdint>

namespace hvd::ssh {

// The remote command's exit code, or -1 when it ended by a signal or its status is not known
// (the channel closed without one). Blocks, up to the session's timeout, until the status has
// arrived: call it after all output was read. libssh 0.10's ssh_channel_get_exit_status has these
// semantics; 0.11 deprecates it for ssh_channel_get_exit_state, which tells the signal apart.
inline int channel_exit_status(ssh_channel channel) {
#if LIBSSH_VERSION_INT >= SSH_VERSION_INT(0, 11, 0)
  std::uint32_t code = 0;
  char* signal = nullptr;
  int core_dumped = 0;
  const int rc = ssh_channel_get_exit_state(channel, &code, &signal, &core_dumped);
  const bool by_signal = signal != nullptr;
  ssh_string_free_char(signal);
  if (rc != SSH_OK || by_signal) return -1;
  return static_cast<int>(code);
#else
  return ssh_channel_get_exit_status(channel);
#endif
}

}  // namespace hvd::ssh
