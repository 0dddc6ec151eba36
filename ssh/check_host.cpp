#include "ssh/check_host.h"

#include <fmt/format.h>

#include <sstream>

#include "common/error.h"
#include "common/shell_quote.h"
#include "hvd/build_config.h"
#include "ssh/config.h"
#include "ssh/connection.h"
#include "ssh/libssh_compat.h"
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
  // Reliable only after all output was read (it blocks before); -1 for a signal.
  if (result.complete) result.exit_status = channel_exit_status(channel.get());
  return result;
}

// The agent a launch would start on this host (--agent-path): there, runnable, this version.
// Code, message and hint when it is not; nullopt when it is.
struct AgentProblem {
  CheckCode code;
  std::string message;
  std::string hint;
};

std::optional<AgentProblem> agent_problem(const RemoteInfo& remote, const std::string& user) {
  const std::string& path = remote.agent_path;
  if (!remote.agent_present) {
    return AgentProblem{
        CheckCode::kAgentMissing,
        fmt::format("logged in as '{}', but there is no hvdrun agent at {} (no executable file "
                    "there); a launch would exit 127 on this host",
                    user, path),
        fmt::format("install hvdrun {} at {} on this host (the same build on every host), or "
                    "give the path it has there with --agent-path",
                    HVD_VERSION_STRING, path)};
  }
  if (remote.agent_version.empty()) {
    return AgentProblem{
        CheckCode::kAgentNotRunnable,
        fmt::format("logged in as '{}'; {} is there but `{} --version` printed nothing: it does "
                    "not run on this host",
                    user, path, path),
        fmt::format("run `{} --version` on the host to see why (another architecture, a missing "
                    "shared library, a file that is not hvdrun); install hvdrun {} there",
                    path, HVD_VERSION_STRING)};
  }
  if (remote.agent_version != HVD_VERSION_STRING) {
    return AgentProblem{
        CheckCode::kAgentVersionMismatch,
        fmt::format("logged in as '{}'; the hvdrun agent at {} is version {}, this hvdrun is {}: "
                    "a launch would refuse it",
                    user, path, remote.agent_version, HVD_VERSION_STRING),
        fmt::format("install hvdrun {} at {} on this host (the same version on every host), or "
                    "point --agent-path at one",
                    HVD_VERSION_STRING, path)};
  }
  return std::nullopt;
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
  const std::optional<AgentProblem> agent =
      ran && login_text.empty() ? agent_problem(*result.remote, t.user) : std::nullopt;
  probe.done(ran && login_text.empty() && !agent);
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
  if (agent) {  // a check that passes means a launch can start its agent there
    result.hint = agent->hint;
    // The ssh line that shows it: the agent's --version instead of `true`.
    constexpr std::string_view kTrue = " true";
    if (result.reproduce.ends_with(kTrue)) {
      result.reproduce.resize(result.reproduce.size() - kTrue.size());
      result.reproduce += " " + shell_quote(shell_quote(options.agent_path) + " --version");
    }
    finish(result, agent->code, agent->message, t, start);
    return result;
  }
  std::string message = "ok";
  if (result.host_key == HostKeyOutcome::kRecorded) {
    message += fmt::format("; new host key recorded in {}", t.known_hosts);
  }
  finish(result, CheckCode::kOk, message, t, start);
  return result;
}

}  // namespace hvd::ssh
