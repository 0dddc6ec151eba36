// NativeJob's endings that need explaining (native_job.h): an agent that went away, at start-up
// or while the job ran, and a start-up that did not finish in time. Each names the host and the
// phase, with what the user can do.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/error.h"
#include "launcher/native/native_job.h"
#include "ssh/host_check.h"

namespace hvd::launcher::native {

void NativeJob::agent_lost(AgentConn& agent) {
  const std::string& host = host_of(agent);
  if (agent.retired) return;  // told to end: its host left the job
  if (agent.joining && !agent.spec_sent) {
    joiner_lost(agent, agent.hello ? "its agent ended before it was given work"
                                   : "no hvdrun agent answered there");
    return;
  }
  std::string said;
  for (const std::string& line : agent.log_tail) said += (said.empty() ? "" : " / ") + line;
  // A transport that knows better (--rsh-agent's command) says why, with its command line.
  if (!agent.hello) {
    if (auto failure = agent.transport->failed_before_hello(said)) {
      if (failure->kind == ErrorKind::kHostLost && !sup_.stopping()) {
        sup_.result().lost_hosts.push_back(host);
      }
      sup_.fail(std::move(*failure));
      return;
    }
  }
  // The login worked, but something else ran instead of the agent and failed (a forced
  // command= in authorized_keys): the same code and words as --check-ssh's probe gets. 126 and
  // 127 are the shell's "cannot run" and "not found": a missing agent, below.
  const std::optional<int> status = agent.transport->exit_status();
  // Killed by a signal before its hello: the agent started and something on the host ended it
  // (or its SSH session); a command that runs instead of it exits with a status. The chaos
  // suite's kill -9 of an agent at start-up got "remote_command_failed" and its advice on
  // authorized_keys, which sends the user the wrong way.
  if (!agent.hello && status && *status < 0) {
    if (!sup_.stopping()) sup_.result().lost_hosts.push_back(host);
    sup_.fail({ErrorKind::kHostLost,
               fmt::format("lost the agent on {} before it answered: it (or its SSH session) was "
                           "killed by a signal{}",
                           host, said.empty() ? "" : fmt::format("; its stderr ends: {}", said)),
               "something on that host ended it: the OOM killer (see dmesg there), an "
               "administrator or a watchdog; run the job again, and `hvdrun --check-ssh` if it "
               "keeps happening"});
    return;
  }
  if (!agent.hello && status && *status != 0 && *status != 126 && *status != 127) {
    sup_.fail(
        {ErrorKind::kSsh,
         fmt::format("{}: remote_command_failed: logged in, but the agent command exited "
                     "with status {}{}",
                     host, *status, said.empty() ? "" : fmt::format("; its stderr ends: {}", said)),
         fmt::format("{}; `hvdrun --check-ssh` shows the same", ssh::kRemoteCommandFailedHint)});
    return;
  }
  // No exit status at all: the SSH session itself ended (killed, or its connection dropped)
  // before the agent answered. A missing agent is the shell's 127 (or 126), below. The chaos
  // suite's kill -9 of the sshd session at start-up got "no hvdrun agent answered" and advice to
  // install hvdrun.
  if (!agent.hello && !status && agent.transport->remote()) {
    if (!sup_.stopping()) sup_.result().lost_hosts.push_back(host);
    sup_.fail({ErrorKind::kHostLost,
               fmt::format("lost the agent on {} before it answered: its SSH session ended "
                           "without an exit status{}{}",
                           host, agent.transport->lost_detail(),
                           said.empty() ? "" : fmt::format("; its stderr ends: {}", said)),
               "the session was killed on that host, or the connection dropped; run the job "
               "again, and `hvdrun --check-ssh` if it keeps happening"});
    return;
  }
  if (!agent.hello) {
    sup_.fail(
        {ErrorKind::kRemote,
         fmt::format("no hvdrun agent answered on {} (tried: {} --agent){}", host,
                     agent.transport->remote() ? options_.ssh.agent_path : options_.hvdrun_path,
                     said.empty() ? "" : fmt::format("; the host said: {}", said)),
         "install the same hvdrun at that path on every host, or give its path with "
         "--agent-path; `hvdrun --check-ssh` shows which hosts have it"});
    return;
  }
  if (!sup_.stopping()) sup_.result().lost_hosts.push_back(host);
  const std::string what =
      fmt::format("lost the agent on {} while the job ran{}", host, agent.transport->lost_detail());
  if (elastic_running()) {  // its ranks are gone; the others may go on without them
    apply(elastic_->on_host_lost(host, what, Clock::now()));
    return;
  }
  sup_.fail({ErrorKind::kHostLost, what,
             "the host may have rebooted or dropped the connection; the agent stops its ranks "
             "when its link goes away"});
}

// Names the phase that did not finish and the hosts that are late: start-up timeouts that name
// no host and no phase are what users hate.
void NativeJob::on_start_timeout() {
  std::vector<std::string> no_hello, not_probed, not_started;
  for (const AgentConn& a : agents_) {
    if (!a.hello) {
      no_hello.push_back(host_of(a));
    } else if (!a.probed) {
      not_probed.push_back(host_of(a));
    } else if (std::any_of(sup_.result().ranks.begin(), sup_.result().ranks.end(),
                           [&](const RankOutcome& r) {
                             return r.host_index == a.host_index && !r.started;
                           })) {
      not_started.push_back(host_of(a));
    }
  }
  const double seconds = std::chrono::duration<double>(options_.start_timeout).count();
  const char* phase = "ranks started";
  const std::vector<std::string>* late = &not_started;
  const char* hint =
      "the ranks did not start in time: a slow file system or an overloaded host; raise "
      "--start-timeout";
  if (!no_hello.empty()) {
    phase = "agent handshake";
    late = &no_hello;
    hint =
        "the agent did not answer: a slow login (~/.bashrc), or a host that stalls; raise "
        "--start-timeout or check the host with --check-ssh";
  } else if (!not_probed.empty()) {
    phase = "network check";
    late = &not_probed;
    hint = "those agents did not report their probes: an overloaded host; raise --start-timeout";
  }
  // Agents a command of the user's starts (--rsh-agent): the command that hangs, to run by hand.
  std::string commands;
  if (!no_hello.empty()) {
    for (const AgentConn& a : agents_) {
      if (a.hello || a.transport->command_line().empty()) continue;
      commands += fmt::format("; the command for {}: {}", host_of(a), a.transport->command_line());
      hint =
          "the --rsh-agent command did not start hvdrun's agent in time: run it by hand (it "
          "should print nothing and wait for its job on stdin), or raise --start-timeout";
    }
  }
  sup_.fail({ErrorKind::kTimeout,
             fmt::format("start-up timed out after {:.0f} s in the {} phase; late: {}{}", seconds,
                         phase, fmt::join(*late, ", "), commands),
             hint});
}

}  // namespace hvd::launcher::native
