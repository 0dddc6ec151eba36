#include "launcher/job_specs.h"

#include <fmt/format.h>

#include "launcher/host_spec.h"
#include "worker/contract/env_table.h"
#include "worker/protocol.h"

namespace hvd::launcher {
worker::JobSpec host_spec(const Plan& plan, int host_index, const LaunchOptions& options,
                          const LaunchFacts& facts) {
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
    const bool chosen = !facts.chosen.empty();
    for (const EnvEntry& e : rank.env) {
      if (!e.deferred) {
        r.env.emplace_back(e.name, e.value);
      } else if (chosen && e.name == contract::kAdvertiseAddr.name) {
        r.env.emplace_back(e.name, facts.chosen[static_cast<size_t>(host_index)].address);
      } else if (chosen && e.name == contract::kMasterAddr.name) {
        r.env.emplace_back(e.name, facts.chosen.front().address);  // rank 0 is on host 0
      } else if (chosen && (e.name == "NCCL_SOCKET_IFNAME" || e.name == "HOROVOD_GLOO_IFACE")) {
        r.env.emplace_back(e.name, facts.chosen[static_cast<size_t>(host_index)].interface);
      } else if (e.name == contract::kMasterPort.name) {
        r.env.emplace_back(e.name, std::to_string(facts.master_port));
      } else if (e.name == contract::kMasterAddr.name || e.name == contract::kAdvertiseAddr.name) {
        const size_t h = e.name == contract::kMasterAddr.name ? 0 : static_cast<size_t>(host_index);
        r.env.emplace_back(e.name, h < facts.reached_at.size() && !facts.reached_at[h].empty()
                                       ? facts.reached_at[h]
                                       : facts.launcher_address);
      } else if (e.name == contract::kRendezvousAddr.name) {
        r.env.emplace_back(e.name,
                           fmt::format("{}:{}", format_host(facts.launcher_address_of[host_index]),
                                       facts.rendezvous_port));
      } else if (e.name == contract::kRendezvousToken.name) {
        r.env.emplace_back(e.name, facts.rendezvous_token);
      }
    }
    spec.ranks.push_back(std::move(r));
  }
  return spec;
}

ProbeEndpoints probe_endpoints(const Plan& plan, const std::vector<worker::JobSpec>& specs,
                               const LaunchFacts& facts, const std::vector<int>& probe_port,
                               const std::vector<std::string>& token) {
  ProbeEndpoints e;
  e.token = token;
  e.rendezvous_port = facts.rendezvous_port;
  e.rendezvous_address = facts.launcher_address_of;
  for (int h = 0; h < static_cast<int>(plan.hosts.size()); ++h) {
    const worker::JobSpec& spec = specs[static_cast<size_t>(h)];
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
