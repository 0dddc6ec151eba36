#include "ssh/connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "ssh/auth.h"
#include "ssh/host_key.h"
#include "ssh/reproduce.h"

namespace hvd::ssh {
namespace {

constexpr int kMaxStartupsRetries = 3;
constexpr auto kFirstWaitPause = std::chrono::milliseconds(250);
constexpr auto kMaxWaitPause = std::chrono::milliseconds(5000);

// What --wait-for-hosts waits out: a host that is not there yet (a pod whose name is not in DNS
// yet, an sshd that does not listen yet, an address nobody answers for yet).
bool not_up_yet(const SocketOutcome& s) {
  return s.code == CheckCode::kDnsFailure || s.code == CheckCode::kConnectionRefused ||
         (s.code == CheckCode::kTimeout && s.failed_stage == Stage::kConnect);
}

std::string hint_for(CheckCode code, const ResolvedTarget& t) {
  switch (code) {
    case CheckCode::kDnsFailure:
      return "check the host name (typo?), /etc/hosts and DNS; or use the IP address";
    case CheckCode::kConnectionRefused:
      return fmt::format(
          "start sshd on port {} of {} (or give the right port: -p, or port= in a hostfile); "
          "if sshd runs in a container started with --net=host under rootless Docker, the port "
          "is not on the host's network: publish it with -p HOSTPORT:{}",
          t.port, t.hostname, t.port);
    case CheckCode::kTimeout:
      return "a firewall dropping packets, a wrong address, or the host is down: check with "
             "ping and `nc -vz HOST PORT` from this machine";
    case CheckCode::kClosedBeforeBanner:
      return "something accepted the TCP connection but no sshd answered behind it: a port "
             "forwarder (docker -p, rootlesskit, kubectl port-forward) whose sshd is not running; "
             "start sshd in the container";
    case CheckCode::kTooManyConnections:
      return "sshd's MaxStartups limit: raise it in sshd_config (e.g. MaxStartups 100:30:200), "
             "or lower --ssh-concurrency";
    case CheckCode::kNotSsh:
      return "another service listens on this port: check the port (-p, port= in a hostfile)";
    case CheckCode::kBannerTimeout:
      return "the server accepted but never spoke: a stuck sshd, or a proxy waiting for a "
             "backend; check sshd's log on the host";
    case CheckCode::kKeyExchangeFailed:
      return "client and server share no algorithm, or the server dropped the connection: "
             "compare with `ssh -vvv`";
    case CheckCode::kAuthDenied:
      return fmt::format(
          "add your public key to ~{}/.ssh/authorized_keys on the host (ssh-copy-id -p {} {}@{}); "
          "sshd ignores keys when ~/.ssh or authorized_keys is writable by others "
          "(StrictModes): chmod 700 ~/.ssh; chmod 600 ~/.ssh/authorized_keys",
          t.user, t.port, t.user, t.hostname);
    case CheckCode::kRemoteCommandFailed:
      return std::string(kRemoteCommandFailedHint);
    case CheckCode::kLoginPrintsText:
      return std::string(kLoginPrintsTextHint);
    case CheckCode::kOk:
    case CheckCode::kAgentMissing:  // check_host.cpp words these with the agent's path
    case CheckCode::kAgentNotRunnable:
    case CheckCode::kAgentVersionMismatch:
    case CheckCode::kHostKeyUnknown:  // host_key.cpp words these with the key's fingerprint
    case CheckCode::kHostKeyChanged:
    case CheckCode::kCount:
      break;
  }
  return "";
}

// Key exchange, host key and authentication, on a session whose transport is set up (our
// socket, or libssh's proxy command). Returns false with `result` finished on failure.
// `deadline`: the end of the --ssh-timeout; `start`: the start of the whole check, for its time.
bool login(Session& session, const ResolvedTarget& t, const SshOptions& options, CpuSlots& slots,
           CheckControl& control, Clock::time_point deadline, Clock::time_point start,
           HostCheck& result) {
  const long seconds = std::max<long>(
      1, std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count());
  ssh_options_set(session.get(), SSH_OPTIONS_TIMEOUT, &seconds);
  const std::string where =
      t.proxy_command ? fmt::format("{} (through ProxyCommand '{}')", t.hostname, *t.proxy_command)
                      : fmt::format("{} port {}", result.address, t.port);
  {
    // The CPU-heavy part holds a slot: key exchange and authentication.
    slots.acquire();
    struct Release {
      CpuSlots& s;
      ~Release() { s.release(); }
    } release{slots};

    StageTimer kex(result, control, Stage::kKex);
    const bool connected = ssh_connect(session.get()) == SSH_OK;
    kex.done(connected);
    if (!connected) {
      finish(result, control.cancelled() ? CheckCode::kTimeout : CheckCode::kKeyExchangeFailed,
             fmt::format("the SSH connection to {} failed at the key exchange: {}", where,
                         last_error(session)),
             t, start);
      return false;
    }

    StageTimer host_key(result, control, Stage::kHostKey);
    const HostKeyCheck check = check_host_key(session, t, options);
    host_key.done(check.code == CheckCode::kOk);
    result.host_key = check.outcome;
    if (check.code != CheckCode::kOk) {
      result.hint = check.hint;
      finish(result, check.code, check.message, t, start);
      return false;
    }

    StageTimer auth(result, control, Stage::kAuth);
    const AuthOutcome login = authenticate(session, t, options);
    auth.done(login.ok);
    if (!login.ok) {
      finish(result, CheckCode::kAuthDenied, login.message, t, start);
      return false;
    }
  }

  return true;
}

// Our own connect and banner peek: retried with jitter while sshd says MaxStartups, and with
// --wait-for-hosts while the host is not up yet. `deadline` becomes the --ssh-timeout's end for
// the attempt that is returned.
SocketOutcome open_socket(const ResolvedTarget& t, const SshOptions& options, CheckControl& control,
                          Clock::time_point start, Clock::time_point& deadline) {
  const Clock::time_point wait_end = start + options.wait_for_hosts;
  std::mt19937 rng(std::random_device{}());
  int busy = 0;   // MaxStartups answers so far
  int waits = 0;  // tries again of a host not up yet
  auto pause = kFirstWaitPause;
  while (true) {
    SocketOutcome socket = open_ssh_socket(t.hostname, t.port, deadline, control);
    if (socket.code == CheckCode::kTooManyConnections && busy++ < kMaxStartupsRetries) {
      const auto jitter = std::chrono::milliseconds(50 + rng() % 200);
      if (Clock::now() + jitter < deadline && control.pause(jitter)) continue;
    }
    const bool wait = not_up_yet(socket) && Clock::now() + pause < wait_end;
    if (!wait || !control.pause(pause)) {  // a pause ends early when the check's watchdog stops it
      if (waits > 0 && socket.code != CheckCode::kOk) {
        socket.message +=
            fmt::format(" (still, after {} tries in {:.1f} s of --wait-for-hosts)", waits + 1,
                        std::chrono::duration<double>(Clock::now() - start).count());
      }
      return socket;
    }
    ++waits;
    pause = std::min(pause * 2, kMaxWaitPause);
    deadline = Clock::now() + options.timeout;
  }
}

}  // namespace

StageTimer::StageTimer(HostCheck& result, CheckControl& control, Stage stage)
    : result_(result), stage_(stage), start_(Clock::now()) {
  control.stage = stage;
}

void StageTimer::done(bool ok) {
  result_.stages.push_back(
      {stage_, std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_), ok});
}

void finish(HostCheck& result, CheckCode code, std::string message, const ResolvedTarget& t,
            Clock::time_point start) {
  result.code = code;
  result.message = std::move(message);
  if (result.hint.empty()) result.hint = hint_for(code, t);
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

Login connect_and_login(const SshTarget& target, const SshOptions& options, CpuSlots& slots,
                        CheckControl& control, Clock::time_point start) {
  Login out;
  out.deadline = start + options.timeout;
  HostCheck& result = out.result;
  result.host = target.host;
  auto c = std::make_unique<Connection>();

  StageTimer config_stage(result, control, Stage::kConfig);
  c->session = new_session();
  c->target = apply_config(c->session, target, options);
  config_stage.done(true);
  const ResolvedTarget& t = c->target;
  result.port = t.port;
  result.user = t.user;
  result.reproduce = reproduce_command(t, options);

  // A ProxyCommand (or ProxyJump, which libssh turns into one) owns the transport: libssh
  // connects through it, and a failure can only be classified as far as libssh reports it.
  if (!t.proxy_command) {
    SocketOutcome socket = open_socket(t, options, control, start, out.deadline);
    result.address = socket.address;
    result.stages.insert(result.stages.end(), socket.stages.begin(), socket.stages.end());
    if (socket.code != CheckCode::kOk) {
      finish(result, socket.code, socket.message, t, start);
      return out;
    }
    c->socket = std::move(socket.fd);
    c->control = &control;
    const int fd = c->socket.get();  // libssh uses it but does not close it
    ssh_options_set(c->session.get(), SSH_OPTIONS_FD, &fd);
  }
  if (!login(c->session, t, options, slots, control, out.deadline, start, result)) return out;
  out.connection = std::move(c);
  return out;
}

}  // namespace hvd::ssh
