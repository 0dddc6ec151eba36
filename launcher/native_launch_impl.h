// The native launch's event loop (launcher/native_launch.h is the interface): one object per
// run, split over two files: native_launch.cpp (agents, frames, output, signals, the result)
// and native_launch_net.cpp (the hellos, the network check before any rank starts, the specs).
// Internal to hvd_launcher.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "launcher/agent_conn.h"
#include "launcher/job_specs.h"
#include "launcher/native_launch.h"
#include "launcher/net_check.h"
#include "launcher/output_router.h"
#include "launcher/rendezvous_server.h"
#include "worker/protocol.h"

namespace hvd::launcher::native {

using Clock = std::chrono::steady_clock;
using worker::FrameType;

class Launch {
 public:
  Launch(const Plan& plan, const LaunchOptions& options,
         std::vector<std::optional<ssh::RemoteAgent>> remote_agents)
      : remote_agents_(std::move(remote_agents)),
        plan_(plan),
        options_(options),
        router_(options.stdout_to_stderr ? STDERR_FILENO : STDOUT_FILENO, STDERR_FILENO,
                options.output_dir) {}
  LaunchResult run();

 private:
  void on_frame(AgentConn& agent, const worker::Frame& frame);
  void on_hello(AgentConn& agent, const std::string& payload);
  bool choose_addresses();
  void begin_network_check();
  void on_listening(AgentConn& agent, const std::string& payload);
  void on_probe_results(AgentConn& agent, const std::string& payload);
  void send_specs();
  void start_rendezvous();
  void report_shared_machines() const;
  void on_exited(const worker::RankExited& exited);
  void on_agent_log(AgentConn& agent);
  void on_signal();
  void agent_lost(AgentConn& agent);
  void start_timed_out();
  int poll_timeout_ms() const;
  void stop_all(FrameType how);
  bool console_pending() const;
  // Records the first host-level failure (with the exit code it stands for) and stops the job.
  void fail(std::string message, std::string hint, ExitCode code = ExitCode::kInternal);
  bool finished() const;
  int exit_code() const;

  std::vector<std::optional<ssh::RemoteAgent>> remote_agents_;  // moved into agents_ at start
  const Plan& plan_;
  const LaunchOptions& options_;
  OutputRouter router_;
  std::vector<AgentConn> agents_;
  LaunchResult result_;
  UniqueFd signal_fd_;
  bool stopping_ = false;
  bool killing_ = false;
  std::unique_ptr<RendezvousServer> rendezvous_;  // from the network check to the end
  LaunchFacts facts_;                             // known once every agent said hello
  std::vector<worker::JobSpec> specs_;            // by host; final once every listener is up
  NetCheck net_;
  ExitCode error_code_ = ExitCode::kInternal;
  int started_ = 0;
  Clock::time_point start_ = Clock::now();
};

}  // namespace hvd::launcher::native
