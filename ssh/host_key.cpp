#include "ssh/host_key.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <vector>

#include "common/shell_quote.h"
#include "common/unique_fd.h"

namespace hvd::ssh {
namespace {

std::mutex& known_hosts_mutex() {
  static std::mutex m;
  return m;
}

// "[host]:port" as known_hosts writes a host on a non-22 port.
// A HostKeyAlias is written as it is, as OpenSSH writes it.
std::string known_hosts_name(const ResolvedTarget& t) {
  if (t.port == 22 || t.key_is_alias) return t.key_host;
  return fmt::format("[{}]:{}", t.key_host, t.port);
}

// libssh checks and records keys under the name it holds; when that is not OpenSSH's name for
// the host (ssh/config_alias.h), hvdrun reads and writes known_hosts under that name itself.
bool libssh_names_the_key(const ResolvedTarget& t) { return t.key_host == t.libssh_host; }

// What known_hosts says of the server's key under `name`: OK (recorded), CHANGED (a different
// key of its type recorded), OTHER (only keys of other types), UNKNOWN (nothing recorded).
ssh_known_hosts_e state_by_name(Session& session, const std::string& name,
                                const std::string& path) {
  ssh_key raw = nullptr;
  if (ssh_get_server_publickey(session.get(), &raw) != SSH_OK) return SSH_KNOWN_HOSTS_ERROR;
  Key server(raw);
  std::ifstream in(path);
  bool changed = false;
  bool other = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    ssh_knownhosts_entry* found = nullptr;
    if (ssh_known_hosts_parse_line(name.c_str(), line.c_str(), &found) != SSH_OK) continue;
    KnownHostsEntry entry(found);
    if (!entry || entry.get()->publickey == nullptr) continue;
    if (ssh_key_cmp(server.get(), entry.get()->publickey, SSH_KEY_CMP_PUBLIC) == 0) {
      return SSH_KNOWN_HOSTS_OK;
    }
    (ssh_key_type(server.get()) == ssh_key_type(entry.get()->publickey) ? changed : other) = true;
  }
  return changed ? SSH_KNOWN_HOSTS_CHANGED
         : other ? SSH_KNOWN_HOSTS_OTHER
                 : SSH_KNOWN_HOSTS_UNKNOWN;
}

ssh_known_hosts_e known_state(Session& session, const ResolvedTarget& target) {
  if (libssh_names_the_key(target)) return ssh_session_is_known_server(session.get());
  return state_by_name(session, known_hosts_name(target), target.known_hosts);
}

// Appends "name type base64" to the open known_hosts file, as OpenSSH writes an entry.
bool append_by_name(Session& session, const std::string& name, int fd, std::string& error) {
  ssh_key raw = nullptr;
  char* base64 = nullptr;
  if (ssh_get_server_publickey(session.get(), &raw) != SSH_OK) {
    error = "libssh has no server key";
    return false;
  }
  Key key(raw);
  if (ssh_pki_export_pubkey_base64(key.get(), &base64) != SSH_OK || base64 == nullptr) {
    error = "libssh could not encode the server key";
    return false;
  }
  const std::string line =
      fmt::format("{} {} {}\n", name, ssh_key_type_to_char(ssh_key_type(key.get())), base64);
  ssh_string_free_char(base64);
  if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    error = "cannot write it";
    return false;
  }
  return true;
}

std::string server_fingerprint(Session& session) {
  ssh_key raw = nullptr;
  if (ssh_get_server_publickey(session.get(), &raw) != SSH_OK) return "(unavailable)";
  Key key(raw);
  return fingerprint(key.get());
}

std::string server_key_type(Session& session) {
  ssh_key raw = nullptr;
  if (ssh_get_server_publickey(session.get(), &raw) != SSH_OK) return "?";
  Key key(raw);
  return ssh_key_type_to_char(ssh_key_type(key.get()));
}

// The keys known_hosts records for `name` ("ssh-ed25519 SHA256:..."), read line by line:
// libssh returns the matching entry only when the key matches, not when it changed.
std::string recorded_keys(const std::string& name, const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    ssh_knownhosts_entry* raw = nullptr;
    if (ssh_known_hosts_parse_line(name.c_str(), line.c_str(), &raw) != SSH_OK) continue;
    KnownHostsEntry entry(raw);
    if (entry && entry.get()->publickey != nullptr) {
      keys.push_back(fmt::format("{} {}",
                                 ssh_key_type_to_char(ssh_key_type(entry.get()->publickey)),
                                 fingerprint(entry.get()->publickey)));
    }
  }
  return keys.empty() ? "a key of another type" : fmt::format("{}", fmt::join(keys, ", "));
}

// Records the server's key for a first contact (accept-new), under both locks (this process's
// threads, other processes): the check is repeated under them, so two first contacts at once
// record one key, and a key another process recorded meanwhile is checked, not added beside it.
// Returns what the file says once it is done: OK (recorded or found), CHANGED/OTHER, or ERROR.
ssh_known_hosts_e record_key(Session& session, const ResolvedTarget& target, std::string& error) {
  std::lock_guard<std::mutex> lock(known_hosts_mutex());
  UniqueFd fd(::open(target.known_hosts.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (fd.valid()) ::flock(fd.get(), LOCK_EX);
  const ssh_known_hosts_e now = known_state(session, target);
  if (now != SSH_KNOWN_HOSTS_UNKNOWN && now != SSH_KNOWN_HOSTS_NOT_FOUND) return now;
  if (libssh_names_the_key(target)) {
    if (ssh_session_update_known_hosts(session.get()) != SSH_OK) {
      error = fmt::format("could not record the host key in {}: {}", target.known_hosts,
                          last_error(session));
      return SSH_KNOWN_HOSTS_ERROR;
    }
  } else if (std::string why; !append_by_name(session, known_hosts_name(target), fd.get(), why)) {
    error = fmt::format("could not record the host key in {}: {}", target.known_hosts, why);
    return SSH_KNOWN_HOSTS_ERROR;
  }
  return SSH_KNOWN_HOSTS_OK;
}

}  // namespace

HostKeyCheck check_host_key(Session& session, const ResolvedTarget& target,
                            const SshOptions& options) {
  HostKeyCheck check;
  const std::string name = known_hosts_name(target);
  ssh_known_hosts_e state = known_state(session, target);
  std::string record_error;
  if ((state == SSH_KNOWN_HOSTS_UNKNOWN || state == SSH_KNOWN_HOSTS_NOT_FOUND) &&
      options.host_key_policy != HostKeyPolicy::kStrict) {
    state = record_key(session, target, record_error);
    if (state == SSH_KNOWN_HOSTS_OK) {
      check.outcome = HostKeyOutcome::kRecorded;
      return check;
    }
    if (state == SSH_KNOWN_HOSTS_ERROR) {
      check.code = CheckCode::kHostKeyUnknown;
      check.message = record_error;
      check.hint = "check that the known_hosts file and its folder are writable";
      return check;
    }
  }
  switch (state) {
    case SSH_KNOWN_HOSTS_OK:
      check.outcome = HostKeyOutcome::kKnown;
      return check;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER: {
      const std::string recorded = recorded_keys(name, target.known_hosts);
      check.code = CheckCode::kHostKeyChanged;
      check.message = fmt::format(
          "the host key of {} has CHANGED: it now presents {} {}, but {} records {}. The "
          "key was not recorded.",
          name, server_key_type(session), server_fingerprint(session), target.known_hosts,
          recorded);
      check.hint = fmt::format(
          "a reinstalled host, a recreated container, or an attack: verify the new fingerprint "
          "out of band, then remove the old entry with: ssh-keygen -f {} -R {}",
          shell_quote(target.known_hosts), shell_quote(name));
      return check;
    }
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      if (options.host_key_policy == HostKeyPolicy::kStrict) {
        check.code = CheckCode::kHostKeyUnknown;
        check.message = fmt::format(
            "{} is not in {} (its key: {} {}); the strict host-key policy "
            "refuses unknown hosts",
            name, target.known_hosts, server_key_type(session), server_fingerprint(session));
        check.hint = fmt::format(
            "after checking the fingerprint, add it: ssh-keyscan -p {} {} >> {}  (or use "
            "--ssh-host-key-policy accept-new)",
            target.port, shell_quote(target.hostname), shell_quote(target.known_hosts));
        return check;
      }
      break;  // accept-new recorded it above, or found it meanwhile
    case SSH_KNOWN_HOSTS_ERROR:
      break;
  }
  check.code = CheckCode::kHostKeyUnknown;
  check.message = fmt::format("cannot check the host key of {} against {}: {}", name,
                              target.known_hosts, last_error(session));
  check.hint = "check that the known_hosts file is readable and well-formed";
  return check;
}

}  // namespace hvd::ssh
