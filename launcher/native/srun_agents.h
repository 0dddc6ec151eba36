// Agents through Slurm instead of SSH (`--launcher srun`, the default inside an allocation whose
// hosts hvdrun took from Slurm): one `srun` job step with one task per node runs
// `hvdrun-agent --agent-connect` (or `hvdrun --agent-connect`) there, and each agent connects
// back to the launcher over TCP (agent/agent_connect.h), on a link sealed both ways and
// authenticated by a token that travels in the step's environment (agent/sealed_link.h).
// From then on the native launch runs as over SSH: the hellos, the network check, the
// rendezvous, the specs, the ranks, on the same supervisor.
//
// Why a connection back rather than the step's stdin: srun gives every task the same stdin, and
// each agent needs its own job spec. Why the token: anyone on the network can connect to the
// listener. Why sealed: anyone on the network could read the job spec on the way, or answer an
// agent in the launcher's place. An agent names its node in its hello (connections on one
// machine all come from 127.0.0.1), and each node's address is the NodeAddr Slurm has for it
// (`scontrol`), not a name lookup, since node names need not resolve where the launcher runs.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/process.h"
#include "launcher/core/launcher.h"
#include "launcher/native/agent_conn.h"
#include "launcher/plan/plan.h"

namespace hvd::launcher {

struct SrunAgents {
  Process srun;                   // the step: it runs as long as its agents
  std::vector<AgentConn> agents;  // one per plan host, by host index
};

// The step's command line (the dry run shows it).
std::vector<std::string> srun_agent_argv(const Plan& plan, const LaunchOptions& options);

// The agent the step runs: hvdrun-agent beside hvdrun when it is there (the agent alone, which
// starts in a fraction of hvdrun's time: agent/agent_main.cpp), else hvdrun itself. Like hvdrun,
// it must be at the same path on every node.
std::string srun_agent_program(const std::string& hvdrun_path);

// Connections to the agents' listener still in their handshake, at most: a flood of strangers
// makes room by eviction (common/pending_eviction.h), the oldest without a whole hello first.
inline constexpr std::size_t kSrunMaxPending = 1024;

// Starts the step and waits (at most --start-timeout) until every node's agent has connected.
// Throws RemoteError when srun fails or ends first (with what it said), TimeoutError naming the
// nodes whose agents never connected, LauncherError when the launcher cannot listen.
SrunAgents start_srun_agents(const Plan& plan, const LaunchOptions& options);

// NodeName -> NodeAddr for `nodes`, from one `scontrol -o show node` (empty when it fails).
std::map<std::string, std::string> slurm_node_addresses(const std::vector<std::string>& nodes);
// The same, from scontrol's output (one node a line, `Key=Value` words).
std::map<std::string, std::string> parse_scontrol_nodes(const std::string& text);

}  // namespace hvd::launcher
