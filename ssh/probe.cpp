#include "ssh/probe.h"

#include <fmt/format.h>

#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/shell_quote.h"
#include "ssh/auth.h"
#include "ssh/config.h"
#include "ssh/host_key.h"
#include "ssh/reproduce.h"
#include "ssh/session.h"

namespace hvd::ssh {
namespace {

constexpr std::string_view kProbeMarker = "hvd-probe 1";
constexpr int kMaxStartupsRetries = 3;

std::chrono::microseconds since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t);
}

std::string hint_for(ProbeCode code, const ResolvedTarget& t) {
  switch (code) {
    case ProbeCode::kDnsFailure:
      return "check the host name (typo?), /etc/hosts and DNS; or use the IP address";
    case ProbeCode::kConnectionRefused:
      return fmt::format(
          "start sshd on port {} of {} (or give the right port: -p, or port= in a hostfile); "
          "if sshd runs in a container started with --net=host under rootless Docker, the port "
          "is not on the host's network: publish it with -p HOSTPORT:{}",
          t.port, t.hostname, t.port);
    case ProbeCode::kTimeout:
      return "a firewall dropping packets, a wrong address, or the host is down: check with "
             "ping and `nc -vz HOST PORT` from this machine";
    case ProbeCode::kClosedBeforeBanner:
      return "something accepted the TCP connection but no sshd answered behind it: a port "
             "forwarder (docker -p, rootlesskit, kubectl port-forward) whose sshd is not running; "
             "start sshd in the container";
    case ProbeCode::kTooManyConnections:
      return "sshd's MaxStartups limit: raise it in sshd_config (e.g. MaxStartups 100:30:200), "
             "or lower --ssh-concurrency";
    case ProbeCode::kNotSsh:
      return "another service listens on this port: check the port (-p, port= in a hostfile)";
    case ProbeCode::kBannerTimeout:
      return "the server accepted but never spoke: a stuck sshd, or a proxy waiting for a "
             "backend; check sshd's log on the host";
    case ProbeCode::kKeyExchangeFailed:
      return "client and server share no algorithm, or the server dropped the connection: "
             "compare with `ssh -vvv`";
    case ProbeCode::kAuthDenied:
      return fmt::format(
          "add your public key to ~{}/.ssh/authorized_keys on the host (ssh-copy-id -p {} {}@{}); "
          "sshd ignores keys when ~/.ssh or authorized_keys is writable by others "
          "(StrictModes): chmod 700 ~/.ssh; chmod 600 ~/.ssh/authorized_keys",
          t.user, t.port, t.user, t.hostname);
    case ProbeCode::kRemoteCommandFailed:
      return "login works, but commands fail: a forced command= in authorized_keys, or a "
             "login shell or ~/.bashrc that exits or prints errors";
    default:
      return "";
  }
}

// Times one stage into `result` and tells the watchdog where we are.
class StageTimer {
 public:
  StageTimer(ProbeResult& result, ProbeControl& control, Stage stage)
      : result_(result), stage_(stage), start_(Clock::now()) {
    control.stage = stage;
  }
  void done(bool ok) { result_.stages.push_back({stage_, since(start_), ok}); }

 private:
  ProbeResult& result_;
  Stage stage_;
  Clock::time_point start_;
};

struct CommandOutput {
  int exit_status = -1;
  std::string out;
  std::string err;
  bool complete = false;
};

CommandOutput run_remote(Session& session, const std::string& command, Clock::time_point deadline) {
  CommandOutput result;
  Channel channel(ssh_channel_new(session.get()));
  if (!channel || ssh_channel_open_session(channel.get()) != SSH_OK ||
      ssh_channel_request_exec(channel.get(), command.c_str()) != SSH_OK) {
    result.err = last_error(session);
    return result;
  }
  char buf[4096];
  while (!ssh_channel_is_eof(channel.get()) && Clock::now() < deadline) {
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    const int n = ssh_channel_read_timeout(channel.get(), buf, sizeof buf, 0, std::max(left, 1));
    if (n > 0) result.out.append(buf, static_cast<size_t>(n));
    if (n < 0) break;
    int e = 0;
    while ((e = ssh_channel_read_nonblocking(channel.get(), buf, sizeof buf, 1)) > 0) {
      result.err.append(buf, static_cast<size_t>(e));
    }
  }
  int e = 0;
  while ((e = ssh_channel_read_nonblocking(channel.get(), buf, sizeof buf, 1)) > 0) {
    result.err.append(buf, static_cast<size_t>(e));
  }
  result.complete = ssh_channel_is_eof(channel.get()) != 0;
  // Reliable only after all output was read (BRIEF.md section 7); -1 for a signal.
  if (result.complete) result.exit_status = ssh_channel_get_exit_status(channel.get());
  return result;
}

std::string tail(const std::string& text, size_t max = 300) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t.size() > max ? "..." + t.substr(t.size() - max) : t;
}

void finish(ProbeResult& result, ProbeCode code, std::string message, const ResolvedTarget& t,
            Clock::time_point start) {
  result.code = code;
  result.message = std::move(message);
  if (result.hint.empty()) result.hint = hint_for(code, t);
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

// Key exchange, host key, authentication and the probe script, on a session whose transport
// is set up (our socket, or libssh's proxy command).
ProbeResult login_and_probe(Session& session, const ResolvedTarget& t, const SshOptions& options,
                            CpuSlots& slots, ProbeControl& control, Clock::time_point start,
                            ProbeResult result) {
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
      finish(result, control.cancelled() ? ProbeCode::kTimeout : ProbeCode::kKeyExchangeFailed,
             fmt::format("the SSH connection to {} failed at the key exchange: {}", where,
                         last_error(session)),
             t, start);
      return result;
    }

    StageTimer host_key(result, control, Stage::kHostKey);
    const HostKeyCheck check = check_host_key(session, t, options);
    host_key.done(check.code == ProbeCode::kOk);
    result.host_key = check.outcome;
    if (check.code != ProbeCode::kOk) {
      result.hint = check.hint;
      finish(result, check.code, check.message, t, start);
      return result;
    }

    StageTimer auth(result, control, Stage::kAuth);
    const AuthOutcome login = authenticate(session, t, options);
    auth.done(login.ok);
    if (!login.ok) {
      finish(result, ProbeCode::kAuthDenied, login.message, t, start);
      return result;
    }
  }

  StageTimer probe(result, control, Stage::kProbe);
  const CommandOutput out =
      run_remote(session, "/bin/sh -c " + shell_quote(probe_script(options.agent_path)), deadline);
  result.remote = parse_probe_output(out.out, options.agent_path);
  const bool ok = out.complete && out.exit_status == 0 && result.remote.has_value();
  probe.done(ok);
  if (!out.complete) {
    result.remote.reset();
    result.hint =
        "the host is slow to run commands (a busy machine, or a slow ~/.bashrc: sshd runs "
        "commands through the login shell); raise --ssh-timeout";
    finish(result, ProbeCode::kTimeout,
           fmt::format("logged in as '{}', but the probe command did not finish within the "
                       "timeout",
                       t.user),
           t, start);
    return result;
  }
  if (!ok) {
    std::string why = out.exit_status < 0    ? "was killed by a signal"
                      : out.exit_status != 0 ? fmt::format("exited with status {}", out.exit_status)
                                             : "printed something unexpected";
    std::string message = fmt::format("logged in as '{}', but the probe command {}", t.user, why);
    if (!out.err.empty()) message += fmt::format("; its stderr ends: {}", tail(out.err));
    result.remote.reset();
    finish(result, ProbeCode::kRemoteCommandFailed, std::move(message), t, start);
    return result;
  }
  std::string message = "ok";
  if (result.host_key == HostKeyOutcome::kRecorded) {
    message += fmt::format("; new host key recorded in {}", t.known_hosts);
  }
  if (!result.remote->agent_present) {
    // A report, not a failure of the check: a launch on this host will fail on it.
    message += fmt::format("; no hvdrun agent at {}", options.agent_path);
  }
  finish(result, ProbeCode::kOk, message, t, start);
  return result;
}

ProbeResult probe_via_proxy(Session& session, const ResolvedTarget& t, const SshOptions& options,
                            CpuSlots& slots, ProbeControl& control, Clock::time_point start) {
  ProbeResult result;
  result.host = t.host;
  result.port = t.port;
  result.user = t.user;
  result.reproduce = reproduce_command(t, options);
  return login_and_probe(session, t, options, slots, control, start, std::move(result));
}

}  // namespace

std::string probe_script(const std::string& agent_path) {
  const std::string agent = shell_quote(agent_path);
  return fmt::format(
      "printf '%s\\n' '{}'; hostname 2>/dev/null || uname -n; "
      "cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo -; "
      "if [ -x {} ]; then echo present; {} --version 2>/dev/null | head -n 1; "
      "else echo missing; fi",
      kProbeMarker, agent, agent);
}

std::optional<RemoteInfo> parse_probe_output(const std::string& out,
                                             const std::string& agent_path) {
  std::istringstream in(out);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // Anything a login script printed comes before our marker.
  size_t i = 0;
  while (i < lines.size() && lines[i] != kProbeMarker) ++i;
  if (lines.size() < i + 4) return std::nullopt;
  RemoteInfo info;
  info.hostname = lines[i + 1];
  info.boot_id = lines[i + 2];
  info.agent_path = agent_path;
  info.agent_present = lines[i + 3] == "present";
  if (info.agent_present && lines.size() > i + 4) {
    const std::string& version = lines[i + 4];
    const auto space = version.rfind(' ');
    info.agent_version = space == std::string::npos ? version : version.substr(space + 1);
  }
  return info;
}

ProbeResult probe_host(const SshTarget& target, const SshOptions& options, CpuSlots& slots,
                       ProbeControl& control) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options.timeout;
  ProbeResult result;
  result.host = target.host;

  // Declared before the session so it is closed after it: libssh writes its goodbye on it.
  UniqueFd connection;
  StageTimer config_stage(result, control, Stage::kConfig);
  Session session = new_session();
  const ResolvedTarget t = apply_config(session, target, options);
  config_stage.done(true);
  result.port = t.port;
  result.user = t.user;
  result.reproduce = reproduce_command(t, options);

  // A ProxyCommand (or ProxyJump, which libssh turns into one) owns the transport: libssh
  // connects through it, and a failure can only be classified as far as libssh reports it.
  if (t.proxy_command) return probe_via_proxy(session, t, options, slots, control, start);

  // Our own connect and banner peek, retried with jitter while sshd says MaxStartups.
  SocketOutcome socket;
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0;; ++attempt) {
    socket = open_ssh_socket(t.hostname, t.port, deadline, control);
    if (socket.code != ProbeCode::kTooManyConnections || attempt == kMaxStartupsRetries) break;
    const auto pause = std::chrono::milliseconds(50 + rng() % 200);
    if (Clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);
  }
  result.address = socket.address;
  result.stages.insert(result.stages.end(), socket.stages.begin(), socket.stages.end());
  if (socket.code != ProbeCode::kOk) {
    finish(result, socket.code, socket.message, t, start);
    return result;
  }
  connection = std::move(socket.fd);
  struct Unwatch {  // runs before `connection` closes: the watchdog must never see a stale fd
    ProbeControl& c;
    ~Unwatch() { c.unwatch(); }
  } unwatch{control};
  const int fd = connection.get();  // libssh uses it but does not close it
  ssh_options_set(session.get(), SSH_OPTIONS_FD, &fd);
  return login_and_probe(session, t, options, slots, control, start, std::move(result));
}

}  // namespace hvd::ssh
