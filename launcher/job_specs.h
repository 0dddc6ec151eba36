// The job each host's agent gets: the plan's ranks for that host, with the values that only
// exist once the agents said hello (MASTER_PORT, the launcher's address, the rendezvous server).
#pragma once

#include <string>
#include <vector>

#include "launcher/native_launch.h"
#include "launcher/network_choice.h"
#include "launcher/plan.h"
#include "worker/job_spec.h"

namespace hvd::launcher {

// Values only known once the agents said hello.
struct LaunchFacts {
  int master_port = 0;                           // free on rank 0's host
  std::string launcher_address;                  // this machine as the remote hosts reach it
  std::vector<std::string> launcher_address_of;  // by host: this machine as that host sees it
  int rendezvous_port = 0;
  std::string rendezvous_token;
  // --network-cidr / --network-interface: each host's chosen address (by host index), else empty.
  std::vector<HostAddress> chosen;
};

// The job spec for one host: its ranks' planned environments, deferred values filled in.
worker::JobSpec host_spec(const Plan& plan, int host_index, const LaunchOptions& options,
                          const LaunchFacts& facts);

}  // namespace hvd::launcher
