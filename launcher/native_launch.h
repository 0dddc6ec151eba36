// Native launch: one agent per host (today: local hosts, as child processes), the job spec to
// each, rank output tagged on the console, the first failing rank stops the job, Ctrl-C and
// SIGTERM forwarded (twice: kill at once), and an honest result (docs/exit-codes.md).
#pragma once

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "launcher/net_check.h"
#include "launcher/plan.h"
#include "launcher/rendezvous_server.h"
#include "ssh/options.h"
#include "ssh/probe_result.h"
#include "worker/probe.h"

namespace hvd::launcher {

struct LaunchOptions {
  std::string cwd;                                 // absolute; the ranks' working directory
  double grace_seconds = 5.0;                      // SIGTERM -> SIGKILL
  std::chrono::milliseconds start_timeout{30000};  // agents' hello and every rank started
  std::optional<std::string> output_dir;           // --output-filename
  std::string hvdrun_path;                         // the agent binary (this hvdrun)
  ssh::SshOptions ssh;                             // how remote hosts are reached
  bool stdout_to_stderr = false;                   // --json keeps stdout for the result document
  PortRange port_range;                            // --port-range: rendezvous, probes, MASTER_PORT
  bool check_net_only = false;                     // --check-net: probe, then start nothing
  bool check_net_full = false;                     // --check-net-full: probe every pair of hosts
  std::chrono::milliseconds probe_timeout{5000};   // each probe's connect and greeting
};

struct RankOutcome {
  int rank = 0;
  int host_index = 0;
  int local_rank = 0;
  bool started = false;
  long pid = 0;
  bool exited = false;
  bool signaled = false;
  int value = 0;                   // exit code, or signal number
  bool stopped_by_hvdrun = false;  // it ended because hvdrun stopped the job
  std::deque<std::string> last_stderr;

  bool failed() const { return exited && (signaled || value != 0); }
  int exit_code() const { return signaled ? 128 + value : value; }
};

// What a native launch learned about a host once every agent said hello. MPI mode takes it from
// its network check instead of logging in to every host once more.
struct HostFacts {
  std::string address;  // a remote host: the address hvdrun's SSH session connected to
  std::string boot_id;
};

struct LaunchResult {
  std::vector<RankOutcome> ranks;
  std::optional<int> first_failure;  // index into ranks
  std::string error;                 // a host-level failure (could not start, agent died)
  std::string error_hint;
  int interrupted_by = 0;                   // the signal that interrupted hvdrun, or 0
  std::chrono::milliseconds start_time{0};  // until every rank was started
  std::chrono::milliseconds total_time{0};
  std::vector<ssh::ProbeResult> ssh_failures;  // hosts that failed an SSH stage: nothing ran
  bool via_mpirun = false;                     // MPI mode: mpirun stopped the other ranks
  std::optional<RendezvousStats> rendezvous;   // native mode, once the server started
  std::optional<NetCheck> net;                 // native mode, once every agent probed
  std::vector<HostFacts> hosts;                // native mode, by host, once every agent said hello
  int exit_code = 0;
};

// Runs the plan. Throws hvd::Error only for what stops it before anything started (an agent
// that cannot be spawned, bad local SSH input).
LaunchResult run_native(const Plan& plan, const LaunchOptions& options);

}  // namespace hvd::launcher
