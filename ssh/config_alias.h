// Host names libssh 0.10 will not hold. Its host option takes only RFC 1035 names (letters,
// digits, '-', '.') and addresses, but OpenSSH and horovodrun take any name the user's
// ssh_config or resolver knows: docker-compose's `project_worker_1`, ssh_config aliases and
// /etc/hosts entries with '_'. For such a name hvdrun asks OpenSSH itself (`ssh -G`) what its
// configuration says, as `ssh NAME` would, and hands libssh an address it accepts:
//
//   - the config's HostName, when libssh accepts it, else the address that name resolves to
//     (a name that does not resolve keeps a placeholder: the connect, which resolves the
//     HostName itself, reports "does not resolve" as for any other name);
//   - the host key is checked and recorded under OpenSSH's name for it (HostKeyAlias, else the
//     HostName, with [..]:port off port 22), so an entry OpenSSH's ssh wrote is honoured; when
//     libssh holds another name than that one, ssh/host_key.cpp reads known_hosts itself.
//
// Without the `ssh` program no configuration applies to such a name (it is connected to as
// written); hvdrun says so at debug level.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ssh/config.h"
#include "ssh/options.h"
#include "ssh/session.h"

namespace hvd::ssh {

// What `ssh -G` says about a host: the options hvdrun uses, as OpenSSH resolves them.
struct OpenSshView {
  std::string hostname;
  std::optional<int> port;
  std::optional<std::string> user;
  std::vector<std::string> identity_files;  // as written (~ not expanded), in order
  std::optional<std::string> known_hosts;   // the first UserKnownHostsFile
  std::optional<std::string> host_key_alias;
  std::optional<std::string> proxy_command;
};

// Parses `ssh -G`'s output (one "keyword value" a line). Pure, for the unit tests.
OpenSshView parse_openssh_view(const std::string& text);

// Runs `ssh -G [-F config_file] HOST`; nullopt when the ssh program is not there. Throws
// hvd::UsageError when ssh refuses the configuration (its message quoted).
std::optional<OpenSshView> openssh_view(const std::string& host,
                                        const std::optional<std::string>& config_file);

// Whether libssh's host option takes `name` as it is.
bool libssh_accepts_host(const std::string& name);

// apply_config() for a host libssh does not take (see above).
ResolvedTarget apply_config_alias(Session& session, const SshTarget& target,
                                  const SshOptions& options);

}  // namespace hvd::ssh
