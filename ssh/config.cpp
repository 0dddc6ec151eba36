#include "ssh/config.h"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>

#include "common/error.h"
#include "common/user_account.h"
#include "ssh/config_alias.h"

namespace hvd::ssh {
namespace {

std::optional<std::string> get_string(Session& s, ssh_options_e option) {
  char* value = nullptr;
  if (ssh_options_get(s.get(), option, &value) != SSH_OK || value == nullptr) return std::nullopt;
  std::string out = value;
  ssh_string_free_char(value);
  return out;
}

void set(Session& s, ssh_options_e option, const void* value, std::string_view what) {
  if (ssh_options_set(s.get(), option, value) != SSH_OK) {
    throw Error(fmt::format("libssh rejected the {} option: {}", what, last_error(s)));
  }
}

// The keys OpenSSH tries when nothing else is said, in its order.
constexpr std::array<const char*, 3> kDefaultKeys{"id_ed25519", "id_ecdsa", "id_rsa"};

}  // namespace

std::string user_ssh_dir() {
  const auto account = current_account();
  return (account ? account->home : std::string("/")) + "/.ssh";
}

std::string expand_ssh_path(const std::string& path) {
  std::string out = path;
  if (out.starts_with("%d")) out = user_ssh_dir() + out.substr(2);
  if (out.starts_with("~/")) {
    const auto account = current_account();
    out = (account ? account->home : std::string()) + out.substr(1);
  }
  return out;
}

std::vector<std::string> default_identities() {
  std::vector<std::string> out;
  for (const char* name : kDefaultKeys) out.push_back(user_ssh_dir() + "/" + name);
  return out;
}

ResolvedTarget apply_config(Session& session, const SshTarget& target, const SshOptions& options) {
  if (options.config_file) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*options.config_file, ec)) {
      throw UsageError(fmt::format("--ssh-config {}: not a readable file", *options.config_file),
                       "give the path of an ssh client configuration file (as for ssh -F)");
    }
  }
  if (!libssh_accepts_host(target.host)) return apply_config_alias(session, target, options);
  ResolvedTarget r;
  r.host = target.host;
  set(session, SSH_OPTIONS_HOST, target.host.c_str(), "host");

  // Parsing here marks the config processed, so ssh_connect() will not read ~/.ssh/config again.
  const char* config = options.config_file ? options.config_file->c_str() : nullptr;
  if (ssh_options_parse_config(session.get(), config) < 0 && options.config_file) {
    throw UsageError(fmt::format("--ssh-config {}: libssh could not parse it: {}",
                                 *options.config_file, last_error(session)),
                     "check the file with: ssh -G -F " + *options.config_file + " HOST");
  }

  if (const auto port = target.port ? target.port : options.port) {
    const unsigned int value = static_cast<unsigned int>(*port);
    set(session, SSH_OPTIONS_PORT, &value, "port");
  }
  if (target.user) set(session, SSH_OPTIONS_USER, target.user->c_str(), "user");
  if (!get_string(session, SSH_OPTIONS_USER)) {
    // What libssh would pick at connect time anyway; set now so reports can name it.
    if (const auto account = current_account()) {
      set(session, SSH_OPTIONS_USER, account->name.c_str(), "user");
    }
  }
  if (options.known_hosts_file) {
    set(session, SSH_OPTIONS_KNOWNHOSTS, options.known_hosts_file->c_str(), "known hosts");
  }

  r.hostname = get_string(session, SSH_OPTIONS_HOST).value_or(target.host);
  r.libssh_host = r.hostname;
  r.key_host = r.hostname;
  unsigned int port = 22;
  ssh_options_get_port(session.get(), &port);
  r.port = static_cast<int>(port);
  r.user = get_string(session, SSH_OPTIONS_USER).value_or("");
  r.known_hosts = expand_ssh_path(
      get_string(session, SSH_OPTIONS_KNOWNHOSTS).value_or(user_ssh_dir() + "/known_hosts"));
  r.proxy_command = get_string(session, SSH_OPTIONS_PROXYCOMMAND);
  if (r.proxy_command && r.proxy_command->empty()) r.proxy_command.reset();

  // As OpenSSH: -i first, then the config's IdentityFile; the default keys only when neither
  // names one. libssh exposes one identity: the config's (it prepends), else its first default.
  if (options.identity_file) r.identities.push_back(*options.identity_file);
  const auto first = get_string(session, SSH_OPTIONS_IDENTITY);
  const bool from_config = first && *first != std::string("%d/") + kDefaultKeys[0];
  if (from_config) r.identities.push_back(expand_ssh_path(*first));
  if (r.identities.empty()) r.identities = default_identities();
  return r;
}

}  // namespace hvd::ssh
