// How the native launcher starts its agents: the one seam where the ways differ. Each way is one
// class implementing AgentLaunch in its own file pair (ssh_launch: one libssh session per remote
// host and a local child for this machine; srun_launch: one Slurm step whose agents connect back;
// and so on), named in the table of agent_launches.cpp, the only file that names them all.
//
// Whatever starts them, the agents end up as AgentConns (agent_conn.h), and from there the
// native job (native_job.h) runs the same way: the hellos, the network check, the rendezvous,
// the specs, the ranks, on the same supervisor. Adding a way: docs/architecture.md, "How to add
// a way of starting agents".
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/signal_fd.h"
#include "launcher/core/launcher.h"
#include "launcher/core/supervisor.h"
#include "launcher/native/agent_conn.h"
#include "launcher/native/agent_starter.h"
#include "launcher/plan/plan.h"
#include "ssh/host_check.h"

namespace hvd::launcher {

// What AgentLaunch::start gives the native job.
struct StartedAgents {
  std::vector<AgentConn> agents;             // one per plan host, by host index
  std::vector<ssh::HostCheck> ssh_failures;  // hosts that failed an SSH stage: nothing runs
  std::vector<std::string> addresses;        // by host, where known: the address reached
  // From the first local agent on, interrupts wait here until the Supervisor reads them (an
  // interrupt between an agent's start and the Supervisor's run would leave that agent behind).
  std::unique_ptr<SignalFd> held_signals;
};

class AgentLaunch {
 public:
  virtual ~AgentLaunch() = default;
  virtual std::string_view name() const = 0;
  // The dry run: what start() would run, one line per command, without touching the network.
  virtual std::vector<LaunchCommand> describe(const Plan& plan) const = 0;
  // The agent command for the result (--json "command").
  virtual std::vector<std::string> command(const Plan& plan) const = 0;
  // Starts every host's agent. Throws hvd::Error when they cannot start (nothing left running);
  // SSH stage failures come back in ssh_failures (each host's stage and code).
  virtual StartedAgents start(const Plan& plan, Clock::time_point began, bool live) = 0;
  // One host's agent while the job runs (an elastic job's joining host), off the loop's thread.
  // `host`: as the discovery listed it. nullptr: this way cannot (elastic is then refused
  // before the launch: AgentLaunchEntry::elastic).
  virtual std::unique_ptr<AgentStarter> start_one(const HostSpec& host, bool local) = 0;
  // After the job and its teardown (srun: the step is given a few seconds to end).
  virtual void finish() {}
};

// The dry run's line for a host that is this machine: every way gives it a local child.
inline LaunchCommand local_agent_command(const HostPlan& host, const std::string& hvdrun_path) {
  return {"on " + host.spec.host + ", as a local child", {hvdrun_path, "--agent"}};
}

// The table of agent launches: the only place that names them all.
struct AgentLaunchEntry {
  std::string_view name;  // --launcher's value
  std::string_view summary;
  bool elastic;  // can start a joining host's agent while the job runs (--min-np)
  std::unique_ptr<AgentLaunch> (*make)(const LaunchOptions& options);
};
std::span<const AgentLaunchEntry> agent_launches();

// The agent launch a launch uses: a way's own option when given (--rsh-agent's command), else
// --launcher's choice; "auto" is srun inside a Slurm allocation whose hosts hvdrun took from Slurm
// (and srun on PATH), else ssh. Throws UsageError for srun outside an allocation.
const AgentLaunchEntry& choose_agent_launch(const LaunchOptions& options, const Plan& plan);

}  // namespace hvd::launcher
