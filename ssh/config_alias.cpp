#include "ssh/config_alias.h"

#include <fmt/format.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <sstream>

#include "common/error.h"
#include "common/process.h"
#include "common/user_account.h"

namespace hvd::ssh {
namespace {

// libssh takes a host named this when the real name resolves to nothing: the connect resolves
// the HostName itself and reports "does not resolve" before libssh uses its host.
constexpr const char* kUnresolved = "unresolved.invalid";

// The identity files `ssh -G` lists when the configuration names none.
constexpr std::array<std::string_view, 7> kOpenSshDefaultKeys{
    "~/.ssh/id_rsa",        "~/.ssh/id_ecdsa", "~/.ssh/id_ecdsa_sk", "~/.ssh/id_ed25519",
    "~/.ssh/id_ed25519_sk", "~/.ssh/id_xmss",  "~/.ssh/id_dsa"};

void set(Session& s, ssh_options_e option, const void* value, std::string_view what) {
  if (ssh_options_set(s.get(), option, value) != SSH_OK) {
    throw Error(fmt::format("libssh rejected the {} option: {}", what, last_error(s)));
  }
}

// The first address `name` resolves to, as text; nullopt when it does not resolve.
std::optional<std::string> address_of(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  char text[NI_MAXHOST] = {};
  const int rc =
      getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(found);
  if (rc != 0) return std::nullopt;
  return std::string(text);
}

}  // namespace

OpenSshView parse_openssh_view(const std::string& text) {
  OpenSshView view;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space);
    const std::string value = line.substr(space + 1);
    if (key == "hostname") {
      view.hostname = value;
    } else if (key == "port") {
      try {
        view.port = std::stoi(value);
      } catch (const std::exception&) {
      }
    } else if (key == "user") {
      view.user = value;
    } else if (key == "identityfile") {
      view.identity_files.push_back(value);
    } else if (key == "userknownhostsfile") {
      view.known_hosts = value.substr(0, value.find(' '));
    } else if (key == "hostkeyalias") {
      view.host_key_alias = value;
    } else if (key == "proxycommand" && value != "none") {
      view.proxy_command = value;
    }
  }
  return view;
}

std::optional<OpenSshView> openssh_view(const std::string& host,
                                        const std::optional<std::string>& config_file) {
  ProcessSpec spec;
  spec.argv = {"ssh", "-G"};
  if (config_file) spec.argv.insert(spec.argv.end(), {"-F", *config_file});
  spec.argv.push_back(host);  // never starts with '-': the host check refuses that
  spec.env = environ_strings();
  spec.lookup_in_our_path = true;
  const std::optional<CapturedRun> run = run_and_capture(spec);
  if (!run) return std::nullopt;
  if (run->status.code() != 0) {
    throw UsageError(
        fmt::format("host '{}': OpenSSH cannot read its configuration for it (ssh -G {}): {}", host,
                    host, run->output),
        config_file ? "check the file with: ssh -G -F " + *config_file + " " + host
                    : "check ~/.ssh/config with: ssh -G " + host);
  }
  return parse_openssh_view(run->output);
}

bool libssh_accepts_host(const std::string& name) {
  Session scratch = new_session();
  return ssh_options_set(scratch.get(), SSH_OPTIONS_HOST, name.c_str()) == SSH_OK;
}

ResolvedTarget apply_config_alias(Session& session, const SshTarget& target,
                                  const SshOptions& options) {
  std::optional<OpenSshView> view = openssh_view(target.host, options.config_file);
  if (!view) {
    spdlog::debug(
        "host '{}': no ssh program to read the ssh configuration for a name libssh "
        "does not take; connecting to it as written",
        target.host);
    view = OpenSshView{};
  }
  ResolvedTarget r;
  r.host = target.host;
  r.hostname = view->hostname.empty() ? target.host : view->hostname;
  r.libssh_host =
      libssh_accepts_host(r.hostname) ? r.hostname : address_of(r.hostname).value_or(kUnresolved);
  set(session, SSH_OPTIONS_HOST, r.libssh_host.c_str(), "host");
  // OpenSSH's answer above is the whole configuration: parsing an empty one marks it processed,
  // so ssh_connect() does not read ~/.ssh/config again for the stand-in name.
  ssh_options_parse_config(session.get(), "/dev/null");

  r.port = target.port ? *target.port : options.port ? *options.port : view->port.value_or(22);
  const unsigned int port = static_cast<unsigned int>(r.port);
  set(session, SSH_OPTIONS_PORT, &port, "port");
  if (target.user) {
    r.user = *target.user;
  } else if (view->user) {
    r.user = *view->user;
  } else if (const auto account = current_account()) {
    r.user = account->name;
  }
  if (!r.user.empty()) set(session, SSH_OPTIONS_USER, r.user.c_str(), "user");
  r.known_hosts = options.known_hosts_file ? *options.known_hosts_file
                  : view->known_hosts      ? expand_ssh_path(*view->known_hosts)
                                           : user_ssh_dir() + "/known_hosts";
  set(session, SSH_OPTIONS_KNOWNHOSTS, r.known_hosts.c_str(), "known hosts");
  if (view->proxy_command) {
    r.proxy_command = view->proxy_command;
    set(session, SSH_OPTIONS_PROXYCOMMAND, r.proxy_command->c_str(), "proxy command");
  }
  r.key_host = view->host_key_alias.value_or(r.hostname);
  r.key_is_alias = view->host_key_alias.has_value();

  // As apply_config: -i first, then the configuration's IdentityFile, else the default keys.
  if (options.identity_file) r.identities.push_back(*options.identity_file);
  for (const std::string& file : view->identity_files) {
    const bool is_default = std::find(kOpenSshDefaultKeys.begin(), kOpenSshDefaultKeys.end(),
                                      file) != kOpenSshDefaultKeys.end();
    if (!is_default) r.identities.push_back(expand_ssh_path(file));
  }
  if (r.identities.empty()) r.identities = default_identities();
  return r;
}

}  // namespace hvd::ssh
