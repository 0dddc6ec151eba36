#include "launcher/native/job_specs.h"

#include <fmt/format.h>

#include "agent/protocol.h"
#include "contract/env_table.h"
#include "contract/rendezvous.h"
#include "launcher/plan/host_spec.h"

namespace hvd::launcher {
namespace {

// Where host `h`'s ranks are reached: its chosen address (--network-*), else the address its SSH
// session arrived at, else (a local host) the launcher's address as the others see it.
std::string host_address(const LaunchFacts& facts, size_t h) {
  if (!facts.chosen.empty()) return facts.chosen[h].address;
  if (h < facts.reached_at.size() && !facts.reached_at[h].empty()) return facts.reached_at[h];
  return facts.launcher_address;
}

}  // namespace

std::string resolve_deferred(Deferred what, int host_index, const LaunchFacts& facts) {
  const auto h = static_cast<size_t>(host_index);
  switch (what) {
    case Deferred::kMasterAddr:
      return host_address(facts, 0);  // rank 0 is on host 0
    case Deferred::kMasterPort:
      return std::to_string(facts.master_port);
    case Deferred::kRendezvousAddr:
      return contract::rendezvous::join_address(facts.launcher_address_of[h],
                                                facts.rendezvous_port);
    case Deferred::kRendezvousToken:
      return facts.rendezvous_token;
    case Deferred::kAdvertiseAddr:
      return host_address(facts, h);
    case Deferred::kInterfaceName:
      return facts.chosen.empty() ? std::string() : facts.chosen[h].interface;
  }
  return {};
}

agent::JobSpec job_spec_for_host(const Plan& plan, int host_index, const LaunchOptions& options,
                                 const LaunchFacts& facts) {
  agent::JobSpec spec;
  spec.protocol = agent::kProtocolVersion;
  spec.host = plan.hosts[host_index].spec.host;
  spec.argv = plan.command;
  spec.cwd = options.cwd;
  spec.grace_seconds = options.grace_seconds;
  spec.elastic = plan.elastic;
  for (const RankPlan& rank : plan.ranks) {
    if (rank.host_index != host_index) continue;
    agent::RankSpec r;
    r.rank = rank.topology.rank;
    for (const EnvEntry& e : rank.env) {
      r.env.emplace_back(e.name,
                         e.deferred ? resolve_deferred(*e.deferred, host_index, facts) : e.value);
    }
    spec.ranks.push_back(std::move(r));
  }
  return spec;
}

ProbeEndpoints probe_endpoints(const Plan& plan, const std::vector<agent::JobSpec>& specs,
                               const LaunchFacts& facts, const std::vector<int>& probe_port,
                               const std::vector<std::string>& token) {
  ProbeEndpoints e;
  e.token = token;
  e.rendezvous_port = facts.rendezvous_port;
  e.rendezvous_address = facts.launcher_address_of;
  for (int h = 0; h < static_cast<int>(plan.hosts.size()); ++h) {
    const agent::JobSpec& spec = specs[static_cast<size_t>(h)];
    const std::string_view wanted =
        h == 0 ? contract::kMasterAddr.name : contract::kAdvertiseAddr.name;
    std::string address = plan.hosts[h].spec.host;
    if (!spec.ranks.empty()) {
      for (const auto& [name, value] : spec.ranks.front().env) {
        if (name == wanted) address = value;
      }
    }
    e.host.push_back(plan.hosts[h].spec.host);
    e.address.push_back(address);
    e.interface.push_back(facts.chosen.empty() ? "" : facts.chosen[h].interface);
    e.probe_port.push_back(probe_port[h]);
  }
  return e;
}

}  // namespace hvd::launcher
