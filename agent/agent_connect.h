// The host agent started by a scheduler instead of over SSH (`hvdrun --agent-connect`, one task
// per node of an `srun` step): it connects back to the launcher over TCP and then speaks
// agent/protocol.h on that connection exactly as `hvdrun --agent` does on its stdin and stdout;
// the connection closing is its dead-man switch.
//
// srun gives every task the same stdin and the same command line, so what a node needs comes
// through the environment, never argv: kAgentConnectVar ("ADDR1,ADDR2 PORT": the launcher's
// addresses to try in order; "srun" stands for SLURM_SRUN_COMM_HOST, the address of the machine
// srun runs on as the nodes reach it, which Slurm sets in each task) and kAgentTokenVar (the
// launch's secret). The connection is sealed (agent/sealed_link.h): the agent opens with the
// exchange's hello, naming its node (SLURMD_NODENAME: the node as the launcher's plan names it,
// else this host's name), and sends nothing more until the launcher has proved the secret; the
// secret itself never crosses the connection. Both variables are removed from the agent's
// environment before any rank starts.
#pragma once

#include <string>
#include <string_view>

namespace hvd::agent {

inline constexpr std::string_view kAgentConnectVar = "HVD_AGENT_CONNECT";
inline constexpr std::string_view kAgentTokenVar = "HVD_AGENT_TOKEN";
inline constexpr std::string_view kAgentConnectSrunHost = "srun";

// Runs the connecting agent; returns the process exit code (2 when it cannot connect).
int run_connecting_agent();

}  // namespace hvd::agent
