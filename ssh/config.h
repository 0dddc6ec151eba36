// Applying the user's ssh configuration before anything connects (libssh reads ~/.ssh/config by
// itself at connect time, which could move host and port behind our own connect; resolving it first
// means our connect goes where the config says).
//
// Precedence, as OpenSSH: the host's hostfile port=/user= (or user@host), then -p/-i, then the
// config file, then defaults. A config can never weaken the host-key policy: hvdrun checks host
// keys itself (check_host.cpp) whatever StrictHostKeyChecking says.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ssh/options.h"
#include "ssh/session.h"

namespace hvd::ssh {

struct ResolvedTarget {
  std::string host;      // as written (an alias the config may map)
  std::string hostname;  // where to connect, after the config's HostName
  // The name libssh holds: the hostname, or for a name libssh 0.10 does not take (with '_':
  // ssh/config_alias.h) an address it resolves to.
  std::string libssh_host;
  // The name the host key is checked and recorded under in known_hosts, as OpenSSH's: the
  // config's HostKeyAlias, else the hostname ("[name]:port" off port 22).
  std::string key_host;
  bool key_is_alias = false;  // key_host is a HostKeyAlias: known_hosts names it without the port
  int port = 22;
  std::string user;
  std::vector<std::string> identities;  // key files to try, in order, paths expanded
  std::string known_hosts;              // the known_hosts file in effect, path expanded
  std::optional<std::string> proxy_command;
};

// Applies the configuration to `session` (which must be new) and reads back what it resolved.
// Throws hvd::UsageError when an explicitly given config file cannot be read.
ResolvedTarget apply_config(Session& session, const SshTarget& target, const SshOptions& options);

// The keys tried when neither -i nor the configuration names one, OpenSSH's order: paths.
std::vector<std::string> default_identities();

// ~ and %d (the ssh directory) in a path, as libssh writes its defaults.
std::string expand_ssh_path(const std::string& path);

// The user's ~/.ssh, from the password database (as libssh and OpenSSH find it, not $HOME).
std::string user_ssh_dir();

}  // namespace hvd::ssh
