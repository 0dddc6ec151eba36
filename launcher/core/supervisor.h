// The core every launcher runs on: one poll() loop over
// - the job's own sources (agents' frame streams, mpirun's pipes), through a Job the launcher
//   implements;
// - the console: rank output tagged `[1,RANK]<stdout>:` (output_router.h), queued and drained
//   when the terminal takes more, with back-pressure on the job while the queue is full;
// - signals: SIGINT, SIGTERM and SIGHUP stop the job gracefully (a second one kills at once);
//   SIGUSR1 and SIGUSR2 go to every rank (Job::forward_signal);
//   SIGCHLD tells the job a child of ours exited;
// - the start-up deadline the job asks for;
// - the stop deadline: once stopping, the job gets the grace period plus kStopMargin to end;
//   then whatever has not ended is abandoned (Job::abandon) and named in the result, so a
//   frozen or cut-off host cannot hang hvdrun;
// and the ranks' outcomes: fail-fast (the first rank that fails stops the job), the first
// host-level failure, and the exit code (docs/exit-codes.md). launch_report.h turns the result
// into the root-cause report and the --json document.
//
// Threading: one thread. Signals are blocked in it for the run (SignalFd) and restored after.
#pragma once

#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/process.h"
#include "launcher/core/launcher.h"
#include "launcher/core/output_router.h"
#include "launcher/plan/plan.h"

namespace hvd::launcher {

using Clock = std::chrono::steady_clock;

enum class StopMode { kTerminate, kKill };

// A launcher's side of the loop.
class Job {
 public:
  virtual ~Job() = default;
  // Appends the fds to poll. `read_output`: false while the console is backed up; then leave out
  // the fds that bring rank output (their data waits in the kernel, which slows the ranks).
  virtual void add_pollfds(std::vector<pollfd>& fds, bool read_output) = 0;
  // The fds added last time, with their revents, in the same order.
  virtual void on_ready(std::span<const pollfd> fds) = 0;
  // A child of this process exited (SIGCHLD): reap what is ours.
  virtual void on_child_exited() = 0;
  // Stop the ranks: kTerminate asks (SIGTERM, then SIGKILL after the grace period), kKill kills.
  virtual void stop(StopMode mode) = 0;
  // SIGUSR1 and SIGUSR2 to hvdrun go to every running rank (as mpirun does) when the job can
  // forward them; else they stop the job as SIGTERM does.
  virtual bool forwards_signals() const { return false; }
  virtual void forward_signal(int /*sig*/) {}
  // Nothing left to wait for: every agent or child is gone and its output read.
  virtual bool done() const = 0;
  // When the job next wants on_deadline() (the start-up deadline, a keepalive; nullopt: no
  // timer now). Asked again after every turn of the loop, also while stopping.
  virtual std::optional<Clock::time_point> deadline() const { return std::nullopt; }
  virtual void on_deadline() {}
  // The stop deadline passed: stop waiting for what has not ended (done() is true afterwards).
  // Returns the hosts given up on, for the report.
  virtual std::vector<std::string> abandon() = 0;
};

// How long after the grace period a stopping job may take to end before it is abandoned: an
// agent answers a terminate within milliseconds, and reports its ranks' ends right after the
// grace period's SIGKILL.
inline constexpr std::chrono::seconds kStopMargin{3};

class Supervisor {
 public:
  Supervisor(const Plan& plan, const LaunchOptions& options, std::string launcher_name);

  // When the current stop gives up on what has not ended (nullopt: not stopping).
  std::optional<Clock::time_point> stop_deadline() const { return stop_deadline_; }

  OutputRouter& output() { return router_; }
  LaunchResult& result() { return result_; }
  bool stopping() const { return stopping_; }
  bool interrupted() const { return result_.interrupted_by != 0; }

  void rank_started(int rank, long pid);
  // Records how the rank ended (its output is flushed first). The first rank that fails while
  // the job is not stopping is the root cause: the job is stopped. `signalled`: it was sent the
  // stop's signal before it ended; a rank that ended on its own while the job was stopping
  // (false) is not counted as stopped by hvdrun.
  void rank_exited(int rank, ExitStatus status, bool signalled);
  // Elastic jobs: records how the rank ended, as rank_exited() does, without stopping the job
  // (the elastic driver decides what a failure means).
  void record_exit(int rank, ExitStatus status, bool signalled);
  // Elastic jobs: a worker started while the job runs, on plan host `host_index`; returns its id
  // (the next one: generation 0's workers are its ranks).
  int add_worker(int host_index, std::string host, int local_rank);
  // Elastic jobs: the job ends because of `rank`'s exit (recorded before); `why` says why this
  // failure ended it when earlier ones did not.
  void fail_rank(int rank, std::string why);
  // The first host-level failure is kept and stops the job; after an interrupt, failures are
  // consequences, not the cause, and only logged.
  void fail(Failure failure);
  // Stops the job (once per mode; kKill after kTerminate escalates).
  void stop(StopMode mode);

  // Runs `job` until it is done and the console has taken every line (unless interrupted and
  // nobody reads). Fills exit_code, the timings and every rank's outcome.
  LaunchResult run(Job& job);

 private:
  void on_signal(Job& job, int sig);
  int exit_code() const;
  int poll_timeout_ms(const Job& job) const;
  void check_stop_deadline(Job& job);
  void check_job_deadline();

  const Plan& plan_;
  OutputRouter router_;
  LaunchResult result_;
  Job* job_ = nullptr;
  bool stopping_ = false;
  bool killing_ = false;
  std::chrono::milliseconds grace_;
  std::optional<Clock::time_point> stop_deadline_;
  std::optional<Clock::time_point> job_deadline_;  // --timeout; reset once reached
  std::chrono::milliseconds job_timeout_{0};
  bool abandoned_ = false;  // the stop deadline passed and the job was abandoned
  int started_ = 0;
  Clock::time_point start_ = Clock::now();
  std::shared_ptr<RunRecord> record_;  // --record: null when none
};

}  // namespace hvd::launcher
