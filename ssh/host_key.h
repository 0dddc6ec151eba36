// Host-key verification after the key exchange (libssh's known-hosts API, as in its examples):
// OK passes; CHANGED and OTHER (a different key, or a key of another type, than recorded) always
// fail and are never recorded; UNKNOWN is recorded under accept-new and fails under strict.
// Writes to a known_hosts file are serialised: in-process by a mutex, across processes by flock.
#pragma once

#include <string>

#include "ssh/config.h"
#include "ssh/host_check.h"
#include "ssh/options.h"
#include "ssh/session.h"

namespace hvd::ssh {

struct HostKeyCheck {
  CheckCode code = CheckCode::kOk;  // kOk, kHostKeyUnknown or kHostKeyChanged
  HostKeyOutcome outcome = HostKeyOutcome::kNotChecked;
  std::string message;
  std::string hint;
};

HostKeyCheck check_host_key(Session& session, const ResolvedTarget& target,
                            const SshOptions& options);

}  // namespace hvd::ssh
