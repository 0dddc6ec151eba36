// Move-only RAII owners of libssh handles. A Session is used by one thread at a time and never
// shared (libssh sessions are not thread-safe); teardown order: channel, then session.
#pragma once

#include <libssh/libssh.h>

#include <string>
#include <utility>

namespace hvd::ssh {

// ssh_init() exactly once per process (libssh 0.10 needs it before threads use it).
void ensure_libssh_initialized();

template <typename Handle, void (*Free)(Handle)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(Handle h) : handle_(h) {}
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  Handle get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }
  void reset() noexcept {
    if (handle_ != nullptr) Free(handle_);
    handle_ = nullptr;
  }

 private:
  Handle handle_ = nullptr;
};

void free_session(ssh_session s);  // disconnects, then frees
void free_channel(ssh_channel c);  // closes, then frees
void free_key(ssh_key k);
void free_known_hosts_entry(ssh_knownhosts_entry* e);

using Session = Owned<ssh_session, free_session>;
using Channel = Owned<ssh_channel, free_channel>;
using Key = Owned<ssh_key, free_key>;
using KnownHostsEntry = Owned<ssh_knownhosts_entry*, free_known_hosts_entry>;

// A new session with no configuration applied yet. Throws hvd::Error if libssh cannot make one.
Session new_session();

// libssh's last error for the session, never null.
std::string last_error(const Session& session);

// "SHA256:..." of a key, or "" when it cannot be computed.
std::string fingerprint(ssh_key key);

}  // namespace hvd::ssh
