// The network check before any rank starts (docs/network.md): which host probes which address,
// and the report when a probe fails (or for `hvdrun --check-net`), human and JSON.
//
// Every host probes its successor in a ring over the hosts and rank 0's host (O(n) probes; with
// --check-net-full, every other host), at the address the job will use to reach that host, and
// the launcher's rendezvous server at the address that host was given for it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/probe.h"

namespace hvd::launcher {

inline constexpr int kNetCheckSchemaVersion = 1;

// Where each host is reached, by host index (what the ranks will use).
struct ProbeEndpoints {
  std::vector<std::string> host;                // the host as the user named it
  std::vector<std::string> address;             // where the other hosts reach it
  std::vector<std::string> interface;           // the chosen interface, or empty
  std::vector<int> probe_port;                  // its agent's probe listener
  std::vector<std::string> token;               // its agent's greeting token
  std::vector<std::string> rendezvous_address;  // the launcher as that host reaches it
  int rendezvous_port = 0;
};

struct ProbeRecord {
  int from = 0;         // host index
  int to = -1;          // host index, or kRendezvous
  std::string purpose;  // "ring", "rank0", "ring+rank0", "pair" or "rendezvous"
  std::string address;
  int port = 0;
  bool done = false;
  agent::ProbeStatus status = agent::ProbeStatus::kError;
  double ms = 0;
  std::string detail;

  static constexpr int kRendezvous = -1;
  bool ok() const { return done && status == agent::ProbeStatus::kOk; }
};

struct NetCheck {
  ProbeEndpoints endpoints;
  std::vector<ProbeRecord> probes;  // the record's index is the probe's id on the wire
  bool full = false;

  bool ok() const;
  int failed() const;
  // The targets host `from` connects to.
  std::vector<agent::ProbeTarget> targets_of(int from) const;
  // Files an agent's outcomes; unknown ids or another host's ids are a protocol error.
  void record(int from, const std::vector<agent::ProbeOutcome>& outcomes);
};

// Which probes run (see the file comment). A single host probes only the rendezvous server.
std::vector<ProbeRecord> plan_probes(const ProbeEndpoints& endpoints, bool full);

// What to do about a failed probe.
std::string probe_hint(const NetCheck& check, const ProbeRecord& probe);
// "host B cannot reach host C at 10.0.0.3:4567 (timeout ...)" for the first failure, and a count.
std::string net_failure_message(const NetCheck& check);
// The failed probes as a table (from, to, address:port, result, hint).
std::string format_net_failures(const NetCheck& check);
// `--check-net`: every probe as a from x to matrix, then the failures.
std::string format_net_matrix(const NetCheck& check);
// `--check-net --json` (docs/network.md has the schema).
nlohmann::ordered_json net_json(const NetCheck& check);

}  // namespace hvd::launcher
