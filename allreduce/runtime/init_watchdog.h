// A bound on the whole of hvd::init() (docs/libhvd.md, "No hangs").
//
// Under MPI, MPI_Init_thread, MPI_Comm_dup and init()'s first collectives wait for every rank
// with no timeout: one rank that froze (SIGSTOP, a debugger, a stalled host) or is still busy
// before its own hvd::init() would keep the others inside MPI for good, and mpirun with them.
// Under Gloo every wait has HOROVOD_GLOO_TIMEOUT_SECONDS, but one at a time: with the link
// between two hosts cut, Gloo's full-mesh connect waits that long for each pair in turn (40 s
// for a timeout of 8 s at 4 ranks on 2 hosts; minutes at 64). The watchdog gives init() the
// timeout and a margin more (margin(): the errors of the waits that have their own timeout,
// which name what is missing, come first when they can); past it the rank says what it was
// waiting in and exits with code 75 (kExitCode: EX_TEMPFAIL, the code of hvdrun's own "a
// start-up phase did not finish in time"), and the launcher stops the job. A thread cannot be
// taken out of an MPI or Gloo call: ending the process is the only way out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace hvd::runtime {

class InitWatchdog {
 public:
  static constexpr int kExitCode = 75;
  // A quarter of the timeout, at least 2 s.
  static std::chrono::milliseconds margin(std::chrono::milliseconds timeout);

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
