// How hvdrun talks SSH: the user's choices (flags) and one host to reach.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace hvd::ssh {

enum class HostKeyPolicy {
  kAcceptNew,  // an unknown key is recorded in known_hosts and reported
  kStrict,     // an unknown key is a failure
};             // a changed key is always a failure, under both

// How often a live line is redrawn at most (on_progress below, the launch's start-up line).
constexpr std::chrono::milliseconds kProgressEvery{250};

struct SshOptions {
  std::optional<std::string> config_file;       // --ssh-config; default ~/.ssh/config
  std::optional<std::string> known_hosts_file;  // --ssh-known-hosts; default the config's/user's
  std::optional<std::string> identity_file;     // -i: then only this key is tried
  std::optional<int> port;                      // -p: overrides the ssh config
  HostKeyPolicy host_key_policy = HostKeyPolicy::kAcceptNew;
  std::chrono::milliseconds timeout{10000};  // per host, all stages together
  // --wait-for-hosts: how long a host that is not up yet (its name does not resolve, nothing
  // listens, no answer to the connect) is tried again, with backoff; 0: it fails at once.
  std::chrono::milliseconds wait_for_hosts{0};
  int concurrency = 16;    // hosts in key exchange + authentication at once
  std::string agent_path;  // where the hvdrun agent must be on each host
  // Called by check_hosts() and the launch's logins (launcher/native/remote_start.h) from their
  // waiting thread, at the start, at most every kProgressEvery and when done: hosts finished (of
  // which failed) and total. For a live line on a terminal.
  std::function<void(std::size_t done, std::size_t failed, std::size_t total)> on_progress;
};

// One host as the host list or hostfile gave it.
struct SshTarget {
  std::string host;
  std::optional<int> port;          // hostfile port=: overrides -p and the ssh config
  std::optional<std::string> user;  // user@host or user=: overrides the ssh config
};

}  // namespace hvd::ssh
