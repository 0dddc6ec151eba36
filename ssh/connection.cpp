#include "ssh/connection.h"

#include <fmt/format.h>

#include <random>
#include <thread>

#include "ssh/auth.h"
#include "ssh/host_key.h"
#include "ssh/reproduce.h"

namespace hvd::ssh {
namespace {

constexpr int kMaxStartupsRetries = 3;

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
    case CheckCode::kOk:
    case CheckCode::kHostKeyUnknown:  // host_key.cpp words these with the key's fingerprint
    case CheckCode::kHostKeyChanged:
    case CheckCode::kCount:
      break;
  }
  return "";
}

// Key exchange, host key and authentication, on a session whose transport is set up (our
// socket, or libssh's proxy command). Returns false with `result` finished on failure.
bool login(Session& session, const ResolvedTarget& t, const SshOptions& options, CpuSlots& slots,
           CheckControl& control, Clock::time_point start, HostCheck& result) {
  const Clock::time_point deadline = start + options.timeout;
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
  const Clock::time_point deadline = start + options.timeout;
  Login out;
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
    // Our own connect and banner peek, retried with jitter while sshd says MaxStartups.
    SocketOutcome socket;
    std::mt19937 rng(std::random_device{}());
    for (int attempt = 0;; ++attempt) {
      socket = open_ssh_socket(t.hostname, t.port, deadline, control);
      if (socket.code != CheckCode::kTooManyConnections || attempt == kMaxStartupsRetries) break;
      const auto pause = std::chrono::milliseconds(50 + rng() % 200);
      if (Clock::now() + pause >= deadline) break;
      std::this_thread::sleep_for(pause);
    }
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
  if (!login(c->session, t, options, slots, control, start, result)) return out;
  out.connection = std::move(c);
  return out;
}

}  // namespace hvd::ssh
