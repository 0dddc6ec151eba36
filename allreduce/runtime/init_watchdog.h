// A bound on hvd::init() under MPI (docs/libhvd.md, "No hangs").
//
// MPI_Init_thread, MPI_Comm_dup and init()'s first collectives wait for every rank, with no
// timeout: one rank that froze (SIGSTOP, a debugger, a stalled host) or is still busy before its
// own hvd::init() would keep the others inside MPI for good, and mpirun with them. Under MPI the
// watchdog gives init() HOROVOD_GLOO_TIMEOUT_SECONDS, as Gloo's rendezvous has natively, and a
// second more (kMargin: the control plane's own timeout, whose error names the missing ranks,
// fires first when init() gets that far); past it the rank says what it was waiting in and exits
// with code 75 (kExitCode: EX_TEMPFAIL, the code of hvdrun's own "a start-up phase did not finish
// in time"), and mpirun stops the job. A thread cannot be taken out of an MPI call: ending the
// process is the only way out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace hvd::runtime {

class InitWatchdog {
 public:
  static constexpr int kExitCode = 75;
  static constexpr std::chrono::seconds kMargin{1};

  explicit InitWatchdog(std::chrono::milliseconds timeout);  // HOROVOD_GLOO_TIMEOUT_SECONDS
  ~InitWatchdog();  // init() finished or threw: the watchdog stands down
  InitWatchdog(const InitWatchdog&) = delete;
  InitWatchdog& operator=(const InitWatchdog&) = delete;

  // What init() waits in from now on (a string literal), for the message.
  void stage(const char* what);

 private:
  void watch();

  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  const char* stage_ = "starting";
  std::thread thread_;
};

}  // namespace hvd::runtime
