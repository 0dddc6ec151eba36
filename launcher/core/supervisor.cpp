#include "launcher/core/supervisor.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/signal_fd.h"
#include "launcher/core/launch_report.h"
#include "launcher/core/run_record.h"
#include "launcher/core/status_line.h"

namespace hvd::launcher {

Supervisor::Supervisor(const Plan& plan, const LaunchOptions& options, std::string launcher_name)
    : plan_(plan),
      router_(options.stdout_to_stderr ? STDERR_FILENO : STDOUT_FILENO, STDERR_FILENO,
              options.output_dir, options.line_format, options.output_subdir),
      grace_(static_cast<long>(options.grace_seconds * 1000)),
      record_(options.record) {
  if (options.job_timeout.count() > 0) {
    job_timeout_ = options.job_timeout;
    job_deadline_ = start_ + options.job_timeout;
  }
  result_.launcher = std::move(launcher_name);
  for (const RankPlan& r : plan.ranks) {
    RankOutcome o;
    o.rank = r.topology.rank;
    o.host_index = r.host_index;
    o.host = plan.hosts[static_cast<size_t>(r.host_index)].spec.host;
    o.local_rank = r.topology.local_rank;
    result_.ranks.push_back(o);
  }
}

void Supervisor::rank_started(int rank, long pid) {
  if (rank < 0 || rank >= static_cast<int>(result_.ranks.size())) return;
  RankOutcome& r = result_.ranks[static_cast<size_t>(rank)];
  if (r.started) return;
  r.started = true;
  r.pid = pid;
  router_.open_files(rank);  // --output-filename: both files, also for a rank that never writes
  if (record_) {
    record_->event(
        "rank_started",
        {{"attempt", record_->attempt()}, {"rank", rank}, {"host", r.host}, {"pid", pid}});
  }
  if (++started_ == static_cast<int>(result_.ranks.size()) && !result_.start_time) {
    result_.start_time =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  }
}

int Supervisor::add_worker(int host_index, std::string host, int local_rank) {
  RankOutcome o;
  o.rank = static_cast<int>(result_.ranks.size());
  o.host_index = host_index;
  o.host = std::move(host);
  o.local_rank = local_rank;
  result_.ranks.push_back(o);
  return o.rank;
}

void Supervisor::record_exit(int rank, ExitStatus status, bool signalled) {
  if (rank < 0 || rank >= static_cast<int>(result_.ranks.size())) return;
  RankOutcome& r = result_.ranks[static_cast<size_t>(rank)];
  router_.flush(rank);
  r.exited = true;
  r.signaled = status.signaled;
  r.value = status.value;
  r.last_stderr = router_.last_stderr(rank);
  if (stopping_) r.stopped_by_hvdrun = signalled;
  if (record_) {
    record_->event("rank_exited",
                   {{"attempt", record_->attempt()},
                    {"rank", rank},
                    {"host", r.host},
                    {"exit_code", r.signaled ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(r.value)},
                    {"signal", r.signaled ? nlohmann::ordered_json(signal_name(r.value))
                                          : nlohmann::ordered_json(nullptr)},
                    {"stopped_by_hvdrun", r.stopped_by_hvdrun}});
  }
}

void Supervisor::rank_exited(int rank, ExitStatus status, bool signalled) {
  if (rank < 0 || rank >= static_cast<int>(result_.ranks.size())) return;
  record_exit(rank, status, signalled);
  if (!stopping_ && result_.ranks[static_cast<size_t>(rank)].failed()) {
    result_.first_failure = rank;
    stop(StopMode::kTerminate);
  }
}

void Supervisor::fail_rank(int rank, std::string why) {
  if (rank < 0 || rank >= static_cast<int>(result_.ranks.size()) || stopping_) return;
  result_.first_failure = rank;
  result_.elastic_end = std::move(why);
  stop(StopMode::kTerminate);
}

void Supervisor::fail(Failure failure) {
  if (interrupted()) {
    spdlog::debug("after the interrupt: {}", failure.message);
  } else if (!result_.error) {
    if (record_) {
      record_->event("failure", {{"attempt", record_->attempt()},
                                 {"kind", kind_name(failure.kind)},
                                 {"message", failure.message}});
    }
    result_.error = std::move(failure);
  }
  stop(StopMode::kTerminate);
}

void Supervisor::stop(StopMode mode) {
  if (mode == StopMode::kTerminate && stopping_) return;
  if (mode == StopMode::kKill && killing_) return;
  if (!stopping_) spdlog::debug("phase: stopping");
  stopping_ = true;
  killing_ |= mode == StopMode::kKill;
  if (!stop_deadline_) stop_deadline_ = Clock::now() + grace_ + kStopMargin;
  if (job_ != nullptr) job_->stop(mode);
}

void Supervisor::on_signal(Job& job, int sig) {
  if (sig == SIGCHLD) {
    job.on_child_exited();
  } else if ((sig == SIGUSR1 || sig == SIGUSR2) && job.forwards_signals()) {
    if (!stopping_) {
      spdlog::info("{}: forwarded to every rank", sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
      job.forward_signal(sig);
    }
  } else if (!interrupted()) {
    result_.interrupted_by = sig;
    spdlog::warn("{}: stopping all ranks (again to kill them at once)", strsignal(sig));
    stop(StopMode::kTerminate);
  } else {
    spdlog::warn("{} again: killing all ranks now", strsignal(sig));
    stop(StopMode::kKill);
  }
}

// --timeout reached: the job is stopped as after a failure, with its own code, and the report
// names every rank still running with its last line.
void Supervisor::check_job_deadline() {
  if (!job_deadline_ || stopping_ || Clock::now() < *job_deadline_) return;
  job_deadline_.reset();
  std::string running;
  for (const RankOutcome& r : result_.ranks) {
    if (r.exited) continue;
    const std::string line = router_.last_line(r.rank);
    running += fmt::format("\n  rank {} (host {}): {}", r.rank, r.host,
                           line.empty() ? "no output yet" : "last line: " + line);
  }
  fail(Failure{ErrorKind::kJobTimeout,
               fmt::format("the job ran past --timeout {:g} s and was stopped; still running:{}",
                           std::chrono::duration<double>(job_timeout_).count(), running),
               "raise --timeout, or find what the ranks above were waiting for (their last "
               "lines)"});
}

int Supervisor::poll_timeout_ms(const Job& job) const {
  std::optional<Clock::time_point> deadline = job.deadline();
  if (job_deadline_ && !stopping_ && (!deadline || *job_deadline_ < *deadline)) {
    deadline = job_deadline_;
  }
  if (stop_deadline_ && !abandoned_ && (!deadline || *stop_deadline_ < *deadline)) {
    deadline = stop_deadline_;
  }
  if (!deadline) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
  return static_cast<int>(std::max<long>(0, left.count()));
}

void Supervisor::check_stop_deadline(Job& job) {
  if (!stop_deadline_ || abandoned_ || Clock::now() < *stop_deadline_ || job.done()) return;
  abandoned_ = true;
  const double waited = std::chrono::duration<double>(grace_ + kStopMargin).count();
  for (std::string& host : job.abandon()) {
    spdlog::warn(
        "gave up on the agent on {}: it did not end within {:.0f} s of the stop (the "
        "grace period and {} s); its link is closed, so its ranks stop when it runs again",
        host, waited, kStopMargin.count());
    result_.abandoned.push_back(std::move(host));
  }
}

int Supervisor::exit_code() const {
  if (result_.first_failure) return result_.ranks[*result_.first_failure].exit_code();
  if (result_.error) return to_int(exit_code_of(result_.error->kind));
  if (result_.interrupted_by != 0) return 128 + result_.interrupted_by;
  return 0;
}

LaunchResult Supervisor::run(Job& job) {
  job_ = &job;
  // A peer that is gone (an agent's closed pipe, a closed stdout) must be an error the code
  // sees, not a SIGPIPE that kills hvdrun.
  ::signal(SIGPIPE, SIG_IGN);
  SignalFd signals{SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
  if (stopping_) job.stop(killing_ ? StopMode::kKill : StopMode::kTerminate);  // before the loop
  auto console_pending = [&] {
    return router_.pending(STDOUT_FILENO) || router_.pending(STDERR_FILENO);
  };
  // Every line reaches the console, unless the user interrupted and nobody reads it.
  while (!job.done() || (console_pending() && !interrupted())) {
    // Interrupted with a full queue nobody reads: drop console output so that the job's own
    // messages (and the ranks' exits) keep flowing.
    if (interrupted() && router_.queued_bytes() > kMaxQueuedBytes) router_.abandon_console();
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      fds.push_back({router_.pending(fd) ? fd : -1, POLLOUT, 0});
    }
    const size_t first_job_fd = fds.size();
    job.add_pollfds(fds, router_.queued_bytes() <= kMaxQueuedBytes);
    const int timeout = poll_timeout_ms(job);
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (const auto due = job.deadline(); due && Clock::now() >= *due) job.on_deadline();
    check_job_deadline();
    check_stop_deadline(job);
    if (fds[0].revents != 0) {
      while (const std::optional<int> sig = signals.next()) on_signal(job, *sig);
    }
    for (size_t i = 1; i < first_job_fd; ++i) {
      if (fds[i].revents != 0) router_.drain(fds[i].fd);
    }
    job.on_ready(std::span<const pollfd>(fds).subspan(first_job_fd));
    router_.refresh_status();
  }
  StatusLine::get().set("");  // the job is over: the terminal is the shell's again
  job_ = nullptr;
  result_.total_time = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  result_.exit_code = exit_code();
  return std::move(result_);
}

}  // namespace hvd::launcher
