// The stages before SSH proper, on our own socket: resolve, non-blocking TCP connect, and a
// peek at the server's first bytes. They tell apart what libssh would report as one error:
// refused, timeout, closed before the banner (a port forwarder with nothing behind it), a
// non-SSH service, a silent server, and sshd's "Exceeded MaxStartups".
//
// The peek does not consume the banner: the connected socket goes to libssh (SSH_OPTIONS_FD).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "ssh/host_check.h"

namespace hvd::ssh {

using Clock = std::chrono::steady_clock;

// Lets another thread cut a host's check short: the watchdog shuts the socket down, which makes
// every blocking read on it (ours or libssh's) return at once. The check unwatches its socket
// before closing it, so a cancel can never hit a descriptor number that was reused meanwhile.
class CheckControl {
 public:
  void watch(int fd);
  void unwatch() { watch(-1); }
  void cancel();
  bool cancelled() const { return cancelled_; }
  // Sleeps for `pause`, or until cancel(); returns false when cancelled.
  bool pause(std::chrono::milliseconds pause);

  std::atomic<Stage> stage{Stage::kConfig};  // where the check is, for the watchdog

 private:
  std::mutex mutex_;
  std::condition_variable cancelled_cv_;
  int fd_ = -1;
  std::atomic<bool> cancelled_{false};
};

struct SocketOutcome {
  CheckCode code = CheckCode::kOk;  // kOk: `fd` is connected and an SSH banner is waiting
  Stage failed_stage = Stage::kResolve;
  std::string message;
  std::string address;  // numeric address connected (or last tried)
  UniqueFd fd;
  std::vector<StageTime> stages;
};

SocketOutcome open_ssh_socket(const std::string& host, int port, Clock::time_point deadline,
                              CheckControl& control);

// Up to 64 bytes of `data` as printable ASCII: other bytes as \xNN, CR and LF as \r and \n.
std::string sanitize_bytes(std::string_view data);

}  // namespace hvd::ssh
