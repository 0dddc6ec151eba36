// An authenticated SSH session to one host: the stages config -> resolve -> connect -> banner
// -> key exchange -> host key -> authentication, each timed, the first failure classified
// (docs/check-ssh.md). --check-ssh then runs its facts script on it (check_host.cpp); a launch
// starts the host agent on it: one session per host either way.
#pragma once

#include <memory>
#include <optional>
#include <semaphore>

#include "common/unique_fd.h"
#include "ssh/config.h"
#include "ssh/host_check.h"
#include "ssh/options.h"
#include "ssh/session.h"
#include "ssh/ssh_socket.h"

namespace hvd::ssh {

// Bounds how many hosts are in the CPU-heavy stages (key exchange, authentication) at once.
using CpuSlots = std::counting_semaphore<1024>;

// Member order matters: destroyed bottom-up, the watchdog forgets the socket first, then libssh
// says goodbye on it, then it is closed.
struct Connection {
  UniqueFd socket;  // our own connected socket (invalid when a ProxyCommand carries the session)
  Session session;
  ResolvedTarget target;
  CheckControl* control = nullptr;
  struct Unwatch {
    CheckControl*& control;
    ~Unwatch() {
      if (control != nullptr) control->unwatch();
    }
  } unwatch{control};

  Connection() = default;
  Connection(Connection&&) = delete;  // `unwatch` refers to a member: the object stays put
};

struct Login {
  std::unique_ptr<Connection> connection;  // null when a stage failed
  HostCheck result;                        // host, port, user, stages so far; the failure if any
  // Where the --ssh-timeout of the connection that logged in ends (its connect attempt's start
  // plus the timeout): the bound for what runs on it next (the probe).
  Clock::time_point deadline;
};

// Never throws for what the host does; throws hvd::UsageError for bad local input.
// With options.wait_for_hosts, a host that is not up yet (dns_failure, connection_refused, a
// connect timeout) is tried again with backoff (0.25 s doubling to 5 s) until that long after
// `start`; each attempt gets the whole --ssh-timeout.
Login connect_and_login(const SshTarget& target, const SshOptions& options, CpuSlots& slots,
                        CheckControl& control, Clock::time_point start);

// Times one stage into `result` and tells the watchdog where the check is.
class StageTimer {
 public:
  StageTimer(HostCheck& result, CheckControl& control, Stage stage);
  void done(bool ok);

 private:
  HostCheck& result_;
  Stage stage_;
  Clock::time_point start_;
};

// Sets code, message, the code's hint (unless one is set) and the elapsed time.
void finish(HostCheck& result, CheckCode code, std::string message, const ResolvedTarget& t,
            Clock::time_point start);

}  // namespace hvd::ssh
