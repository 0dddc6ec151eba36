// The host agent's internals (see agent/agent.h), shared by its source files only:
// agent/agent.cpp (the job's main loop: frames, output, exits, stopping) and
// agent/agent_start.cpp (before the job: the network check and the spec; starting ranks).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "agent/job_spec.h"
#include "agent/probe.h"
#include "agent/protocol.h"
#include "agent/sealed_link.h"
#include "common/error.h"
#include "common/process.h"
#include "common/signal_fd.h"
#include "common/unique_fd.h"

namespace hvd::agent {

constexpr size_t kAgentReadChunk = 64 * 1024;
// The frames the agent has not handed to the launcher yet. Its output is never written with a
// blocking write: a launcher that does not read (frozen, or its console backed up) must not stop
// the agent's loop, which also hears the launcher's pings and runs the dead-man switch. Above
// this much the agent stops reading its ranks' output (they block in their writes: the
// back-pressure), and takes it up again once the launcher has taken the queue below it.
constexpr size_t kAgentQueueCap = 256 * 1024;
// A rank that ended: at most this much of what is left in each of its pipes is read (more than
// a pipe holds; what a descendant that escaped with the pipe writes after is not waited for).
constexpr size_t kAgentLastOutput = 1 << 20;

struct LiveRank {
  int rank = 0;
  Process process;  // reaped by the agent's waitpid(-1) (it is a subreaper), then set_reaped
  bool reported = false;
  bool stopped = false;  // signalled by a job stop while it ran: it did not end on its own
  // Elastic jobs: the agent's end of the rank's channel (the rank has the other on fd 3), and
  // what it wrote after its last newline.
  UniqueFd channel;
  std::string partial;
  // Every rank: its report channel (contract/report.h, the rank's fd 4) and the pipe its
  // faulthandler writes stacks into (fd 5), with what came of each (agent/agent_why.cpp).
  UniqueFd report;
  std::string report_partial;
  UniqueFd stack;
  std::string stack_dump;
  int stack_signal = 0;  // announced by the binding ("stack_handler"); 0: none
  pid_t stack_pid = 0;   // the process that announced it (the rank or one it started)
};

class Agent {
 public:
  Agent(int in_fd, int out_fd) : in_fd_(in_fd), out_fd_(out_fd) {}
  // One socket both ways, sealed (agent/sealed_link.h).
  Agent(int fd, const SealKeys& keys)
      : in_fd_(fd),
        out_fd_(fd),
        sealer_(keys.send),
        opener_(RecordOpener(keys.receive, "the launcher")) {}
  int run();

 private:
  // Queues the frame and writes what the launcher takes now; false once the launcher is gone.
  bool send(FrameType type, std::string_view payload = {});
  void flush_output();
  bool output_backed_up() const { return !launcher_gone_ && out_queue_.size() >= kAgentQueueCap; }
  // Before the agent exits: waits for the launcher to take the queue, while it is there (its
  // input open, not silent past the pings' limit).
  void finish_output();
  // One read of the launcher's frames into `reader_`; false at EOF (or an error).
  bool read_input();
  int run_job();
  bool read_spec();
  bool start_ranks();
  std::optional<std::pair<std::string, std::string>> start_rank(const RankSpec& rank);
  void start_more(const JobSpec& more);
  // kError: the agent gives up on the job. `kind` says whose part failed where that is not the
  // job's (kLauncher: no port of --port-range for hvdrun's probes); the launcher takes only that.
  void error(const std::string& message, const std::string& hint = "",
             ErrorKind kind = ErrorKind::kRemote);
  std::vector<std::string> rank_environment(const RankSpec& rank) const;
  void handle_input();
  void handle_frames();
  void handle_signals();
  void drain(LiveRank& rank, UniqueFd& fd, Stream stream, bool until_eof);
  void read_channel(LiveRank& rank);
  // agent/agent_why.cpp: the report channel's lines, the stack pipe, and kInspect.
  // One read of the rank's report pipe; false when nothing more is there now (or it closed).
  bool read_report(LiveRank& rank);
  void read_stack(LiveRank& rank);
  void inspect(const std::string& payload);
  void announce(const GenerationNotice& notice);
  void reap();
  void report_exits();
  void stop(int signal);
  bool finished() const;
  void arm_timer(int ms);
  std::vector<pid_t> strays() const;  // stray_children() of this agent's running ranks

  int in_fd_;              // borrowed: the agent's stdin (frames from the launcher)
  int out_fd_;             // borrowed: its stdout (frames to the launcher), made non-blocking
  std::string out_queue_;  // encoded frames not written yet (see kAgentQueueCap)
  // A sealed link: frames go into out_queue_ sealed, the input is opened before reader_ sees it.
  std::optional<RecordSealer> sealer_;
  std::optional<RecordOpener> opener_;
  bool seal_refused_ = false;  // a record from the launcher failed: its input is not read again
  JobSpec spec_;
  std::optional<ProbeListener> listener_;  // from kProbeListen until the ranks start
  FrameReader reader_;
  std::vector<LiveRank> ranks_;
  std::optional<SignalFd> signals_;
  UniqueFd timer_fd_;
  bool input_open_ = true;
  bool stopping_ = false;  // SIGTERM sent
  bool killing_ = false;   // SIGKILL sent
  bool launcher_gone_ = false;
  // The agent's side of --keepalive. From its hello on, the launcher pings it three times per
  // --keepalive period, each ping carrying the limit (2 x --keepalive): this long without a byte
  // from the launcher means the launcher or the link is gone although the connection looks open
  // (the launcher frozen, a link cut without a reset). Before the spec the agent then exits;
  // after it, it stops its ranks as when its input closes.
  std::chrono::steady_clock::time_point last_heard_ = std::chrono::steady_clock::now();
  std::chrono::milliseconds silence_limit_{0};  // 0: none (no ping yet, or --keepalive 0)
  // Until the launcher counts as gone, in ms; -1: never; 0: the limit has passed.
  int silence_left_ms() const;
  // The launcher has been silent past the limit and nothing from it waits in the input: pings
  // that came while the agent was blocked writing output (a slow link) count as heard, the
  // limit being on the launcher's silence, not on ours.
  bool launcher_silent() const;
  void on_ping(const std::string& payload);
  // Elastic jobs: a joining host's network check while the job runs (kProbeListen, kProbe,
  // kProbeClose). The probes run on a thread of their own, so that output keeps flowing; its
  // outcomes come back through `probed_` and a byte on the pipe.
  void start_probes(const ProbeRequest& request);
  void finish_probes();
  UniqueFd probe_done_read_, probe_done_write_;
  std::mutex probe_mutex_;
  std::vector<ProbeOutcome> probed_;
  std::jthread prober_;  // last: joined before what it uses is destroyed
};

}  // namespace hvd::agent
