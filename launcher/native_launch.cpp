#include "launcher/native_launch.h"

#include "launcher/native_launch_impl.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "hvd/build_config.h"
#include "launcher/agent_conn.h"
#include "launcher/job_specs.h"
#include "launcher/local_agent.h"
#include "launcher/net_check.h"
#include "launcher/output_router.h"
#include "launcher/remote_start.h"
#include "launcher/rendezvous_server.h"
#include "contract/env_table.h"
#include "worker/job_spec.h"
#include "worker/probe.h"
#include "worker/protocol.h"

namespace hvd::launcher {
namespace native {

void Launch::stop_all(FrameType how) {
  if (how == FrameType::kTerminate && stopping_) return;
  stopping_ = true;
  killing_ |= how == FrameType::kKill;
  for (AgentConn& a : agents_) {
    if (a.eof) continue;
    if (a.spec_sent) {
      worker::write_all(a.write_fd(), worker::encode_frame(how, ""));
    } else {
      a.close_input();  // no job yet: EOF tells the agent there will be none
    }
  }
}

void Launch::fail(std::string message, std::string hint, ExitCode code) {
  if (result_.interrupted_by != 0) {
    // After an interrupt, an agent that gives up is a consequence, not the cause.
    spdlog::debug("after the interrupt: {}", message);
    stop_all(FrameType::kTerminate);
    return;
  }
  if (result_.error.empty()) {
    result_.error = std::move(message);
    result_.error_hint = std::move(hint);
    error_code_ = code;
  }
  stop_all(FrameType::kTerminate);
}

void Launch::on_exited(const worker::RankExited& exited) {
  if (exited.rank >= result_.ranks.size()) return;
  RankOutcome& r = result_.ranks[exited.rank];
  router_.flush(static_cast<int>(exited.rank));
  r.exited = true;
  r.signaled = exited.signaled;
  r.value = static_cast<int>(exited.value);
  r.last_stderr = router_.last_stderr(static_cast<int>(exited.rank));
  if (stopping_) {
    r.stopped_by_hvdrun = true;
  } else if (r.failed()) {
    result_.first_failure = static_cast<int>(exited.rank);
    stop_all(FrameType::kTerminate);
  }
}

void Launch::on_frame(AgentConn& agent, const worker::Frame& frame) {
  switch (frame.type) {
    case FrameType::kHello:
      on_hello(agent, frame.payload);
      break;
    case FrameType::kListening:
      on_listening(agent, frame.payload);
      break;
    case FrameType::kProbeResult:
      on_probe_results(agent, frame.payload);
      break;
    case FrameType::kProbeClosed:
      send_specs();
      break;
    case FrameType::kStarted: {
      const auto started = worker::decode_started(frame.payload);
      if (started.rank < result_.ranks.size()) {
        result_.ranks[started.rank].started = true;
        result_.ranks[started.rank].pid = started.pid;
      }
      if (++started_ == static_cast<int>(result_.ranks.size())) {
        result_.start_time =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
      }
      break;
    }
    case FrameType::kOutput: {
      const auto chunk = worker::decode_output(frame.payload);
      router_.write(static_cast<int>(chunk.rank), chunk.stream, chunk.bytes);
      break;
    }
    case FrameType::kExited:
      on_exited(worker::decode_exited(frame.payload));
      break;
    case FrameType::kError: {
      const auto error = nlohmann::json::parse(frame.payload, nullptr, false);
      // The agent gives up only when it cannot start the job (a bad spec, a missing program
      // or directory) or cannot take part in the network check (no free port in the range).
      std::string message =
          error.is_discarded() ? frame.payload : error.value("message", frame.payload);
      if (!agent.spec_sent) {  // the spec's errors name the host already
        message = fmt::format("host {}: {}", plan_.hosts[agent.host_index].spec.host, message);
      }
      fail(message, error.is_discarded() ? "" : error.value("hint", ""), ExitCode::kCannotStart);
      break;
    }
    case FrameType::kDone:
      agent.done = true;
      break;
    default:
      fail(fmt::format("protocol error: the agent on {} sent a frame of type {}",
                       plan_.hosts[agent.host_index].spec.host, static_cast<int>(frame.type)),
           "");
  }
}

void Launch::on_agent_log(AgentConn& agent) {
  std::array<char, 4096> buf{};
  const long n = worker::read_some(agent.log().get(), buf.data(), buf.size());
  if (n <= 0) {
    agent.log().reset();
    return;
  }
  agent.log_partial.append(buf.data(), static_cast<size_t>(n));
  size_t newline = 0;
  while ((newline = agent.log_partial.find('\n')) != std::string::npos) {
    const std::string line = agent.log_partial.substr(0, newline);
    spdlog::warn("agent on {}: {}", plan_.hosts[agent.host_index].spec.host, line);
    agent.log_tail.push_back(line);
    if (agent.log_tail.size() > 5) agent.log_tail.pop_front();
    agent.log_partial.erase(0, newline + 1);
  }
}

void Launch::agent_lost(AgentConn& agent) {
  const std::string& host = plan_.hosts[agent.host_index].spec.host;
  std::string said;
  for (const std::string& line : agent.log_tail) said += (said.empty() ? "" : " / ") + line;
  if (!agent.hello) {
    fail(fmt::format("no hvdrun agent answered on {} (tried: {} --agent){}", host,
                     options_.ssh.agent_path,
                     said.empty() ? "" : fmt::format("; the host said: {}", said)),
         "install the same hvdrun at that path on every host, or give its path with "
         "--agent-path; `hvdrun --check-ssh` shows which hosts have it",
         ExitCode::kCannotStart);
    return;
  }
  fail(fmt::format("lost the agent on {} while the job ran{}", host,
                   agent.is_remote() ? " (the SSH connection closed)" : ""),
       "the host may have rebooted or dropped the connection; the agent stops its ranks when "
       "its link goes away",
       exit_code_of(ErrorKind::kHostLost));
}

// Names the phase that did not finish and the hosts that are late (BRIEF section 2: start-up
// timeouts that name no host and no phase are what users hate).
void Launch::start_timed_out() {
  std::vector<std::string> no_hello, not_probed, not_started;
  for (const AgentConn& a : agents_) {
    const std::string& host = plan_.hosts[a.host_index].spec.host;
    if (!a.hello) {
      no_hello.push_back(host);
      continue;
    }
    if (!a.probed) {
      not_probed.push_back(host);
      continue;
    }
    for (const RankOutcome& r : result_.ranks) {
      if (r.host_index == a.host_index && !r.started) {
        not_started.push_back(host);
        break;
      }
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
  fail(fmt::format("start-up timed out after {:.0f} s in the {} phase; late: {}", seconds, phase,
                   fmt::join(*late, ", ")),
       hint, ExitCode::kStartupTimeout);
}

int Launch::poll_timeout_ms() const {
  if (stopping_ || started_ == static_cast<int>(result_.ranks.size())) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      start_ + options_.start_timeout - Clock::now());
  return static_cast<int>(std::max<long>(0, left.count()));
}

void Launch::on_signal() {
  signalfd_siginfo info{};
  while (::read(signal_fd_.get(), &info, sizeof info) == sizeof info) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      for (AgentConn& a : agents_) a.try_reap();
      continue;
    }
    if (result_.interrupted_by == 0) {
      result_.interrupted_by = sig;
      spdlog::warn("{}: stopping all ranks (again to kill them at once)", strsignal(sig));
      stop_all(FrameType::kTerminate);
    } else {
      spdlog::warn("{} again: killing all ranks now", strsignal(sig));
      stop_all(FrameType::kKill);
    }
  }
}

bool Launch::console_pending() const {
  return router_.pending(STDOUT_FILENO) || router_.pending(STDERR_FILENO);
}

bool Launch::finished() const {
  for (const AgentConn& a : agents_) {
    if (!a.eof || !a.reaped) return false;
  }
  // Every line reaches the console, unless the user interrupted and nobody reads it.
  return !console_pending() || result_.interrupted_by != 0;
}

int Launch::exit_code() const {
  if (result_.first_failure) return result_.ranks[*result_.first_failure].exit_code();
  if (!result_.error.empty()) return to_int(error_code_);
  if (result_.interrupted_by != 0) return 128 + result_.interrupted_by;
  return 0;
}

LaunchResult Launch::run() {
  for (const RankPlan& r : plan_.ranks) {
    RankOutcome o;
    o.rank = r.topology.rank;
    o.host_index = r.host_index;
    o.local_rank = r.topology.local_rank;
    result_.ranks.push_back(o);
  }
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, &old_mask);
  ::signal(SIGPIPE, SIG_IGN);
  signal_fd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));

  for (int h = 0; h < static_cast<int>(plan_.hosts.size()); ++h) {
    if (plan_.hosts[h].local) {
      agents_.emplace_back(h, start_local_agent(options_.hvdrun_path));
    } else {
      agents_.emplace_back(h, std::move(*remote_agents_[h]));
    }
  }

  while (!finished()) {
    // Interrupted with a full queue nobody reads: drop console output so that the agents'
    // frames (and their exits) keep flowing.
    if (result_.interrupted_by != 0 && router_.queued_bytes() > kMaxQueuedBytes) {
      router_.abandon_console();
    }
    const bool back_pressure = router_.queued_bytes() > kMaxQueuedBytes;
    std::vector<pollfd> fds{{signal_fd_.get(), POLLIN, 0}};
    for (AgentConn& a : agents_) {
      fds.push_back({a.eof || back_pressure ? -1 : a.read_fd(), POLLIN, 0});
      fds.push_back({a.log().valid() ? a.log().get() : -1, POLLIN, 0});
    }
    const size_t console = fds.size();
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      fds.push_back({router_.pending(fd) ? fd : -1, POLLOUT, 0});
    }
    const int timeout = poll_timeout_ms();
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (timeout >= 0 && poll_timeout_ms() == 0) start_timed_out();
    if (fds[0].revents != 0) on_signal();
    for (size_t i = console; i < fds.size(); ++i) {
      if (fds[i].revents != 0) router_.drain(fds[i].fd);
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      AgentConn& a = agents_[i];
      if (fds[1 + 2 * i + 1].revents != 0) on_agent_log(a);
      if (fds[1 + 2 * i].revents == 0) continue;
      std::array<char, 64 * 1024> buf{};
      const long n = worker::read_some(a.read_fd(), buf.data(), buf.size());
      if (n <= 0) {
        a.eof = true;
        a.try_reap();
        if (!a.done && !stopping_) agent_lost(a);
        continue;
      }
      a.reader.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
      try {
        while (auto frame = a.reader.next()) on_frame(a, *frame);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kLauncher) {
          fail(e.what(), e.hint(), e.exit_code());  // this launcher's own part, not the agent's
        } else {
          fail(fmt::format("agent on {}: {}", plan_.hosts[a.host_index].spec.host, e.what()),
               e.hint());
        }
      }
    }
  }
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  result_.total_time = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  result_.exit_code = exit_code();
  if (rendezvous_) result_.rendezvous = rendezvous_->stats();
  return std::move(result_);
}

}  // namespace native

LaunchResult run_native(const Plan& plan, const LaunchOptions& options) {
  RemoteStart remote = start_remote_agents(plan, options.ssh);
  if (!remote.failures.empty()) {
    LaunchResult result;
    result.ssh_failures = std::move(remote.failures);
    result.exit_code = to_int(ExitCode::kSshCheckFailed);
    return result;
  }
  native::Launch launch(plan, options, std::move(remote.agents));
  LaunchResult result = launch.run();
  for (size_t h = 0; h < result.hosts.size() && h < remote.addresses.size(); ++h) {
    result.hosts[h].address = remote.addresses[h];
  }
  return result;
}

}  // namespace hvd::launcher
