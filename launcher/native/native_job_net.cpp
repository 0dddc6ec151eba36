#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

#include "agent/job_spec.h"
#include "agent/probe.h"
#include "hvd/build_config.h"
#include "launcher/core/status_line.h"
#include "launcher/native/native_job.h"
#include "launcher/plan/network_choice.h"

namespace hvd::launcher::native {

void NativeJob::on_hello(AgentConn& agent, const std::string& payload) {
  const AgentHello hello = parse_hello(payload);
  if (hello.protocol != agent::kProtocolVersion || hello.version != HVD_VERSION_STRING) {
    const std::string what = fmt::format(
        "the agent on {} is hvdrun {} speaking protocol {}; this launcher is "
        "hvdrun {} with protocol {}",
        host_of(agent), hello.version, hello.protocol, HVD_VERSION_STRING, agent::kProtocolVersion);
    if (agent.joining) {
      joiner_lost(agent, what);
      return;
    }
    sup_.fail({ErrorKind::kRemote, what,
               "install the same hvdrun version on every host (or point --agent-path at it)"});
    return;
  }
  agent.hello = hello;
  if (agent.joining) {
    on_joiner_hello(agent);
    return;
  }
  // The network check starts once every agent is there: the probes go to every host, and the
  // launcher's own address is known only from a remote host's view.
  for (const AgentConn& a : agents_) {
    if (!a.hello) return;
  }
  begin_network_check();
}

// The launcher's address as each host sees it, and (--network-cidr / --network-interface)
// each host's chosen address. False when a host has no address that matches.
bool NativeJob::choose_addresses() {
  facts_.launcher_address_of.assign(plan_.hosts.size(), "127.0.0.1");
  facts_.reached_at.assign(plan_.hosts.size(), "");
  try {
    for (const AgentConn& a : agents_) learn_addresses(a);
  } catch (const Error& e) {
    sup_.fail({e.kind(), e.what(), e.hint()});
    return false;
  }
  if (!plan_.network.active()) return true;
  facts_.chosen.resize(plan_.hosts.size());
  for (const AgentConn& a : agents_) {
    const std::string& host = host_of(a);
    try {
      facts_.chosen[a.host_index] = choose_address(plan_.network, a.hello->interfaces, host);
    } catch (const Error& e) {
      sup_.fail({ErrorKind::kUsage, e.what(), e.hint()});
      return false;
    }
    spdlog::info("host {}: ranks use {} ({})", host, facts_.chosen[a.host_index].address,
                 facts_.chosen[a.host_index].interface);
  }
  return true;
}

// Where `a`'s host sees this machine and where it was reached, once its hello is there.
void NativeJob::learn_addresses(const AgentConn& a) {
  const auto h = static_cast<size_t>(a.host_index);
  if (facts_.launcher_address_of.size() <= h) facts_.launcher_address_of.resize(h + 1, "127.0.0.1");
  if (facts_.reached_at.size() <= h) facts_.reached_at.resize(h + 1);
  // An agent that connected back, or one that --rsh-agent started (from its interfaces).
  if (const auto known = a.transport->addresses(a.hello->interfaces)) {
    facts_.launcher_address_of[h] = known->launcher_address;
    facts_.reached_at[h] = known->reached_at;
    if (facts_.launcher_address.empty()) facts_.launcher_address = known->launcher_address;
    return;
  }
  // SSH_CONNECTION: "client_ip client_port server_ip server_port".
  std::istringstream words(a.hello->ssh_connection);
  std::string client, client_port, server;
  if (a.transport->remote() && (words >> client >> client_port >> server)) {
    facts_.launcher_address_of[h] = client;
    facts_.reached_at[h] = server;
    if (facts_.launcher_address.empty()) facts_.launcher_address = client;
  }
}

// Phase 1 of the network check: every agent opens its probe listener.
void NativeJob::begin_network_check() {
  report_shared_machines();
  if (sup_.stopping() || !choose_addresses()) {
    for (AgentConn& a : agents_) a.transport->close_input();
    return;
  }
  spdlog::debug("phase: network check");  // the phase lines: tests/chaos counts faults by them
  net_.full = options_.check_net_full;
  net_.endpoints.token.resize(agents_.size());
  for (AgentConn& a : agents_) {
    net_.endpoints.token[a.host_index] = random_token().substr(0, 32);
    const agent::ProbeListenRequest request{options_.port_range,
                                            net_.endpoints.token[a.host_index]};
    send(a, FrameType::kProbeListen, agent::encode_probe_listen(request));
    a.asked_listen = true;
  }
}

// Phase 2: once every listener is up, the rendezvous server starts and every agent probes.
void NativeJob::on_listening(AgentConn& agent, const std::string& payload) {
  agent.probe_port = agent::decode_listening(payload);
  for (const AgentConn& a : agents_) {
    if (!a.probe_port) return;
  }
  if (sup_.stopping()) return;
  // Rank 0's host hands its probe port to the job: the probe proves MASTER_PORT is reachable.
  facts_.master_port = *agents_.front().probe_port;
  start_rendezvous();
  // Every deferred value is known now: the specs are final, and the probes read their addresses.
  std::vector<int> ports;
  for (const AgentConn& a : agents_) {
    ports.push_back(*a.probe_port);
    specs_.push_back(job_spec_for_host(plan_, a.host_index, options_, facts_));
  }
  init_window_ = init_window();
  net_.endpoints = probe_endpoints(plan_, specs_, facts_, ports, net_.endpoints.token);
  net_.probes = plan_probes(net_.endpoints, net_.full);
  for (AgentConn& a : agents_) {
    const agent::ProbeRequest request{net_.targets_of(a.host_index),
                                      static_cast<int>(options_.probe_timeout.count())};
    send(a, FrameType::kProbe, agent::encode_probe_request(request));
    a.asked_probe = true;
  }
}

// Phase 3: every agent reported; any failure stops the launch before a rank starts.
void NativeJob::on_probe_results(AgentConn& agent, const std::string& payload) {
  net_.record(agent.host_index, agent::decode_probe_results(payload));
  agent.probed = true;
  for (const AgentConn& a : agents_) {
    if (!a.probed) return;
  }
  sup_.result().net = net_;
  if (!net_.ok()) {
    sup_.fail({ErrorKind::kNetCheck, net_failure_message(net_),
               "nothing was started; the failed probes are listed below, and `hvdrun "
               "--check-net` repeats the check without starting a job"});
    return;
  }
  if (check_net_only_) {
    sup_.stop(StopMode::kTerminate);  // nothing to start: the agents exit when their input closes
    return;
  }
  // Rank 0's host's probe port becomes MASTER_PORT: its listener must be closed before any rank
  // anywhere starts, or an early rank's connect would reach the listener instead of rank 0
  // (torch.distributed's clients connect as soon as they start). One round trip to that host;
  // the specs go out on its kProbeClosed.
  send(agents_.front(), FrameType::kProbeClose);
  agents_.front().asked_close = true;
}

void NativeJob::send_specs() {
  if (sup_.stopping()) {
    for (AgentConn& a : agents_) a.transport->close_input();
    return;
  }
  spdlog::debug("phase: starting ranks");
  for (AgentConn& a : agents_) {
    send(a, FrameType::kSpec, agent::encode_spec(specs_[static_cast<size_t>(a.host_index)]));
    a.spec_sent = true;
    a.last_heard = Clock::now();
    a.next_ping = a.last_heard + options_.keepalive / 3;
  }
  if (options_.elastic) start_elastic();
}

// The rendezvous server listens where the hosts reach this machine: one address if they all
// see the same one (127.0.0.1 for a local job), else every address (the token still guards it).
void NativeJob::start_rendezvous() {
  std::vector<std::string> seen = facts_.launcher_address_of;
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  // Hosts that join an elastic job later may see this machine at another address.
  const bool joiners =
      options_.elastic && (options_.elastic->discovery_script || !plan_.unused_hosts.empty());
  const std::string bind = seen.size() == 1 && !joiners ? seen.front() : "0.0.0.0";
  if (bind == "0.0.0.0" && !joiners) {
    spdlog::info(
        "the hosts reach this machine at {} addresses; the rendezvous server listens on "
        "all of them",
        seen.size());
  }
  rendezvous_ = std::make_unique<RendezvousServer>(random_token());
  facts_.rendezvous_port = rendezvous_->start(bind, options_.port_range);
  facts_.rendezvous_token = rendezvous_->token();
}

// Two host entries with one boot id are one machine: worth knowing.
// One line per machine that holds several hosts (64 loopback addresses of one test machine: one
// line, not one per pair), at most kNamed hosts named.
void NativeJob::report_shared_machines() const {
  constexpr size_t kNamed = 8;
  std::vector<std::pair<std::string, std::vector<std::string>>> machines;  // boot id, hosts
  for (const AgentConn& a : agents_) {
    const std::string& boot_id = a.hello->boot_id;
    if (boot_id.empty()) continue;
    auto it = std::find_if(machines.begin(), machines.end(),
                           [&](const auto& m) { return m.first == boot_id; });
    if (it == machines.end()) it = machines.insert(machines.end(), {boot_id, {}});
    it->second.push_back(host_of(a));
  }
  for (const auto& [boot_id, hosts] : machines) {
    if (hosts.size() < 2) continue;
    std::string names;
    for (size_t i = 0; i < hosts.size() && i < kNamed; ++i) {
      names += (i == 0 ? "" : (i + 1 == hosts.size() ? " and " : ", ")) + hosts[i];
    }
    if (hosts.size() > kNamed) names += fmt::format(" and {} more", hosts.size() - kNamed);
    spdlog::info("{} hosts are the same machine (boot id {}): {}", hosts.size(), boot_id, names);
  }
}

void NativeJob::show_startup_progress(Clock::time_point since) {
  StatusLine::get().enable(STDERR_FILENO);
  startup_line_since_ = since;
  update_startup_line(Clock::now());
  StatusLine::get().draw_now();
}

// "launch: network check, 40 of 64 hosts done (2.5 s)": the phase the start-up is in (the
// phases of native_job.h), until every rank started or the job stops. Drawn by the supervisor's
// loop (OutputRouter::refresh_status) when no console output waits.
void NativeJob::update_startup_line(Clock::time_point now) {
  if (!startup_line_since_) return;
  if (all_started() || sup_.stopping()) {
    startup_line_since_.reset();
    StatusLine::get().set("");
    return;
  }
  size_t hosts = 0, hellos = 0, probed = 0;
  for (const AgentConn& a : agents_) {
    if (a.joining) continue;
    ++hosts;
    hellos += a.hello.has_value();
    probed += a.probed;
  }
  const auto& ranks = sup_.result().ranks;
  const size_t started = static_cast<size_t>(
      std::count_if(ranks.begin(), ranks.end(), [](const RankOutcome& r) { return r.started; }));
  // A phase's first line at once, then at most every kProgressEvery (64 hellos within a few
  // milliseconds are one redraw, not 64).
  const int phase = hellos < hosts ? 0 : probed < hosts ? 1 : 2;
  if (phase == startup_line_phase_ && now < startup_line_at_ + ssh::kProgressEvery) return;
  startup_line_phase_ = phase;
  startup_line_at_ = now;
  const char* s = hosts == 1 ? "" : "s";
  std::string text;
  if (phase == 0) {
    text = fmt::format("launch: agents up on {} of {} host{}", hellos, hosts, s);
  } else if (phase == 1) {
    text = fmt::format("launch: network check, {} of {} host{} done", probed, hosts, s);
  } else {
    text = fmt::format("launch: {} of {} rank{} started", started, plan_.ranks.size(),
                       plan_.ranks.size() == 1 ? "" : "s");
  }
  StatusLine::get().set(fmt::format(
      "{} ({:.1f} s)", text, std::chrono::duration<double>(now - *startup_line_since_).count()));
}

}  // namespace hvd::launcher::native
