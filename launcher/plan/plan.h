// The launch plan: which host runs which rank with which environment. Pure data, no I/O.
//
// `hvdrun --dry-run` prints exactly the Plan that a launch executes. Values that only exist at
// launch time (the rendezvous address, MASTER_PORT, ...) are marked deferred, secrets are marked
// secret; the formatter decides how to show them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/port_range.h"
#include "contract/topology.h"
#include "launcher/plan/env_forwarding.h"
#include "launcher/plan/host_spec.h"
#include "launcher/plan/network_choice.h"

namespace hvd::launcher {

inline constexpr int kDefaultSshPort = 22;

// What this machine calls itself: a host is local only if it is localhost, 127.0.0.1, ::1,
// `hostname`, or exactly one of `addresses` (getifaddrs). Other 127.x addresses are remote.
struct LocalIdentity {
  std::string hostname;
  std::vector<std::string> addresses;
};

bool is_local_host(std::string_view host, const LocalIdentity& self);

// Where the hosts came from (scheduler_hosts.h), as the dry run says it.
struct HostsOrigin {
  std::string kind = "localhost";  // "host_list", "hostfile", "slurm", "pbs", "lsf", ...
  std::string description = "localhost";
  // "discovery": what the script printed for this list (the job's discovery runs compare theirs
  // with it: launcher/plan/discovery.h). Not shown.
  std::string discovery_output{};
};

struct PlanRequest {
  std::vector<HostSpec> hosts;  // empty: localhost with num_proc slots
  HostsOrigin hosts_origin;
  std::optional<int> num_proc;  // default: all slots (1 without hosts)
  bool oversubscribe = false;   // allow num_proc > slots
  std::optional<int> ssh_port;  // -p; a hostfile port= wins for its host
  std::string default_user;     // for hosts without user@ / user=
  std::vector<ForwardSpec> forward;
  // HOROVOD_* knobs from hvdrun's engine flags: set on every rank, over any forwarded value.
  std::vector<std::pair<std::string, std::string>> knobs;
  // --gpus-per-rank N: each rank sees CUDA devices local_rank*N .. local_rank*N+N-1 through
  // CUDA_VISIBLE_DEVICES (native mode).
  std::optional<int> gpus_per_rank;
  NetworkChoice network;  // --network-cidr / --network-interface
  PortRange port_range;   // --port-range (any(): none): HVD_PORT_RANGE for libhvd
  std::vector<std::string> command;
  std::string job_id;
  // Elastic training (--min-np): every rank gets its worker id and a channel to its agent.
  bool elastic = false;
};

enum class EnvSource { kPerRank, kInternal, kInherited, kExplicit, kKnob };

// A value the plan cannot know, only the launch: each is resolved in one switch
// (launcher/native/job_specs.cpp, resolve_deferred), which the compiler checks covers them all.
enum class Deferred {
  kMasterAddr,       // rank 0's host, as the other hosts reach it
  kMasterPort,       // a free port on rank 0's host (its agent's probe port, handed over)
  kRendezvousAddr,   // the launcher's rendezvous server, as this host reaches it
  kRendezvousToken,  // the job's random token
  kAdvertiseAddr,    // this host's address, as the other hosts reach it
  kInterfaceName,    // the interface of this host's chosen address (--network-*)
};

struct EnvEntry {
  std::string name;
  std::string value;  // for a deferred entry: what it will be, in words
  EnvSource source = EnvSource::kInherited;
  std::optional<Deferred> deferred;  // set: only known at launch
  bool secret = false;               // never printed
  bool operator==(const EnvEntry&) const = default;
};

struct HostPlan {
  HostSpec spec;
  bool local = false;
  int ssh_port = kDefaultSshPort;
  std::string ssh_user;
  int first_rank = 0;
  int num_ranks = 0;
};

struct RankPlan {
  int host_index = 0;  // into Plan::hosts
  contract::RankTopology topology;
  std::vector<EnvEntry> env;  // per-rank and internal entries first, then forwarded, by name
};

struct Plan {
  std::vector<HostPlan> hosts;         // only hosts that get at least one rank, in input order
  std::vector<HostSpec> unused_hosts;  // the others (an elastic job may grow onto them)
  HostsOrigin hosts_origin;
  std::vector<RankPlan> ranks;  // in rank order
  std::vector<std::string> command;
  std::string job_id;
  int total_slots = 0;
  std::vector<std::string> warnings;  // things the user should know; the plan is still valid
  std::vector<std::string> notices;   // defaults hvdrun chose that the user may want to change
  // How many of the launcher's variables stay behind (-x '*' forwards them): in the dry run
  // with the notices, and in a launch's --verbose log only, not at every start.
  std::string forwarding_notice;
  NetworkChoice network;  // chosen per host at launch, from the agents' interfaces
  bool elastic = false;   // PlanRequest::elastic
  // PlanRequest::gpus_per_rank: a rank that takes a slot later (elastic) gets its devices from
  // it, not from another rank's CUDA_VISIBLE_DEVICES read back.
  std::optional<int> gpus_per_rank;
};

// Throws UsageError for -np < 1 and for -np above the slots without oversubscribe.
Plan make_plan(const PlanRequest& request, const LocalIdentity& self, const EnvList& launcher_env);

// I/O: gethostname() and getifaddrs() of this machine.
LocalIdentity local_identity();

}  // namespace hvd::launcher
