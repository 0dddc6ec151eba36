#include "ssh/check.h"

#include <fmt/format.h>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "ssh/check_host.h"

namespace hvd::ssh {
namespace {

// Grace after the deadline for checks to notice their deadline or a cancel.
constexpr auto kGrace = std::chrono::milliseconds(500);

// Shared by the runner and one check thread; outlives the runner if the thread is abandoned.
struct Job {
  CheckControl control;
  std::optional<HostCheck> result;
  std::exception_ptr error;
};

struct Board {
  std::mutex mutex;
  std::condition_variable changed;
  size_t done = 0;
};

// What we can say about a check that never came back: where it was stuck.
HostCheck abandoned(const SshTarget& target, const SshOptions& options, Stage stage) {
  HostCheck r;
  r.host = target.host;
  r.port = target.port.value_or(options.port.value_or(22));
  r.user = target.user.value_or("");
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  const auto seconds = std::chrono::duration<double>(options.timeout).count();
  switch (stage) {
    case Stage::kConfig:
    case Stage::kResolve:
      r.code = CheckCode::kDnsFailure;
      r.message =
          fmt::format("resolving '{}' did not finish within {:.0f} s", target.host, seconds);
      r.hint = "the DNS server does not answer: check /etc/resolv.conf, or use the IP address";
      break;
    case Stage::kBanner:
      r.code = CheckCode::kBannerTimeout;
      r.message = fmt::format("no SSH banner within {:.0f} s", seconds);
      break;
    default:
      r.code = CheckCode::kTimeout;
      r.message = fmt::format("stuck in the {} stage after {:.0f} s", to_string(stage), seconds);
      r.hint = "the host or the network is too slow or drops packets; raise --ssh-timeout";
      break;
  }
  return r;
}

}  // namespace

std::vector<HostCheck> check_hosts(const std::vector<SshTarget>& targets,
                                   const SshOptions& options) {
  // Shared with the threads: an abandoned one may still release its slot after we return.
  auto slots = std::make_shared<CpuSlots>(std::max(1, options.concurrency));
  auto board = std::make_shared<Board>();
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<std::thread> threads;
  for (const SshTarget& target : targets) {
    auto job = std::make_shared<Job>();
    jobs.push_back(job);
    threads.emplace_back([job, board, target, options, slots] {
      std::optional<HostCheck> result;
      std::exception_ptr error;
      try {
        result = check_host(target, options, *slots, job->control);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(board->mutex);
      job->result = std::move(result);
      job->error = error;
      ++board->done;
      board->changed.notify_all();
    });
  }

  // A host waited for (--wait-for-hosts) gets its whole --ssh-timeout after the wait.
  const auto deadline = Clock::now() + options.wait_for_hosts + options.timeout + kGrace;
  std::unique_lock<std::mutex> lock(board->mutex);
  auto all_done = [&] { return board->done == jobs.size(); };
  auto report = [&] {  // under the lock: the results are written under it
    if (!options.on_progress || jobs.empty()) return;
    std::size_t failed = 0;
    for (const auto& job : jobs) failed += (job->error || (job->result && !job->result->ok()));
    options.on_progress(board->done, failed, jobs.size());
  };
  report();
  // At most every kProgressEvery, and once more when the last host is done: a thousand hosts
  // finishing within a second do not redraw the line a thousand times.
  for (auto next = Clock::now() + kProgressEvery;
       options.on_progress && !all_done() && Clock::now() < deadline;) {
    if (board->changed.wait_until(lock, std::min(deadline, next), all_done) ||
        Clock::now() >= next) {
      report();
      next = Clock::now() + kProgressEvery;
    }
  }
  if (!board->changed.wait_until(lock, deadline, all_done)) {
    for (auto& job : jobs) job->control.cancel();
    board->changed.wait_for(lock, kGrace, [&] { return board->done == jobs.size(); });
  }
  lock.unlock();

  std::vector<HostCheck> results;
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::unique_lock<std::mutex> job_lock(board->mutex);
    const bool finished = jobs[i]->result.has_value() || jobs[i]->error != nullptr;
    job_lock.unlock();
    if (finished) {
      threads[i].join();
      if (jobs[i]->error) std::rethrow_exception(jobs[i]->error);
      results.push_back(std::move(*jobs[i]->result));
    } else {
      threads[i].detach();  // blocked in getaddrinfo or libssh: it ends with the process
      results.push_back(abandoned(targets[i], options, jobs[i]->control.stage));
    }
  }
  return results;
}

}  // namespace hvd::ssh
