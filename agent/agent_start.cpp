// The host agent before and at the start of its job (agent/agent.h): the network check's
// probes, the job spec, the ranks' environment and their start; in elastic jobs, ranks started
// later and a joining host's check.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/agent_impl.h"
#include "common/error.h"
#include "contract/elastic.h"
#include "contract/env_table.h"
#include "contract/report.h"

extern char** environ;

namespace hvd::agent {

// Before the job: the launcher may have the agent probe the network (agent/probe.h), then
// sends the spec. The probe listener keeps greeting other hosts' probes while this agent waits.
bool Agent::read_spec() {
  while (true) {
    try {
      while (auto frame = reader_.next()) {
        switch (frame->type) {
          case FrameType::kTerminate:
          case FrameType::kKill:
            return false;  // stopped before it started: nothing to do
          case FrameType::kProbeListen: {
            const ProbeListenRequest request = decode_probe_listen(frame->payload);
            listener_.emplace(request.range, request.token);
            send(FrameType::kListening, encode_listening(listener_->port()));
            break;
          }
          case FrameType::kProbe: {
            const ProbeRequest request = decode_probe_request(frame->payload);
            const auto outcomes =
                run_probes(request.targets, std::chrono::milliseconds(request.timeout_ms),
                           listener_ ? &*listener_ : nullptr);
            send(FrameType::kProbeResult, encode_probe_results(outcomes));
            break;
          }
          case FrameType::kProbeClose:
            listener_.reset();
            send(FrameType::kProbeClosed);
            break;
          case FrameType::kPing:
            on_ping(frame->payload);
            break;
          case FrameType::kSpec:
            spec_ = decode_spec(frame->payload);
            return true;
          default:
            error("protocol error: expected a job spec first");
            return false;
        }
      }
    } catch (const Error& e) {
      error(e.what(), e.hint(), e.kind());  // the launcher names the host
      return false;
    }
    // A launcher silent past the pings' limit (a link cut without a reset) sends no job: the
    // agent has nothing to stop and leaves.
    if (launcher_silent()) return false;
    std::vector<pollfd> fds{{in_fd_, POLLIN, 0}, {out_queue_.empty() ? -1 : out_fd_, POLLOUT, 0}};
    if (listener_) listener_->add_pollfds(fds);
    if (::poll(fds.data(), fds.size(), silence_left_ms()) < 0 && errno != EINTR) return false;
    if (listener_ &&
        std::any_of(fds.begin() + 2, fds.end(), [](const pollfd& f) { return f.revents != 0; })) {
      listener_->serve();
    }
    if (fds[1].revents != 0) flush_output();
    if (fds[0].revents == 0) continue;
    if (!read_input()) return false;  // the launcher went away before sending a job
  }
}

std::vector<std::string> Agent::rank_environment(const RankSpec& rank) const {
  // Base: this agent's own environment (the host's login environment), less anything that
  // would contradict the contract; then the planned values on top.
  std::vector<std::pair<std::string, std::string>> env;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string_view entry(*p);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string name(entry.substr(0, eq));
    if (name.starts_with(contract::kInternalPrefix) || contract::find_env_var(name) != nullptr) {
      continue;
    }
    env.emplace_back(name, std::string(entry.substr(eq + 1)));
  }
  for (const auto& [name, value] : rank.env) {
    auto it =
        std::find_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
    if (it != env.end()) {
      it->second = value;
    } else {
      env.emplace_back(name, value);
    }
  }
  // The descriptors start_rank() gives every rank (contract/report.h).
  env.emplace_back(contract::kReportFd.name, std::to_string(contract::kReportChannelFd));
  env.emplace_back(contract::kStackFd.name, std::to_string(contract::kStackChannelFd));
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

bool Agent::start_ranks() {
  // The probes are over: the listener goes before any rank starts (rank 0's host closed it
  // earlier, on kProbeClose, so that MASTER_PORT, its port, was free for the job).
  listener_.reset();
  struct stat st {};
  if (::stat(spec_.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    error(fmt::format("host {}: the working directory {} does not exist", spec_.host, spec_.cwd),
          "create it on that host, or pick another with --wd");
    return false;
  }
  for (const RankSpec& rank : spec_.ranks) {
    if (const auto failed = start_rank(rank)) {
      error(failed->first, failed->second);
      stop(SIGKILL);
      return false;
    }
  }
  return true;
}

// Starts one rank; on failure, what went wrong and the hint.
std::optional<std::pair<std::string, std::string>> Agent::start_rank(const RankSpec& rank) {
  // A rank dies with its agent (SIGKILL), the agent's dead-man switch of last resort.
  ProcessSpec process;
  process.argv = spec_.argv;
  process.env = rank_environment(rank);
  process.cwd = spec_.cwd;
  process.parent_death_signal = SIGKILL;
  // Elastic: the rank's channel to this agent, its end on fd 3 (HVD_ELASTIC_FD).
  UniqueFd ours, theirs;
  if (spec_.elastic) {
    std::array<int, 2> pair{};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair.data()) != 0) {
      return std::pair{fmt::format("host {}: rank {}: no socket pair for its elastic channel: {}",
                                   spec_.host, rank.rank, std::strerror(errno)),
                       std::string("the host is out of file descriptors")};
    }
    ours.reset(pair[0]);
    theirs.reset(pair[1]);
    ::fcntl(ours.get(), F_SETFL, ::fcntl(ours.get(), F_GETFL) | O_NONBLOCK);
    process.pass_fds.emplace_back(theirs.get(), contract::kElasticChannelFd);
  }
  // Every rank: its report channel and its stack pipe (contract/report.h).
  UniqueFd report_read, report_write, stack_read, stack_write;
  for (auto* ends : {&report_read, &stack_read}) {
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
      return std::pair{fmt::format("host {}: rank {}: no pipe for its report channel: {}",
                                   spec_.host, rank.rank, std::strerror(errno)),
                       std::string("the host is out of file descriptors")};
    }
    ends->reset(fds[0]);
    (ends == &report_read ? report_write : stack_write).reset(fds[1]);
    ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  }
  process.pass_fds.emplace_back(report_write.get(), contract::kReportChannelFd);
  process.pass_fds.emplace_back(stack_write.get(), contract::kStackChannelFd);
  Process spawned = Process::spawn(process);
  theirs.reset();  // the rank has them now
  report_write.reset();
  stack_write.reset();
  if (!spawned.started()) {
    return std::pair{
        fmt::format("host {}: rank {}: {}", spec_.host, rank.rank, spawned.error()),
        std::string("check the path of the program on that host (a relative path is relative to "
                    "the working directory, a bare name is looked up in the rank's PATH)")};
  }
  const auto pid = static_cast<uint32_t>(spawned.pid());
  LiveRank live;
  live.rank = rank.rank;
  live.process = std::move(spawned);
  live.channel = std::move(ours);
  live.report = std::move(report_read);
  live.stack = std::move(stack_read);
  ranks_.push_back(std::move(live));
  send(FrameType::kStarted, encode_started({static_cast<uint32_t>(rank.rank), pid}));
  return std::nullopt;
}

// Elastic jobs: more ranks while the job runs (a refilled slot). One that cannot start is
// reported (kStartFailed) and the job goes on: the launcher counts it as that worker's failure.
void Agent::start_more(const JobSpec& more) {
  for (const RankSpec& rank : more.ranks) {
    const bool taken = std::any_of(ranks_.begin(), ranks_.end(),
                                   [&](const LiveRank& r) { return r.rank == rank.rank; });
    std::optional<std::pair<std::string, std::string>> failed;
    if (stopping_ || killing_) {
      failed = std::pair{
          fmt::format("host {}: rank {} not started: the job is stopping", spec_.host, rank.rank),
          std::string()};
    } else if (taken) {
      failed =
          std::pair{fmt::format("host {}: worker {} was started before", spec_.host, rank.rank),
                    std::string("a launcher bug: worker ids are never reused")};
    } else {
      failed = start_rank(rank);
    }
    if (failed) {
      send(FrameType::kStartFailed,
           nlohmann::json{
               {"worker", rank.rank}, {"message", failed->first}, {"hint", failed->second}}
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
}

void Agent::start_probes(const ProbeRequest& request) {
  if (prober_.joinable()) prober_.join();  // the launcher asks one check at a time
  if (!probe_done_read_.valid()) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
    probe_done_read_.reset(fds[0]);
    probe_done_write_.reset(fds[1]);
  }
  prober_ = std::jthread([this, request] {
    std::vector<ProbeOutcome> outcomes =
        run_probes(request.targets, std::chrono::milliseconds(request.timeout_ms), nullptr);
    {
      std::lock_guard<std::mutex> lock(probe_mutex_);
      probed_ = std::move(outcomes);
    }
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(probe_done_write_.get(), &byte, 1);
  });
}

void Agent::finish_probes() {
  char byte = 0;
  while (::read(probe_done_read_.get(), &byte, 1) == 1) {
  }
  if (prober_.joinable()) prober_.join();
  std::vector<ProbeOutcome> outcomes;
  {
    std::lock_guard<std::mutex> lock(probe_mutex_);
    outcomes = std::move(probed_);
  }
  send(FrameType::kProbeResult, encode_probe_results(outcomes));
}

}  // namespace hvd::agent
