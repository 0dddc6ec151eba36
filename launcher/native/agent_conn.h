// One host's agent as the native launch's event loop sees it: its transport (a local child or an
// SSH channel: agent_transport.h), the frames read so far, and where it is in the launch.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/interfaces.h"
#include "agent/protocol.h"
#include "launcher/native/agent_transport.h"

namespace hvd::launcher {

// What an agent said in its hello frame.
struct AgentHello {
  int protocol = 0;
  std::string version;
  std::string hostname;
  std::string boot_id;
  std::string ssh_connection;  // "client_ip client_port server_ip server_port", or empty
  std::vector<agent::NetInterface> interfaces;
};

// The hello frame's JSON. Missing or mistyped fields are left at their defaults (protocol 0:
// the version check then names the agent as speaking another protocol).
AgentHello parse_hello(const std::string& payload);

struct AgentConn {
  AgentConn(int host, std::unique_ptr<AgentTransport> t)
      : host_index(host), transport(std::move(t)) {}

  int host_index = 0;
  std::unique_ptr<AgentTransport> transport;
  agent::FrameReader reader;
  std::optional<AgentHello> hello;
  std::string log_partial;
  std::deque<std::string> log_tail;  // its last stderr lines, for "agent missing" messages
  std::optional<int> probe_port;     // its probe listener (rank 0's host: the job's MASTER_PORT)
  bool probed = false;               // its probe results arrived
  bool probe_closed = false;         // it answered kProbeClose
  // What it was asked, so that an answer nobody asked for is refused as out of order.
  bool asked_listen = false;
  bool asked_probe = false;
  bool asked_close = false;
  bool spec_sent = false;
  bool done = false;       // it sent kDone: every rank ended and was reported
  bool eof = false;        // its frame stream ended
  bool gone = false;       // the transport says it is gone for good
  bool abandoned = false;  // given up on: silent past --keepalive, or not ended after a stop
  // Elastic jobs: started while the job ran (a host that joins: no network check, its first
  // workers come in its kSpec), and told to end because its host left the job.
  bool joining = false;
  bool retired = false;
  // The keepalive (once its job spec is sent): when bytes last came from it, when to ping it.
  std::chrono::steady_clock::time_point last_heard;
  std::chrono::steady_clock::time_point next_ping;

  void check_gone() { gone = gone || transport->gone(eof); }
};

}  // namespace hvd::launcher
