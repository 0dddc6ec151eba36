// The host agent started by a scheduler instead of over SSH (`hvdrun --agent-connect`, one task
// per node of an `srun` step): it connects back to the launcher over TCP and then speaks
// agent/protocol.h on that connection exactly as `hvdrun --agent` does on its stdin and stdout;
// the connection closing is its dead-man switch.
//
// srun gives every task the same stdin and the same command line, so what a node needs comes
// through the environment, never argv: kAgentConnectVar ("ADDR1,ADDR2 PORT": the launcher's
// addresses to try in order; "srun" stands for SLURM_SRUN_COMM_HOST, the address of the machine
// srun runs on as the nodes reach it, which Slurm sets in each task) and kAgentTokenVar (the
// launch's secret). The first line the agent
// sends is the preamble: "HVDAGENT1 <token> <node>\n", where node is SLURMD_NODENAME (the node
// as the launcher's plan names it), else this host's name. Both variables are removed from the
// agent's environment before any rank starts.
#pragma once

#include <string>
#include <string_view>

namespace hvd::agent {

inline constexpr std::string_view kAgentConnectVar = "HVD_AGENT_CONNECT";
inline constexpr std::string_view kAgentTokenVar = "HVD_AGENT_TOKEN";
inline constexpr std::string_view kAgentPreambleMagic = "HVDAGENT1";
inline constexpr std::string_view kAgentConnectSrunHost = "srun";
inline constexpr std::size_t kMaxPreamble = 512;

std::string agent_preamble(std::string_view token, std::string_view node);

// Runs the connecting agent; returns the process exit code (2 when it cannot connect).
int run_connecting_agent();

}  // namespace hvd::agent
