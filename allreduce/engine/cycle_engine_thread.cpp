// CycleEngine's background thread (cycle_engine.h): sleeps until a batch is due, a signal from
// another rank (a doorbell, a keepalive, a fatal error), a cycle nobody else polls, a stall check
// or a liveness check; says goodbye at shutdown.
#include <poll.h>
#include <pthread.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "allreduce/api/log.h"
#include "allreduce/engine/cycle_engine.h"
#include "common/signal_fd.h"
#include "contract/report.h"

namespace hvd::runtime {

void CycleEngine::run_thread() {
  block_sigpipe_for_this_thread();
  ::pthread_setname_np(::pthread_self(), contract::kEngineThreadName);  // for the agent
  try {
    while (run_once()) {
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    end_cycles(fmt::format("the engine's thread failed: {}", e.what()), HVD_ERR_BACKEND);
  } catch (...) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    end_cycles("the engine's thread failed", HVD_ERR_BACKEND);
  }
}

bool CycleEngine::run_once() {
  // Sleep until a submission is due, a signal from another rank, the time to poll a cycle
  // nobody else moves on, or a stall check.
  std::vector<pollfd> fds{{wakeup_.fd(), POLLIN, 0}, {wakeup_.timer_fd(), POLLIN, 0}};
  std::vector<int> ranks{-1, -1};
  control_.watch(fds, ranks);
  std::optional<Clock::time_point> wake_at;
  std::optional<Clock::time_point> liveness;  // when the liveness check is due
  const bool drive = driving_.load() && waiters_.load() == 0;
  if (drive) wake_at = Clock::now() + nap_;
  {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    if (root()) {
      // The stall inspector's next turn. A cycle that adds the first pending tensor (or an
      // earlier deadline) wakes this thread to look again (decide()).
      stall_armed_ = ended_ ? std::nullopt : controller_.next_stall_check();
      if (stall_armed_ && (!wake_at || *stall_armed_ < *wake_at)) wake_at = stall_armed_;
      // A cycle some rank never joins (check_stalls): looked at every half warning period.
      const auto warning = options_.controller.stall_warning;
      if (!ended_ && warning.count() > 0) {
        const auto look = Clock::now() + warning / 2;
        if (!wake_at || look < *wake_at) wake_at = look;
      }
    }
    liveness = liveness_due(Clock::now());
    if (liveness && (!wake_at || *liveness < *wake_at)) wake_at = liveness;
  }
  if (!poll_until(fds, wake_at)) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    end_cycles(fmt::format("the engine's poll() failed: {}", std::strerror(errno)),
               HVD_ERR_BACKEND);
    return false;
  }
  if (fds[0].revents != 0) wakeup_.drain();
  if (fds[1].revents != 0) {
    wakeup_.drain_timer();
    std::lock_guard<std::mutex> lock(ops_mutex_);
    if (batch_.fired()) due_ = true;
  }
  for (std::size_t i = 2; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_signals(ranks[i]);
  }
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    stopping = stopping_;
  }
  if (stopping) {
    say_goodbye();
    return false;
  }
  const auto now = Clock::now();
  if (waiters_.load() == 0) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    Step s;
    while ((s = step(now, false)) == Step::kDone) {
    }
    nap_ = s == Step::kWaiting && drive ? std::min(nap_ * 2, kMaxNap) : kFirstNap;
  }
  if (root()) check_stalls(now);
  if (liveness && now >= *liveness) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    if (!ended_) check_liveness(now);
  }
  return true;
}

// As the TCP engine: rank 0 tells the ranks it is alive while tensors wait for some rank, and a
// rank waiting on announced ops without a word from rank 0 (a signal or a completed cycle) for
// EngineOptions::coordinator_timeout fails them with HVD_ERR_PEER_LOST. Under drive_mutex_, so a
// collective that runs long holds the check back until it ended.
std::optional<Clock::time_point> CycleEngine::liveness_due(Clock::time_point now) {
  if (ended_) return std::nullopt;
  if (root()) {
    if (!controller_.waiting()) return std::nullopt;
    return std::max(now, last_sent_ + kCoordinatorKeepalive);
  }
  if (options_.coordinator_timeout.count() == 0) return std::nullopt;
  const Clock::time_point next_look = now + kCoordinatorKeepalive;
  return waiting_ ? std::min(next_look, last_heard_ + options_.coordinator_timeout) : next_look;
}

void CycleEngine::check_liveness(Clock::time_point now) {
  if (root()) {
    const std::string keepalive = encode(doorbell_signal(0));
    for (int r = 1; r < options_.size; ++r) control_.send(r, keepalive);
    last_sent_ = now;
    return;
  }
  std::string waiting_on;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    for (const auto& [name, entry] : ops_) {
      if (entry.announced) {
        waiting_on = name;
        break;
      }
    }
  }
  if (waiting_on.empty()) {
    waiting_ = false;
  } else if (!waiting_) {  // the wait starts now
    waiting_ = true;
    last_heard_ = now;
  } else if (now - last_heard_ >= options_.coordinator_timeout) {
    end_cycles(coordinator_silence(now - last_heard_, waiting_on), HVD_ERR_PEER_LOST);
  }
}

void CycleEngine::read_signals(int from) {
  auto messages = control_.receive(from);
  std::lock_guard<std::mutex> lock(drive_mutex_);
  if (!messages) {
    control_.close(from);
    // A rank that said goodbye leaves once its goodbye cycle completed there, which may be
    // before this rank has seen the same cycle complete: finish it first (the collective is
    // complete, its bytes in flight), then judge.
    const auto limit = Clock::now() + std::chrono::seconds(2);
    while (posted_ && !ended_ && Clock::now() < limit && !progress(Clock::now())) {
      std::this_thread::sleep_for(kFirstNap);
    }
    if (ended_) return;  // after the cycles ended, ranks leave as they please
    if (root()) {
      const std::string why = fmt::format(
          "rank {} left the job without calling hvd::shutdown() (its control connection "
          "closed): it probably crashed or was killed",
          from);
      tell_ranks(why, HVD_ERR_PEER_LOST);
      end_cycles(why, HVD_ERR_PEER_LOST);
    } else {
      end_cycles(
          "rank 0 (the coordinator) is gone: its control connection closed (it exited, crashed, "
          "was killed or called hvd::shutdown())",
          HVD_ERR_PEER_LOST);
    }
    return;
  }
  if (from == 0) last_heard_ = Clock::now();  // a keepalive, a doorbell or an error: alive
  if (root()) last_seen_[static_cast<std::size_t>(from)] = Clock::now();
  for (const std::string& m : *messages) {
    CycleSignal signal;
    try {
      signal = decode_signal(m);
    } catch (const std::exception& e) {
      end_cycles(fmt::format("rank {} sent a message this rank cannot read on the engine's "
                             "control plane ({}); do all ranks run the same libhvd version?",
                             from, e.what()),
                 HVD_ERR_BACKEND);
      return;
    }
    if (!signal.fatal.empty()) {
      end_cycles(signal.fatal, signal.fatal_status);
      return;
    }
    on_doorbell(from, signal.doorbell);
    // Rank 0 rang: say this rank's engine is alive (rank 0 names the ranks that do not answer).
    if (!root() && signal.doorbell != 0) control_.send(0, encode(doorbell_signal(0)));
  }
}

void CycleEngine::on_doorbell(int from, std::uint64_t cycle) {
  if (cycle <= cycle_) return;  // that cycle completed here already
  doorbell_ = std::max(doorbell_, cycle);
  if (root() && relayed_ < cycle) {  // rank 0 passes it on to every other rank
    relayed_ = cycle;
    rung_for_ = cycle;
    rung_at_ = Clock::now();
    last_seen_[static_cast<std::size_t>(from)] = rung_at_;  // the ringer is alive
    const std::string bytes = encode(doorbell_signal(cycle));
    for (int r = 1; r < options_.size; ++r) {
      if (r != from) control_.send(r, bytes);
    }
  }
}

void CycleEngine::check_stalls(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(drive_mutex_);
  if (ended_) return;
  std::string fatal;
  hvd_status status = HVD_ERR_BACKEND;
  if (const auto due = controller_.next_stall_check(); due && now >= *due) {
    for (const std::string& warning : controller_.check_stalls(now)) logger().warn("{}", warning);
    ResponseList list = controller_.take();  // responses come only from cycles: a fatal or none
    fatal = list.fatal;
    status = list.fatal_status;
  }
  // A cycle rank 0 brought new tensors to (or joined when rung) that some rank never joins: the
  // Controller cannot know of it (it hears of a cycle once it completed), and a live rank joins
  // within a doorbell. A frozen process (stopped, in a debugger) or a stalled host is left.
  const auto warning = options_.controller.stall_warning;
  const auto shutdown = options_.controller.stall_shutdown;
  if (fatal.empty() && posted_ && !parked_ && warning.count() > 0) {
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - posted_at_);
    const std::string brought =
        posted_first_.empty() ? std::string() : fmt::format(" (it brought '{}')", posted_first_);
    // Who did not answer this cycle's doorbell: their engines are not running (a live rank's
    // background thread answers at once, whatever its program does).
    std::vector<int> silent;
    if (rung_for_ == cycle_ + 1) {
      for (int r = 1; r < options_.size; ++r) {
        if (last_seen_[static_cast<std::size_t>(r)] < rung_at_) silent.push_back(r);
      }
    }
    const std::string who =
        silent.empty()
            ? std::string("some rank has not joined it although rung")
            : fmt::format("rank(s) {} did not answer its doorbell", fmt::join(silent, ", "));
    // The launcher's verdict (ControllerOptions::on_stall): the silent ranks, as global ranks.
    auto report_silent = [&](bool shutting_down) {
      if (!options_.controller.on_stall || silent.empty()) return;
      StalledTensor t;
      t.cycle = true;
      t.name = posted_first_;
      t.waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - posted_at_);
      for (int r = 0; r < options_.size; ++r) {
        if (std::find(silent.begin(), silent.end(), r) == silent.end()) {
          t.waiting.push_back(controller_.global_rank(r));
        } else {
          t.missing.push_back({controller_.global_rank(r), {}});
        }
      }
      StallReport report{options_.controller.set_id, options_.controller.set_label, {}};
      report.tensors.push_back(std::move(t));
      report.shutdown = shutting_down;
      options_.controller.on_stall(report);
    };
    if (shutdown.count() > 0 && now - posted_at_ >= shutdown) {
      report_silent(true);
      fatal = fmt::format(
          "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS ({} s): negotiation cycle {} "
          "was never joined by every rank{}: {} (frozen, or the host stalls)",
          shutdown.count() / 1000, cycle_ + 1, brought, who);
    } else if (now - posted_at_ >= warning && now - cycle_warned_ >= warning) {
      cycle_warned_ = now;
      logger().warn(
          "stall: rank 0 has waited {} s in negotiation cycle {}{}: {}; is it frozen (stopped, in "
          "a debugger) or its host stalled?",
          waited.count(), cycle_ + 1, brought, who);
      report_silent(false);
    }
  }
  if (fatal.empty()) return;
  tell_ranks(fatal, status);  // check_stalls runs on rank 0
  end_cycles(fatal, status);
}

void CycleEngine::say_goodbye() {
  // The goodbye goes out in a cycle of its own (after the one started, if any), which the other
  // ranks join when rung; then whatever is still pending fails.
  auto nap = kFirstNap;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(drive_mutex_);
      if (ended_ || (said_goodbye_ && !posted_)) break;
      const auto now = Clock::now();
      const Step s = step(now, false);
      if (s == Step::kDone) {
        nap = kFirstNap;
        continue;
      }
      if (s == Step::kIdle) break;
      // A cycle this rank brought nothing to (one a waiter parked in and left: its op was
      // interrupted, hvd.hpp's Interrupted) completes only when the others join it, which they
      // do by themselves only once they submit something: ring them, as step() does for a cycle
      // with something new.
      if (!rang_ && now - posted_at_ >= kDoorbellAfter) ring(now);
    }
    // Signals still matter: a fatal error or a lost rank ends the wait.
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    control_.watch(fds, ranks);
    ::poll(fds.data(), fds.size(), 0);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_signals(ranks[i]);
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, kMaxNap);
  }
  std::lock_guard<std::mutex> lock(drive_mutex_);
  ended_ = true;
  fail_everything("hvd::shutdown() was called while it was pending", HVD_ERR_NOT_INITIALIZED);
}

}  // namespace hvd::runtime
