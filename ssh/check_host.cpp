#include "ssh/check_host.h"

#include <fmt/format.h>

#include <sstream>

#include "common/error.h"
#include "common/shell_quote.h"
#include "ssh/config.h"
#include "ssh/connection.h"
#include "ssh/session.h"

namespace hvd::ssh {
namespace {

constexpr std::string_view kProbeMarker = "hvd-probe 1";

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
  // libssh 0.10: reliable only after all output was read (it blocks before); -1 for a signal.
  if (result.complete) result.exit_status = ssh_channel_get_exit_status(channel.get());
  return result;
}

std::string tail(const std::string& text, size_t max = 300) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t.size() > max ? "..." + t.substr(t.size() - max) : t;
}

}  // namespace

std::string host_facts_script(const std::string& agent_path) {
  const std::string agent = shell_quote(agent_path);
  return fmt::format(
      "printf '%s\\n' '{}'; hostname 2>/dev/null || uname -n; "
      "cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo -; "
      "if [ -x {} ]; then echo present; {} --version 2>/dev/null | head -n 1; "
      "else echo missing; fi",
      kProbeMarker, agent, agent);
}

std::optional<RemoteInfo> parse_host_facts(const std::string& out, const std::string& agent_path) {
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

std::string text_before_facts(const std::string& out) {
  size_t at = out.starts_with(kProbeMarker) ? 0 : out.find("\n" + std::string(kProbeMarker));
  if (at == std::string::npos) return "";
  std::string text = out.substr(0, at);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

HostCheck check_host(const SshTarget& target, const SshOptions& options, CpuSlots& slots,
                     CheckControl& control) {
  const Clock::time_point start = Clock::now();
  Login login = connect_and_login(target, options, slots, control, start);
  HostCheck& result = login.result;
  if (!login.connection) return result;
  const ResolvedTarget& t = login.connection->target;

  StageTimer probe(result, control, Stage::kProbe);
  const CommandOutput out = run_remote(
      login.connection->session, "/bin/sh -c " + shell_quote(host_facts_script(options.agent_path)),
      login.deadline);
  result.remote = parse_host_facts(out.out, options.agent_path);
  const bool ran = out.complete && out.exit_status == 0 && result.remote.has_value();
  // Text ahead of the script's own (a login script that prints) would come ahead of the agent's
  // frames in a launch, which then fails on it: the probe catches it here.
  const std::string login_text = ran ? text_before_facts(out.out) : "";
  probe.done(ran && login_text.empty());
  if (!out.complete) {
    result.remote.reset();
    result.hint =
        "the host is slow to run commands (a busy machine, or a slow ~/.bashrc: sshd runs "
        "commands through the login shell); raise --ssh-timeout";
    finish(result, CheckCode::kTimeout,
           fmt::format("logged in as '{}', but the probe command did not finish within the "
                       "timeout",
                       t.user),
           t, start);
    return result;
  }
  if (!ran) {
    std::string why = out.exit_status < 0    ? "was killed by a signal"
                      : out.exit_status != 0 ? fmt::format("exited with status {}", out.exit_status)
                                             : "printed something unexpected";
    std::string message = fmt::format("logged in as '{}', but the probe command {}", t.user, why);
    if (!out.err.empty()) message += fmt::format("; its stderr ends: {}", tail(out.err));
    result.remote.reset();
    finish(result, CheckCode::kRemoteCommandFailed, std::move(message), t, start);
    return result;
  }
  if (!login_text.empty()) {
    result.remote.reset();
    finish(result, CheckCode::kLoginPrintsText,
           fmt::format("logged in as '{}' and the probe ran, but the login printed text on "
                       "stdout ahead of it: \"{}\"",
                       t.user, sanitize_bytes(login_text)),
           t, start);
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
  finish(result, CheckCode::kOk, message, t, start);
  return result;
}

}  // namespace hvd::ssh
