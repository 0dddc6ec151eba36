// Hosts that join an elastic job while it runs (docs/elastic.md, "The host discovery script"):
// the discovery script's runs, the agents started on new hosts off the loop (agent_starter.h)
// and admitted between two turns of it, and each joiner's network check before the driver may
// use its slots. The rest of an elastic job's side of NativeJob is native_job_elastic.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/probe.h"
#include "contract/env_table.h"
#include "launcher/core/net_check.h"
#include "launcher/native/native_job.h"
#include "launcher/native/rendezvous_server.h"

namespace hvd::launcher::native {

HostSpec NativeJob::listed_host(const std::string& host) const {
  if (const auto it = listed_.find(host); it != listed_.end()) return it->second;
  HostSpec spec;
  spec.host = host;
  return spec;
}

// At most --ssh-concurrency agents start at once (each an SSH login off the loop): a discovery
// that lists hundreds of new hosts must not open hundreds of logins and thousands of
// descriptors at one time. The others wait their turn in join_waiting_ (admit_agents()).
void NativeJob::start_agent(const std::string& host) {
  if (starters_.size() >= static_cast<size_t>(std::max(1, options_.ssh.concurrency))) {
    join_waiting_.push_back(host);
    return;
  }
  const HostSpec spec = listed_host(host);
  const bool local = is_local_host(host, local_identity());
  spdlog::info("elastic: starting an agent on {}", host);
  try {
    std::unique_ptr<AgentStarter> starter = launch_.start_one(spec, local);
    if (!starter) throw LauncherError("this agent launch cannot start a host's agent mid-job");
    starters_.push_back(std::move(starter));
  } catch (const Error& e) {
    apply(elastic_->on_join_failed(host, e.what(), Clock::now()));
  }
}

// Agents whose start finished: a new AgentConn each (its hello follows), or the host charged.
void NativeJob::admit_agents() {
  std::vector<std::unique_ptr<AgentStarter>> ready;
  for (auto it = starters_.begin(); it != starters_.end();) {
    if ((*it)->ready()) {
      ready.push_back(std::move(*it));
      it = starters_.erase(it);
    } else {
      ++it;
    }
  }
  // Logins that waited for a free place; a host the job no longer wants (it left the list, or
  // the job ends) is skipped.
  while (!join_waiting_.empty() &&
         starters_.size() < static_cast<size_t>(std::max(1, options_.ssh.concurrency))) {
    const std::string host = join_waiting_.front();
    join_waiting_.pop_front();
    if (elastic_running() && elastic_->joining(host)) start_agent(host);
  }
  for (const auto& starter : ready) {
    const std::string host = starter->host();
    AgentStarter::Result r = starter->take();
    if (!r.transport) {
      if (elastic_running()) apply(elastic_->on_join_failed(host, r.error, Clock::now()));
      continue;
    }
    HostPlan plan_host;
    plan_host.spec = listed_host(host);
    plan_host.local = !r.transport->remote();
    hosts_.push_back(plan_host);
    specs_.resize(std::max(specs_.size(), hosts_.size()));
    AgentConn& a =
        agents_.emplace_back(static_cast<int>(hosts_.size() - 1), std::move(r.transport));
    a.joining = true;
    a.last_heard = Clock::now();  // its hello is due within --start-timeout
  }
}

// A joining host's agent said hello (version checked): its slots are usable.
void NativeJob::on_joiner_hello(AgentConn& agent) {
  const std::string& host = host_of(agent);
  try {
    learn_addresses(agent);
  } catch (const Error& e) {
    joiner_lost(agent, e.what());
    return;
  }
  if (!elastic_running() || !elastic_->joining(host)) {  // the job moved on without it
    agent.retired = true;
    agent.transport->close_input();
    return;
  }
  spdlog::info("elastic: the agent on {} is up; checking its network", host);
  join_queue_.push_back(static_cast<size_t>(&agent - agents_.data()));
  next_join_check();
}

// Where the other hosts reach host `h`'s ranks: where its SSH session arrived, else this
// machine as the others see it.
std::string NativeJob::address_of(int host_index) const {
  const auto h = static_cast<size_t>(host_index);
  if (h < specs_.size() && !specs_[h].ranks.empty()) {
    const std::string advertise =
        spec_value(specs_[h].ranks.front(), contract::kAdvertiseAddr.name);
    if (!advertise.empty()) return advertise;
  }
  if (h < facts_.reached_at.size() && !facts_.reached_at[h].empty()) return facts_.reached_at[h];
  return facts_.launcher_address.empty() ? "127.0.0.1" : facts_.launcher_address;
}

void NativeJob::next_join_check() {
  while (!join_check_ && !join_queue_.empty()) {
    const size_t joiner = join_queue_.front();
    join_queue_.pop_front();
    AgentConn& j = agents_[joiner];
    if (j.eof || j.retired || !elastic_running() || !elastic_->joining(host_of(j))) continue;
    JoinCheck check;
    check.joiner = joiner;
    for (size_t i = 0; i < agents_.size(); ++i) {
      const AgentConn& a = agents_[i];
      if (i != joiner && a.hello && a.spec_sent && !a.eof && !a.retired) check.agents.push_back(i);
    }
    check.agents.push_back(joiner);
    check.deadline = Clock::now() + options_.start_timeout;
    check.net.endpoints.token.resize(check.agents.size());
    for (size_t k = 0; k < check.agents.size(); ++k) {
      AgentConn& a = agents_[check.agents[k]];
      check.net.endpoints.token[k] = random_token().substr(0, 32);
      a.asked_listen = true;
      a.probe_port.reset();
      send(a, FrameType::kProbeListen,
           agent::encode_probe_listen({options_.port_range, check.net.endpoints.token[k]}));
      check.waiting.insert(check.agents[k]);
    }
    join_check_ = std::move(check);
  }
}

void NativeJob::on_join_listening(AgentConn& agent, const std::string& payload) {
  agent.probe_port = agent::decode_listening(payload);
  const size_t index = static_cast<size_t>(&agent - agents_.data());
  if (!join_check_ || join_check_->probing || join_check_->waiting.erase(index) == 0) return;
  JoinCheck& c = *join_check_;
  if (!c.waiting.empty()) return;
  // Every listener is up: the joiner probes each running host and the rendezvous server, each
  // running host probes the joiner.
  ProbeEndpoints& e = c.net.endpoints;
  const size_t n = c.agents.size() - 1;  // the joiner's position
  for (size_t k = 0; k < c.agents.size(); ++k) {
    const AgentConn& a = agents_[c.agents[k]];
    e.host.push_back(host_of(a));
    e.address.push_back(address_of(a.host_index));
    e.interface.push_back("");
    e.probe_port.push_back(*a.probe_port);
    e.rendezvous_address.push_back(
        static_cast<size_t>(a.host_index) < facts_.launcher_address_of.size()
            ? facts_.launcher_address_of[static_cast<size_t>(a.host_index)]
            : "127.0.0.1");
  }
  e.rendezvous_port = facts_.rendezvous_port;
  const auto add = [&](size_t from, int to, const char* purpose) {
    ProbeRecord p;
    p.from = static_cast<int>(from);
    p.to = to;
    p.purpose = purpose;
    p.address = to == ProbeRecord::kRendezvous ? e.rendezvous_address[from]
                                               : e.address[static_cast<size_t>(to)];
    p.port =
        to == ProbeRecord::kRendezvous ? e.rendezvous_port : e.probe_port[static_cast<size_t>(to)];
    c.net.probes.push_back(p);
  };
  for (size_t k = 0; k < n; ++k) {
    add(n, static_cast<int>(k), "join");
    add(k, static_cast<int>(n), "join");
  }
  add(n, ProbeRecord::kRendezvous, "rendezvous");
  c.probing = true;
  for (size_t k = 0; k < c.agents.size(); ++k) {
    AgentConn& a = agents_[c.agents[k]];
    a.asked_probe = true;
    a.probed = false;
    send(a, FrameType::kProbe,
         agent::encode_probe_request({c.net.targets_of(static_cast<int>(k)),
                                      static_cast<int>(options_.probe_timeout.count())}));
    c.waiting.insert(c.agents[k]);
  }
}

void NativeJob::on_join_probe_results(AgentConn& agent, const std::string& payload) {
  agent.probed = true;
  const size_t index = static_cast<size_t>(&agent - agents_.data());
  if (!join_check_ || !join_check_->probing) return;
  JoinCheck& c = *join_check_;
  const auto at = std::find(c.agents.begin(), c.agents.end(), index);
  if (at == c.agents.end() || c.waiting.erase(index) == 0) return;
  c.net.record(static_cast<int>(at - c.agents.begin()), agent::decode_probe_results(payload));
  if (!c.waiting.empty()) return;
  end_join_check(c.net.ok() ? std::nullopt
                            : std::optional<std::string>(fmt::format("the network check failed: {}",
                                                                     net_failure_message(c.net))));
}

// The check is over (`failure`: why the joiner is not admitted); the running agents close their
// listeners, and the next joiner's check starts.
void NativeJob::end_join_check(const std::optional<std::string>& failure) {
  JoinCheck c = std::move(*join_check_);
  join_check_.reset();
  for (size_t i : c.agents) {
    AgentConn& a = agents_[i];
    if (i == c.joiner || a.eof || a.retired) continue;
    a.asked_close = true;
    a.probe_closed = false;
    send(a, FrameType::kProbeClose);
  }
  AgentConn& joiner = agents_[c.joiner];
  if (failure) {
    joiner_lost(joiner, *failure);
  } else if (elastic_running() && !joiner.eof && !joiner.retired) {
    spdlog::info("elastic: {} passed the network check ({} probes)", host_of(joiner),
                 c.net.probes.size());
    apply(elastic_->on_agent_ready(host_of(joiner), Clock::now()));
  }
  next_join_check();
}

void NativeJob::joiner_lost(AgentConn& agent, const std::string& why) {
  agent.retired = true;
  if (!agent.eof) agent.transport->close_input();
  if (elastic_running()) apply(elastic_->on_join_failed(host_of(agent), why, Clock::now()));
}

void NativeJob::discovery_turn(Clock::time_point now) {
  if (!discovery_ || !elastic_running()) return;
  if (!discovery_->running() && now >= next_discovery_) discovery_->start(now);
  const auto outcome = discovery_->finish(now);
  if (!outcome) return;
  next_discovery_ = now + options_.elastic->discovery_interval();
  if (outcome->unchanged) return;  // what the driver has: the cost follows changes only
  if (!outcome->hosts) {
    spdlog::warn("elastic: {}; keeping the last list", outcome->error);
    return;
  }
  // The hosts as this list gives them, and those whose agent still runs (a host that left, its
  // agent not ended yet): nothing else, so that hosts that come and go are not kept for ever.
  std::map<std::string, HostSpec> listed;
  std::vector<PoolHost> pool;
  for (const HostSpec& h : *outcome->hosts) {
    pool.push_back({h.host, h.slots});
    listed[h.host] = h;
  }
  for (const AgentConn& a : agents_) {
    const std::string& host = host_of(a);
    if (a.eof || listed.count(host) != 0) continue;
    if (const auto it = listed_.find(host); it != listed_.end()) listed.emplace(*it);
  }
  listed_ = std::move(listed);
  apply(elastic_->on_discovered(pool, now));
}

}  // namespace hvd::launcher::native
