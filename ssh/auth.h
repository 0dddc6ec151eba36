// Authentication: ssh-agent (when SSH_AUTH_SOCK is set and no -i was given), then key files one
// by one, so a failure can say which keys were tried and what the server offers. Never a
// password, never a prompt: an encrypted key without an agent is reported as such.
#pragma once

#include <string>

#include "ssh/config.h"
#include "ssh/options.h"
#include "ssh/session.h"

namespace hvd::ssh {

struct AuthOutcome {
  bool ok = false;
  std::string message;  // on failure: user, methods offered, keys tried with their results
};

AuthOutcome authenticate(Session& session, const ResolvedTarget& target, const SshOptions& options);

// True when `path` holds a passphrase-protected private key (OpenSSH or PEM format).
bool key_is_encrypted(const std::string& path);

}  // namespace hvd::ssh
