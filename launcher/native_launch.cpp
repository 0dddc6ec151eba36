#include "launcher/native_launch.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "hvd/build_config.h"
#include "launcher/local_agent.h"
#include "launcher/output_router.h"
#include "worker/contract/env_table.h"
#include "worker/job_spec.h"
#include "worker/protocol.h"

namespace hvd::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using worker::FrameType;

struct AgentConn {
  int host_index = 0;
  AgentProcess process;
  worker::FrameReader reader;
  std::string log_partial;
  bool done = false;
  bool eof = false;
  bool reaped = false;
};

// A free TCP port on this machine for MASTER_PORT (the kernel picks; we release it at once).
int free_local_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    return 29500;  // torchrun's default
  }
  return ntohs(sa.sin_port);
}

worker::JobSpec host_spec(const Plan& plan, int host_index, const LaunchOptions& options,
                          int master_port) {
  worker::JobSpec spec;
  spec.protocol = worker::kProtocolVersion;
  spec.host = plan.hosts[host_index].spec.host;
  spec.argv = plan.command;
  spec.cwd = options.cwd;
  spec.grace_seconds = options.grace_seconds;
  for (const RankPlan& rank : plan.ranks) {
    if (rank.host_index != host_index) continue;
    worker::RankSpec r;
    r.rank = rank.topology.rank;
    for (const EnvEntry& e : rank.env) {
      if (!e.deferred) {
        r.env.emplace_back(e.name, e.value);
      } else if (e.name == contract::kMasterPort.name) {
        r.env.emplace_back(e.name, std::to_string(master_port));
      }
      // The rendezvous variables come with the rendezvous server (native launch part 2).
    }
    spec.ranks.push_back(std::move(r));
  }
  return spec;
}

class Launch {
 public:
  Launch(const Plan& plan, const LaunchOptions& options)
      : plan_(plan),
        options_(options),
        router_(options.stdout_to_stderr ? STDERR_FILENO : STDOUT_FILENO, STDERR_FILENO,
                options.output_dir) {}
  LaunchResult run();

 private:
  void on_frame(AgentConn& agent, const worker::Frame& frame);
  void on_hello(AgentConn& agent, const std::string& payload);
  void on_exited(const worker::RankExited& exited);
  void on_agent_log(AgentConn& agent);
  void on_signal();
  void stop_all(FrameType how);
  bool console_pending() const;
  void fail(std::string message, std::string hint);
  bool finished() const;
  int exit_code() const;

  const Plan& plan_;
  const LaunchOptions& options_;
  OutputRouter router_;
  std::vector<AgentConn> agents_;
  LaunchResult result_;
  UniqueFd signal_fd_;
  bool stopping_ = false;
  bool killing_ = false;
  int started_ = 0;
  Clock::time_point start_ = Clock::now();
  int master_port_ = 0;
};

void Launch::stop_all(FrameType how) {
  if (how == FrameType::kTerminate && stopping_) return;
  stopping_ = true;
  killing_ |= how == FrameType::kKill;
  for (AgentConn& a : agents_) {
    if (!a.eof) worker::write_all(a.process.to_agent.get(), worker::encode_frame(how, ""));
  }
}

void Launch::fail(std::string message, std::string hint) {
  if (result_.interrupted_by != 0) {
    // After an interrupt, an agent that gives up is a consequence, not the cause.
    spdlog::debug("after the interrupt: {}", message);
    stop_all(FrameType::kTerminate);
    return;
  }
  if (result_.error.empty()) {
    result_.error = std::move(message);
    result_.error_hint = std::move(hint);
  }
  stop_all(FrameType::kTerminate);
}

void Launch::on_hello(AgentConn& agent, const std::string& payload) {
  const auto hello = nlohmann::json::parse(payload, nullptr, false);
  const std::string& host = plan_.hosts[agent.host_index].spec.host;
  if (hello.is_discarded() || hello.value("protocol", -1) != worker::kProtocolVersion ||
      hello.value("version", "") != HVD_VERSION_STRING) {
    fail(fmt::format("the agent on {} is hvdrun {} speaking protocol {}; this launcher is "
                     "hvdrun {} with protocol {}",
                     host, hello.is_discarded() ? "?" : hello.value("version", "?"),
                     hello.is_discarded() ? -1 : hello.value("protocol", -1), HVD_VERSION_STRING,
                     worker::kProtocolVersion),
         "install the same hvdrun version on every host (or point --agent-path at it)");
    return;
  }
  if (stopping_) {
    // Stopped before this host got its job: closing its input tells the agent there is none.
    agent.process.to_agent.reset();
    return;
  }
  const std::string spec =
      worker::encode_spec(host_spec(plan_, agent.host_index, options_, master_port_));
  worker::write_all(agent.process.to_agent.get(), worker::encode_frame(FrameType::kSpec, spec));
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
      fail(error.is_discarded() ? frame.payload : error.value("message", frame.payload),
           error.is_discarded() ? "" : error.value("hint", ""));
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
  const long n = worker::read_some(agent.process.agent_log.get(), buf.data(), buf.size());
  if (n <= 0) {
    agent.process.agent_log.reset();
    return;
  }
  agent.log_partial.append(buf.data(), static_cast<size_t>(n));
  size_t newline = 0;
  while ((newline = agent.log_partial.find('\n')) != std::string::npos) {
    spdlog::warn("agent on {}: {}", plan_.hosts[agent.host_index].spec.host,
                 agent.log_partial.substr(0, newline));
    agent.log_partial.erase(0, newline + 1);
  }
}

void Launch::on_signal() {
  signalfd_siginfo info{};
  while (::read(signal_fd_.get(), &info, sizeof info) == sizeof info) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      for (AgentConn& a : agents_) {
        if (!a.reaped && ::waitpid(a.process.pid, nullptr, WNOHANG) == a.process.pid) {
          a.reaped = true;
        }
      }
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
  if (!result_.error.empty()) return to_int(ExitCode::kCannotStart);
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
  master_port_ = free_local_port();

  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, &old_mask);
  ::signal(SIGPIPE, SIG_IGN);
  signal_fd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));

  for (int h = 0; h < static_cast<int>(plan_.hosts.size()); ++h) {
    AgentConn agent;
    agent.host_index = h;
    agent.process = start_local_agent(options_.hvdrun_path);
    agents_.push_back(std::move(agent));
  }

  while (!finished()) {
    // Interrupted with a full queue nobody reads: drop console output so that the agents'
    // frames (and their exits) keep flowing.
    if (result_.interrupted_by != 0 && router_.queued_bytes() > kMaxQueuedBytes) {
      router_.abandon_console();
    }
    const bool back_pressure = router_.queued_bytes() > kMaxQueuedBytes;
    std::vector<pollfd> fds{{signal_fd_.get(), POLLIN, 0}};
    for (const AgentConn& a : agents_) {
      fds.push_back({a.eof || back_pressure ? -1 : a.process.from_agent.get(), POLLIN, 0});
      fds.push_back({a.process.agent_log.valid() ? a.process.agent_log.get() : -1, POLLIN, 0});
    }
    const size_t console = fds.size();
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      fds.push_back({router_.pending(fd) ? fd : -1, POLLOUT, 0});
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) on_signal();
    for (size_t i = console; i < fds.size(); ++i) {
      if (fds[i].revents != 0) router_.drain(fds[i].fd);
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      AgentConn& a = agents_[i];
      if (fds[1 + 2 * i + 1].revents != 0) on_agent_log(a);
      if (fds[1 + 2 * i].revents == 0) continue;
      std::array<char, 64 * 1024> buf{};
      const long n = worker::read_some(a.process.from_agent.get(), buf.data(), buf.size());
      if (n <= 0) {
        a.eof = true;
        if (!a.done && !stopping_) {
          fail(fmt::format("the agent on {} exited unexpectedly",
                           plan_.hosts[a.host_index].spec.host),
               "run with --log-level debug; the agent's messages above may say why");
        }
        continue;
      }
      a.reader.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
      try {
        while (auto frame = a.reader.next()) on_frame(a, *frame);
      } catch (const Error& e) {
        fail(fmt::format("agent on {}: {}", plan_.hosts[a.host_index].spec.host, e.what()),
             e.hint());
      }
    }
  }
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  result_.total_time = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  result_.exit_code = exit_code();
  return std::move(result_);
}

}  // namespace

LaunchResult run_native(const Plan& plan, const LaunchOptions& options) {
  for (const HostPlan& host : plan.hosts) {
    if (!host.local) {
      throw Error(fmt::format("host {} is remote: starting ranks over SSH is not in this build "
                              "yet (only local hosts)",
                              host.spec.host),
                  "run on localhost, or check the plan with --dry-run and SSH with --check-ssh");
    }
  }
  Launch launch(plan, options);
  return launch.run();
}

}  // namespace hvd::launcher
