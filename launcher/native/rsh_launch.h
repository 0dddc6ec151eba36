// Agents started by a command of the user's (--rsh-agent TEMPLATE; Open MPI's plm_rsh_agent),
// for sites where hosts are not reached over SSH:
//
//   --rsh-agent 'kubectl exec -i {host} --'     pods
//   --rsh-agent 'docker exec -i {host}'         containers
//   --rsh-agent 'ip netns exec {host}'          network namespaces
//
// The template is split into words here (quotes honoured; never run through a shell), `{host}`,
// `{user}` and `{port}` are replaced inside words, and a template without `{host}` gets the host
// as its next word, as Open MPI's plm_rsh_agent does; the agent's command (`AGENT --agent`)
// follows as separate words. The job spec goes to the command's stdin, as over SSH, so its
// confidentiality is the command's (kubectl's TLS, a local namespace: docs/security.md). A host
// that is this machine gets a local child, as with SSH.
//
// Where the host's ranks listen, and where they reach the launcher, when the host name is not an
// address (a pod, a namespace): choose_rsh_addresses() below, from the interfaces the agent
// reports in its hello; the network check then proves the choice before any rank starts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/interfaces.h"
#include "launcher/native/agent_launch.h"
#include "launcher/plan/network_choice.h"

namespace hvd::launcher {

std::unique_ptr<AgentLaunch> make_rsh_launch(const LaunchOptions& options);

// The template in words, placeholders still in them. Throws UsageError naming --rsh-agent for
// an empty template, unbalanced quotes, a trailing backslash or an unknown {placeholder}.
struct RshTemplate {
  std::vector<std::string> words;
  bool names_host = false;  // some word has {host}
};
RshTemplate parse_rsh_template(const std::string& text);

// The argv for one host: the template's words with {host}, {user} and {port} replaced (the host
// appended when no word names it), then `agent_path --agent`.
std::vector<std::string> rsh_agent_argv(const RshTemplate& tmpl, const std::string& host,
                                        const std::string& user, int port,
                                        const std::string& agent_path);

// Under `hvdrun --mpi --rsh-agent TEMPLATE`, mpirun's plm_rsh_agent is `hvdrun
// --rsh-agent-shim`, with the template in this variable of mpirun's environment. Open MPI calls
// its agent as `AGENT HOST COMMAND-LINE...`, the command line written for a remote shell (quoted
// words, `;`), so the shim runs the template for HOST (the host appended when it has no {host})
// with `sh -c 'COMMAND-LINE'`: kubectl and docker exec run no shell of their own.
inline constexpr const char* kRshAgentTemplateVar = "HVD_RSH_AGENT_TEMPLATE";
// `hvdrun --rsh-agent-shim HOST COMMAND...`: execs the command above. Returns only on failure:
// 70 with a line on stderr (no template, a bad one), or 127/126 when the command cannot run.
int exec_rsh_agent_shim(const std::vector<std::string>& args);

// An IPv4 network of this machine: one of its interfaces' address and prefix length.
struct OwnNetwork {
  std::string interface;
  std::string address;
  int prefix = 0;
};
std::vector<OwnNetwork> own_networks();  // getifaddrs(): up, IPv4, loopback included

// Where a host's ranks listen (`reached_at`) and where they reach the launcher, in this order:
//   1. --network-cidr / --network-interface: the address they choose on that host;
//      the host name, when it is an IPv4 address;
//      then the launcher's address on a network of ours that holds it (else the launcher's
//      first non-loopback address);
//   2. the agent has exactly this machine's interfaces and addresses (it shares our network
//      namespace: a local container, a fake kubectl): 127.0.0.1 both ways;
//   3. the agent's first IPv4 address (up, not loopback) inside a network of ours, and our
//      address on that network.
// Else throws NetCheckError naming the host, its addresses and ours, and what to do.
AgentAddresses choose_rsh_addresses(const std::string& host,
                                    const std::vector<agent::NetInterface>& agent_interfaces,
                                    const std::vector<agent::NetInterface>& own_interfaces,
                                    const std::vector<OwnNetwork>& own_nets,
                                    const NetworkChoice& choice);

}  // namespace hvd::launcher
