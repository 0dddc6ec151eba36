#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "agent/sealed_link.h"
#include "common/error.h"
#include "common/fd_io.h"
#include "launcher/native/native_job.h"
#include "ssh/host_check.h"

namespace hvd::launcher::native {

NativeJob::~NativeJob() = default;

const std::string& NativeJob::host_of(const AgentConn& agent) const {
  return hosts_[static_cast<size_t>(agent.host_index)].spec.host;
}

void NativeJob::send(AgentConn& agent, FrameType type, std::string_view payload) {
  // A write to an agent that is gone fails; its EOF, read next, says what happened.
  write_all(agent.transport->write_fd(),
            agent.transport->outgoing(agent::encode_frame(type, payload)));
}

void NativeJob::stop(StopMode mode) {
  for (AgentConn& a : agents_) {
    if (a.eof) continue;
    if (a.spec_sent) {
      send(a, mode == StopMode::kKill ? FrameType::kKill : FrameType::kTerminate);
    } else if (!a.hello) {
      // Not answering (a --start-timeout): nothing of the job runs there, so there is nothing
      // to wait for; its session is closed now, so that the timeout ends hvdrun at its value.
      a.transport->abandon();
    } else {
      a.transport->close_input();  // no job yet: EOF tells the agent there will be none
    }
  }
}

void NativeJob::forward_signal(int sig) {
  for (AgentConn& a : agents_) {
    if (!a.eof && a.spec_sent) send(a, FrameType::kSignal, agent::encode_signal(sig));
  }
}

// Why `type` cannot come from `agent` now, given what it was asked; nullopt when it may.
std::optional<std::string> NativeJob::out_of_order(const AgentConn& agent, FrameType type) const {
  switch (type) {
    case FrameType::kHello:
      if (agent.hello) return "a second hello";
      return std::nullopt;
    case FrameType::kListening:
      if (!agent.asked_listen || agent.probe_port) return "a probe port nobody asked for";
      return std::nullopt;
    case FrameType::kProbeResult:
      if (!agent.asked_probe || agent.probed) return "probe results nobody asked for";
      return std::nullopt;
    case FrameType::kProbeClosed:
      if (!agent.asked_close || agent.probe_closed) return "a probe close nobody asked for";
      return std::nullopt;
    case FrameType::kPong:  // agents are pinged from their hello on
      if (!agent.hello) return "a pong before its hello";
      return std::nullopt;
    case FrameType::kStarted:
    case FrameType::kOutput:
    case FrameType::kExited:
    case FrameType::kDone:
      if (!agent.spec_sent) return "rank events before it was given a job";
      return std::nullopt;
    case FrameType::kRankEvent:
    case FrameType::kStartFailed:
      if (!agent.spec_sent || !plan_.elastic) return "an elastic rank event in a job that has none";
      return std::nullopt;
    case FrameType::kRankReport:
    case FrameType::kInspection:
      if (!agent.spec_sent) return "a rank's report before it was given a job";
      return std::nullopt;
    case FrameType::kError:
      return std::nullopt;
    case FrameType::kSpec:
    case FrameType::kTerminate:
    case FrameType::kKill:
    case FrameType::kProbeListen:
    case FrameType::kProbe:
    case FrameType::kProbeClose:
    case FrameType::kPing:
    case FrameType::kSignal:
    case FrameType::kGeneration:
    case FrameType::kStartRanks:
    case FrameType::kInspect:
      break;
  }
  return fmt::format("a frame of type {}, which only the launcher sends", static_cast<int>(type));
}

void NativeJob::protocol_error(const AgentConn& agent, const std::string& what,
                               const std::string& hint) {
  sup_.fail({ErrorKind::kRemote,
             fmt::format("protocol error: the agent on {} sent {}", host_of(agent), what),
             !hint.empty() ? hint
                           : "that host does not run this hvdrun's agent as it should: check the "
                             "program at --agent-path there (`hvdrun --check-ssh` shows its "
                             "version)"});
}

void NativeJob::on_frame(AgentConn& agent, const agent::Frame& frame) {
  if (const auto why = out_of_order(agent, frame.type)) {
    protocol_error(agent, *why);
    return;
  }
  switch (frame.type) {
    case FrameType::kHello:
      on_hello(agent, frame.payload);
      break;
    case FrameType::kListening:
      if (elastic_running()) {
        on_join_listening(agent, frame.payload);
      } else {
        on_listening(agent, frame.payload);
      }
      break;
    case FrameType::kProbeResult:
      if (elastic_running()) {
        on_join_probe_results(agent, frame.payload);
      } else {
        on_probe_results(agent, frame.payload);
      }
      break;
    case FrameType::kProbeClosed:
      agent.probe_closed = true;
      if (!elastic_) send_specs();  // at start-up; later, a joining host's check ended
      break;
    case FrameType::kStarted: {
      const auto started = agent::decode_started(frame.payload);
      sup_.rank_started(static_cast<int>(started.rank), started.pid);
      if (all_started() && !startup_logged_) {
        startup_logged_ = true;
        spdlog::debug("phase: running (every rank started)");
      }
      break;
    }
    case FrameType::kOutput: {
      const auto chunk = agent::decode_output(frame.payload);
      if (chunk.rank < sup_.result().ranks.size()) {
        sup_.output().write(static_cast<int>(chunk.rank), chunk.stream, chunk.bytes);
      }
      break;
    }
    case FrameType::kExited: {
      const auto exited = agent::decode_exited(frame.payload);
      if (elastic_running()) {
        on_elastic_exit(exited);
      } else if (verdict_ && verdict_->ends != VerdictEnds::kNo) {
        held_exits_.push_back(exited);  // recorded after the verdict (finish_verdict)
      } else {
        sup_.rank_exited(static_cast<int>(exited.rank),
                         {exited.signaled, static_cast<int>(exited.value)}, exited.stopped);
      }
      break;
    }
    case FrameType::kRankEvent:
      on_rank_event(frame.payload);
      break;
    case FrameType::kStartFailed:
      on_start_failed(agent, frame.payload);
      break;
    case FrameType::kRankReport:
      on_rank_report(agent, frame.payload);
      break;
    case FrameType::kInspection:
      on_inspection(agent, frame.payload);
      break;
    case FrameType::kError:
      on_agent_error(agent, frame.payload);
      break;
    case FrameType::kDone:
      agent.done = true;
      break;
    case FrameType::kPong:
      break;  // read_frames() noted that it is there
    default:
      break;  // out_of_order() refused the rest
  }
}

// The agent gives up only when it cannot start the job (a bad spec, a missing program or
// directory) or cannot take part in the network check (no free port in the range).
void NativeJob::on_agent_error(AgentConn& agent, const std::string& payload) {
  const auto error = nlohmann::json::parse(payload, nullptr, false);
  auto text = [&](const char* key, const std::string& fallback) {
    const bool has = error.is_object() && error.contains(key) && error[key].is_string();
    return has ? error[key].get<std::string>() : fallback;
  };
  std::string message = text("message", payload);
  // The agent's sealed link refused a record from here (agent/sealed_link.h): the host's link
  // was tampered with, a host lost (74), whenever it came.
  const bool link = text("kind", "") == kind_name(ErrorKind::kHostLost);
  if (!agent.spec_sent || link) message = fmt::format("host {}: {}", host_of(agent), message);
  // No port of --port-range for the agent's probes is hvdrun's own part failing (exit 71, as
  // for the rendezvous server's port); anything else is the job not starting there (127).
  const bool launcher_part = text("kind", "") == kind_name(ErrorKind::kLauncher);
  sup_.fail({launcher_part ? ErrorKind::kLauncher
             : link        ? ErrorKind::kHostLost
                           : ErrorKind::kRemote,
             message, text("hint", "")});
}

void NativeJob::on_agent_log(AgentConn& agent) {
  std::array<char, 4096> buf{};
  UniqueFd& log = agent.transport->log();
  const long n = read_some(log.get(), buf.data(), buf.size());
  if (n <= 0) {
    log.reset();
    return;
  }
  agent.log_partial.append(buf.data(), static_cast<size_t>(n));
  size_t newline = 0;
  while ((newline = agent.log_partial.find('\n')) != std::string::npos) {
    const std::string line = agent.log_partial.substr(0, newline);
    const std::string label = agent.transport->log_label(host_of(agent));
    spdlog::warn("{}{}{}", label, label.empty() ? "" : ": ", line);
    agent.log_tail.push_back(line);
    if (agent.log_tail.size() > 5) agent.log_tail.pop_front();
    agent.log_partial.erase(0, newline + 1);
  }
}

// The launch's ranks (an elastic job's later workers have the elastic driver's deadlines).
bool NativeJob::all_started() const {
  const auto& ranks = sup_.result().ranks;
  return std::all_of(
      ranks.begin(),
      ranks.begin() + static_cast<std::ptrdiff_t>(std::min(ranks.size(), plan_.ranks.size())),
      [](const RankOutcome& r) { return r.started; });
}

bool NativeJob::keepalive_on(const AgentConn& a) const { return pinging(a) && a.spec_sent; }

// From its start on (the first ping waits in its input until it has said hello): the agent
// learns its side of --keepalive from the pings (agent/agent.cpp) and gives up on a launcher it
// has not heard from for two periods, before its job too.
bool NativeJob::pinging(const AgentConn& a) const {
  return options_.keepalive.count() > 0 && !a.eof && !a.abandoned && !sup_.stopping();
}

std::optional<Clock::time_point> NativeJob::deadline() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  if (!sup_.stopping() && !all_started()) consider(start_deadline_);
  // The start-up line's elapsed time ticks (on_ready redraws it).
  if (startup_line_since_) consider(Clock::now() + ssh::kProgressEvery);
  if (elastic_running()) {
    if (const auto t = elastic_->next_deadline()) consider(*t);
    if (discovery_) consider(discovery_->running() ? *discovery_->deadline() : next_discovery_);
    for (const AgentConn& a : agents_) {  // a joining host's hello
      if (a.joining && !a.hello && !a.retired && !a.eof) {
        consider(a.last_heard + options_.start_timeout);
      }
    }
    if (join_check_) consider(join_check_->deadline);
    // Wakes the loop once a second for the status line's countdown (on_ready redraws it).
    if (const auto now = Clock::now(); status_counting_down(now))
      consider(now + std::chrono::seconds(1));
  }
  if (verdict_) consider(verdict_->deadline);
  if (const auto t = init_watch_due()) consider(*t);
  for (const AgentConn& a : agents_) {
    if (pinging(a)) consider(a.next_ping);
    if (keepalive_on(a)) consider(a.last_heard + options_.keepalive);
  }
  return next;
}

void NativeJob::on_deadline() {
  const auto now = Clock::now();
  if (!sup_.stopping() && !all_started() && now >= start_deadline_) on_start_timeout();
  update_startup_line(now);
  if (elastic_running()) {
    if (const auto t = elastic_->next_deadline(); t && now >= *t) apply(elastic_->on_tick(now));
    for (AgentConn& a : agents_) {
      if (a.joining && !a.hello && !a.retired && !a.eof &&
          now >= a.last_heard + options_.start_timeout) {
        joiner_lost(a, fmt::format("its agent did not answer within {:.0f} s (--start-timeout)",
                                   std::chrono::duration<double>(options_.start_timeout).count()));
      }
    }
    if (join_check_ && now >= join_check_->deadline) {
      std::vector<std::string> silent;
      for (size_t i : join_check_->waiting) silent.push_back(host_of(agents_[i]));
      end_join_check(fmt::format(
          "its network check did not finish within {:.0f} s (--start-timeout); no answer from {}",
          std::chrono::duration<double>(options_.start_timeout).count(), fmt::join(silent, ", ")));
    }
    if (discovery_) discovery_turn(now);
    admit_agents();
    update_status(now);
  }
  if (verdict_ && now >= verdict_->deadline) finish_verdict();  // some agents did not answer
  check_init(now);
  keepalive(now);
}

// Every agent that runs a job is pinged three times per --keepalive period; any frame from it
// (its answer, rank output, an exit) shows it is there. One that stays silent for the whole
// period is frozen or cut off without a word (a silent partition sends no reset): it is lost.
void NativeJob::keepalive(Clock::time_point now) {
  const auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(2 * options_.keepalive);
  for (AgentConn& a : agents_) {
    if (!pinging(a)) continue;
    if (keepalive_on(a) && now >= a.last_heard + options_.keepalive) {
      agent_silent(a);
    } else if (now >= a.next_ping) {
      send(a, FrameType::kPing,
           agent::encode_ping(
               static_cast<uint32_t>(std::min<long long>(limit.count(), UINT32_MAX))));
      a.next_ping = now + options_.keepalive / 3;
    }
  }
}

void NativeJob::agent_silent(AgentConn& a) {
  const std::string& host = host_of(a);
  const double seconds = std::chrono::duration<double>(options_.keepalive).count();
  a.transport->abandon();
  a.eof = a.gone = a.abandoned = true;
  sup_.result().abandoned.push_back(host);
  sup_.result().lost_hosts.push_back(host);
  const std::string what = fmt::format(
      "lost the host {}: nothing came from its agent for {:.0f} s while the job ran "
      "(--keepalive {:.0f})",
      host, seconds, seconds);
  if (elastic_running()) {
    apply(elastic_->on_host_lost(host, what, Clock::now()));
    return;
  }
  sup_.fail({ErrorKind::kHostLost, what,
             "the host froze, or its link was cut without a reset; its agent stops its ranks "
             "when its SSH session closes (now) or, if frozen, when it runs again. A longer "
             "--keepalive tolerates longer stalls"});
}

std::vector<std::string> NativeJob::abandon() {
  finish_verdict();  // what it has, and the exits it held
  std::vector<std::string> hosts;
  for (AgentConn& a : agents_) {
    if (a.eof && a.gone) continue;
    a.transport->abandon();
    a.eof = a.gone = a.abandoned = true;
    hosts.push_back(host_of(a));
  }
  return hosts;
}

void NativeJob::on_child_exited() {
  for (AgentConn& a : agents_) a.check_gone();
  if (discovery_) discovery_turn(Clock::now());  // the script may have ended
}

bool NativeJob::done() const {
  if (!held_exits_.empty()) return false;  // recorded once the verdict is out (its deadline)
  return std::all_of(agents_.begin(), agents_.end(),
                     [](const AgentConn& a) { return a.eof && a.gone; });
}

void NativeJob::add_pollfds(std::vector<pollfd>& fds, bool read_output) {
  // While the console is backed up nothing is read from the agents: silence says nothing then.
  if (!read_output) {
    for (AgentConn& a : agents_) a.last_heard = Clock::now();
  }
  for (AgentConn& a : agents_) {
    fds.push_back({a.eof || !read_output ? -1 : a.transport->read_fd(), POLLIN, 0});
    fds.push_back({a.transport->log().valid() ? a.transport->log().get() : -1, POLLIN, 0});
  }
  polled_agents_ = agents_.size();
  for (const auto& s : starters_) fds.push_back({s->fd(), POLLIN, 0});
  polled_starters_ = starters_.size();
  polled_discovery_ = discovery_.has_value();
  if (polled_discovery_) {
    fds.push_back({discovery_->out_fd(), POLLIN, 0});
    fds.push_back({discovery_->err_fd(), POLLIN, 0});
  }
}

void NativeJob::read_frames(AgentConn& a) {
  std::array<char, 64 * 1024> buf{};
  const long n = read_some(a.transport->read_fd(), buf.data(), buf.size());
  if (n <= 0) {
    a.eof = true;
    a.transport->frames_ended();
    a.check_gone();
    if (!a.done && !sup_.stopping()) agent_lost(a);
    return;
  }
  a.last_heard = Clock::now();
  try {
    a.transport->received(std::string_view(buf.data(), static_cast<size_t>(n)), a.reader);
    while (auto frame = a.reader.next()) on_frame(a, *frame);
  } catch (const agent::SealError& e) {
    // The link to the agent was tampered with (a sealed one, --launcher srun): not the agent's.
    sup_.fail(
        {e.kind(), fmt::format("the link to the agent on {}: {}", host_of(a), e.what()), e.hint()});
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kLauncher) {
      sup_.fail({e.kind(), e.what(), e.hint()});  // this launcher's own part, not the agent's
    } else {
      // A frame or payload the decoders refuse (garbage, a field of the wrong type).
      // The decoder's own hint, where it has one, says more (text from a login script).
      protocol_error(a, fmt::format("what this launcher cannot read: {}", e.what()), e.hint());
    }
  } catch (const nlohmann::json::exception& e) {
    protocol_error(a, fmt::format("JSON this launcher cannot read: {}", e.what()));
  }
}

void NativeJob::on_ready(std::span<const pollfd> fds) {
  for (size_t i = 0; i < polled_agents_; ++i) {
    AgentConn& a = agents_[i];
    if (fds[2 * i + 1].revents != 0) on_agent_log(a);
    if (fds[2 * i].revents != 0) read_frames(a);
  }
  // Joining hosts' agents and the discovery script (elastic jobs): after the agents, so that no
  // AgentConn is referenced while agents_ grows.
  const size_t after = 2 * polled_agents_ + polled_starters_;
  if (polled_discovery_ && discovery_ && (fds[after].revents != 0 || fds[after + 1].revents != 0)) {
    discovery_->on_readable();
  }
  if (polled_starters_ > 0 || polled_discovery_) {
    discovery_turn(Clock::now());
    admit_agents();
  }
  update_startup_line(Clock::now());  // before an elastic job's own line, which follows it
  if (elastic_running()) update_status(Clock::now());
}

// The plan's hosts only (the report's hosts are the plan's; hosts that joined an elastic job
// are named in its `elastic` record).
std::vector<HostFacts> NativeJob::host_facts() const {
  std::vector<HostFacts> facts;
  const auto planned = [&](const AgentConn& a) {
    return static_cast<size_t>(a.host_index) < plan_.hosts.size();
  };
  if (!std::all_of(agents_.begin(), agents_.end(),
                   [&](const AgentConn& a) { return a.hello || !planned(a); })) {
    return facts;
  }
  facts.resize(plan_.hosts.size());
  for (const AgentConn& a : agents_) {
    if (!planned(a)) continue;
    HostFacts& f = facts[static_cast<size_t>(a.host_index)];
    f.boot_id = a.hello->boot_id;
    // Where the launcher reached it (an agent through srun: its node's NodeAddr), once known.
    if (static_cast<size_t>(a.host_index) < facts_.reached_at.size()) {
      f.address = facts_.reached_at[static_cast<size_t>(a.host_index)];
    }
  }
  return facts;
}

nlohmann::ordered_json NativeJob::details() const {
  nlohmann::ordered_json out;
  if (!rendezvous_) {
    out["rendezvous"] = nullptr;
  } else {
    const RendezvousStats rv = rendezvous_->stats();
    out["rendezvous"] = {
        {"requests", rv.requests},
        {"rejected", rv.rejected},
        {"ranks_seen", std::vector<int>(rv.ranks_seen.begin(), rv.ranks_seen.end())}};
  }
  if (options_.elastic) out["elastic"] = elastic_json();
  out["stalls"] = stalls_;
  out["stragglers"] = stragglers_json();
  return out;
}

}  // namespace hvd::launcher::native
