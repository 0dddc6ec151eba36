#include "ssh/session.h"

#include <libssh/callbacks.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "common/error.h"

namespace hvd::ssh {

namespace {

// The OpenSSH option libssh's config parser says it ignores ("Unsupported option: NAME, line:
// N", "Unapplicable option: ..."), or empty.
std::string_view ignored_option(std::string_view line) {
  for (std::string_view prefix : {"Unsupported option: ", "Unapplicable option: "}) {
    if (const auto at = line.find(prefix); at != std::string_view::npos) {
      const std::string_view rest = line.substr(at + prefix.size());
      return rest.substr(0, rest.find(','));
    }
  }
  return {};
}

// libssh says so for every OpenSSH option it does not use (BatchMode, IdentitiesOnly, ...), for
// every host and session. That is no fault: say it once per option, calmly, and point at the
// list of what is honoured.
void log_libssh(const char* function, const char* text) {
  const std::string_view option = ignored_option(text);
  if (option.empty()) {
    spdlog::debug("libssh: {}: {}", function, text);
    return;
  }
  static std::mutex mutex;
  static std::set<std::string, std::less<>> seen;
  const std::string name(option);
  {
    const std::lock_guard lock(mutex);
    if (!seen.insert(name).second) return;
  }
  spdlog::debug(
      "ssh config: '{}' has no effect on hvdrun's SSH client (libssh); docs/check-ssh.md lists "
      "the options it honours",
      name);
}

}  // namespace

void ensure_libssh_initialized() {
  static std::once_flag once;
  std::call_once(once, [] { ssh_init(); });
  // libssh logs to stderr by default; its messages are debug detail for us, never user output.
  // Its log callback and level are thread-local, so each thread sets them once.
  thread_local bool logging_set = false;
  if (!logging_set) {
    ssh_set_log_callback(
        [](int, const char* function, const char* text, void*) { log_libssh(function, text); });
    ssh_set_log_level(spdlog::should_log(spdlog::level::debug) ? SSH_LOG_INFO : SSH_LOG_NOLOG);
    logging_set = true;
  }
}

void free_session(ssh_session s) {
  ssh_disconnect(s);
  ssh_free(s);
}

void free_channel(ssh_channel c) {
  ssh_channel_close(c);
  ssh_channel_free(c);
}

void free_key(ssh_key k) { ssh_key_free(k); }

void free_known_hosts_entry(ssh_knownhosts_entry* e) { ssh_knownhosts_entry_free(e); }

Session new_session() {
  ensure_libssh_initialized();
  ssh_session s = ssh_new();
  if (s == nullptr) throw Error("libssh could not create a session (out of memory?)");
  return Session(s);
}

std::string last_error(const Session& session) {
  const char* text = ssh_get_error(session.get());
  return text != nullptr && *text != '\0' ? text : "no detail from libssh";
}

std::string fingerprint(ssh_key key) {
  unsigned char* hash = nullptr;
  size_t len = 0;
  if (key == nullptr || ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) != 0) {
    return "";
  }
  char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
  ssh_clean_pubkey_hash(&hash);
  std::string out = text != nullptr ? text : "";
  ssh_string_free_char(text);
  return out;
}

}  // namespace hvd::ssh
