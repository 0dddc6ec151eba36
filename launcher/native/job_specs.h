// The job each host's agent gets: the plan's ranks for that host, with the values that only
// exist once the agents said hello (MASTER_PORT, the launcher's address, the rendezvous server).
#pragma once

#include <string>
#include <vector>

#include "agent/job_spec.h"
#include "launcher/core/launcher.h"
#include "launcher/core/net_check.h"
#include "launcher/plan/network_choice.h"
#include "launcher/plan/plan.h"

namespace hvd::launcher {

// Values only known once the agents said hello.
struct LaunchFacts {
  int master_port = 0;                           // free on rank 0's host
  std::string launcher_address;                  // this machine as the remote hosts reach it
  std::vector<std::string> launcher_address_of;  // by host: this machine as that host sees it
  // By host: where the other hosts reach it. A remote host: the address its SSH connection
  // arrived at; empty for a local one, which job_spec_for_host() reads as launcher_address.
  std::vector<std::string> reached_at;
  int rendezvous_port = 0;
  std::string rendezvous_token;
  // --network-cidr / --network-interface: each host's chosen address (by host index), else empty.
  std::vector<HostAddress> chosen;
};

// A deferred value for a rank on host `host_index`, now that the facts are known.
std::string resolve_deferred(Deferred what, int host_index, const LaunchFacts& facts);

// The job spec for one host: its ranks' planned environments, deferred values filled in.
agent::JobSpec job_spec_for_host(const Plan& plan, int host_index, const LaunchOptions& options,
                                 const LaunchFacts& facts);

// Where the network check probes each host (by host index): read back from the specs the ranks
// will get (`specs`, by host index, from job_spec_for_host), so that the probes test exactly the
// addresses the job uses (MASTER_ADDR for rank 0's host, HVD_ADVERTISE_ADDR for the others).
// `probe_port` and `token` are by host index.
ProbeEndpoints probe_endpoints(const Plan& plan, const std::vector<agent::JobSpec>& specs,
                               const LaunchFacts& facts, const std::vector<int>& probe_port,
                               const std::vector<std::string>& token);

}  // namespace hvd::launcher
