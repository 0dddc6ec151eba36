#include "allreduce/runtime/init_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "allreduce/api/log.h"

namespace hvd::runtime {

InitWatchdog::InitWatchdog(std::chrono::milliseconds timeout)
    : timeout_(timeout), thread_([this] { watch(); }) {}

InitWatchdog::~InitWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void InitWatchdog::stage(const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  stage_ = what;
}

std::chrono::milliseconds InitWatchdog::margin(std::chrono::milliseconds timeout) {
  return std::max(std::chrono::milliseconds(2000), timeout / 4);
}

void InitWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto margin_ = margin(timeout_);
  if (cv_.wait_for(lock, timeout_ + margin_, [this] { return done_; })) return;
  logger().error(
      "hvd::init() did not finish within {} s (HOROVOD_GLOO_TIMEOUT_SECONDS, and {} s more): "
      "this rank was waiting in {} for the other ranks; exiting with code {} so that the job "
      "stops",
      timeout_.count() / 1000.0, margin_.count() / 1000.0, stage_, kExitCode);
  logger().error(
      "hint: a rank froze (stopped, in a debugger, its host stalled), died in a way the launcher "
      "has not noticed, or is busy for longer than that before its own hvd::init(), or a "
      "firewall drops the ranks' connections (Gloo's and MPI's use ephemeral ports: "
      "docs/network.md); see the other ranks' output, and raise HOROVOD_GLOO_TIMEOUT_SECONDS "
      "(hvdrun --gloo-timeout-seconds) for a slow start");
  logger().flush();
  std::fflush(nullptr);
  std::_Exit(kExitCode);
}

}  // namespace hvd::runtime
