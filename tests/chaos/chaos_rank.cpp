// One rank of a chaos-suite job (tests/chaos/README.md): prints SECONDS x 50 numbered lines, one
// every 20 ms, and runs an allreduce every fifth. Every line it prints it first appends to its own
// ledger (LEDGER_DIR/rank.R, "UNIX_TIME<TAB>LINE", written with write(2), so it is on disk before
// the line leaves), the ground truth the suite compares hvdrun's --output-filename files with.
//
//   chaos_rank SECONDS LEDGER_DIR [--children]
//
// --children (native launches): before anything else the rank starts two `sleep 300` of its own,
// as a DataLoader's workers or a shell wrapper's jobs would be: one a plain child, one
// double-forked into a session of its own (a daemon: its parent gone, it escaped the rank's
// process group). Nothing waits for them: whatever ends the rank or its agent must end them too
// (the suite's orphan check; agent/agent_guard.h).
//
// Lines: "chaos: rank R before init", "chaos: rank R ready", "chaos: rank R line N sum S", and
// "chaos: rank R done" before it exits 0. A failed collective prints its error and exits 3.
// SIGTERM is a stop that takes a while, as a real program's clean-up does: the rank says so, goes
// on printing (no more collectives) for half a second, then dies of the SIGTERM (exit 143). The
// suite's faults then have a stopping phase to land in.
//
// Two knobs for faults that need more than the usual output, from the environment (the suite sets
// them with -x for those rounds only): CHAOS_PAD=N appends N '.' to every numbered line (a rank
// that prints megabytes: a console that stops reading, or a frozen hvdrun, must block it);
// CHAOS_FORGE=1 prints, first, lines shaped like Open MPI's tags and its abort message, as a
// training log that prints untrusted text would (under --mpi they must stay the rank's text).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.hpp"

namespace {

int ledger_fd = -1;
volatile sig_atomic_t terminated = 0;

void on_sigterm(int) { terminated = 1; }

void say(const std::string& line) {
  const std::string text = line + "\n";
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%.3f\t", now);
  const std::string entry = stamp + text;
  if (ledger_fd >= 0 && ::write(ledger_fd, entry.data(), entry.size()) < 0) std::_Exit(4);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// `sleep 300` with /dev/null for its output, so that it holds none of the rank's pipes.
[[noreturn]] void become_sleep() {
  const int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);
  ::execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
  std::_Exit(127);
}

void start_children() {
  if (::fork() == 0) become_sleep();
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::setsid();
    if (::fork() == 0) become_sleep();
    std::_Exit(0);
  }
  if (middle > 0) ::waitpid(middle, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const bool children = argc == 4 && std::string(argv[3]) == "--children";
  if (argc != 3 && !children) {
    std::fprintf(stderr, "usage: chaos_rank SECONDS LEDGER_DIR [--children]\n");
    return 64;
  }
  if (children) start_children();
  const double seconds = std::atof(argv[1]);
  const char* rank_env = std::getenv("HOROVOD_RANK");
  const std::string rank = rank_env != nullptr ? rank_env : "0";
  const std::string ledger = std::string(argv[2]) + "/rank." + rank;
  ledger_fd = ::open(ledger.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (ledger_fd < 0) {
    std::perror(ledger.c_str());
    return 65;
  }
  ::signal(SIGTERM, on_sigterm);
  const char* pad_env = std::getenv("CHAOS_PAD");
  const std::string pad(pad_env != nullptr ? std::strtoul(pad_env, nullptr, 10) : 0, '.');
  const char* forge = std::getenv("CHAOS_FORGE");
  if (forge != nullptr && std::string(forge) == "1") {
    say("[1,2147483648]<stdout>:chaos: rank " + rank + " forged a tag");
    say("[1,99]<stdout>:Per user-direction, the job has been aborted.");
  }
  say("chaos: rank " + rank + " before init");
  try {
    hvd::init();
    say("chaos: rank " + rank + " ready");
    // A number of lines, not a time: every rank must run the same collectives (a time limit let
    // one rank stop a collective short of the others, which then failed waiting for it).
    const long lines = static_cast<long>(seconds * 50);  // one every 20 ms
    std::vector<float> data(256);
    std::optional<std::chrono::steady_clock::time_point> stop_at;
    for (long n = 1; n <= lines; ++n) {
      if (terminated != 0 && !stop_at) {
        say("chaos: rank " + rank + " got SIGTERM");
        stop_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      }
      if (stop_at && std::chrono::steady_clock::now() >= *stop_at) {
        ::signal(SIGTERM, SIG_DFL);
        ::raise(SIGTERM);
      }
      float sum = 0;
      if (n % 5 == 0 && !stop_at) {
        for (float& v : data) v = 1.0f;
        hvd::allreduce(std::span<float>(data), hvd::ReduceOp::kSum);
        sum = data[0];
      }
      say("chaos: rank " + rank + " line " + std::to_string(n) + " sum " +
          std::to_string(static_cast<int>(sum)) + pad);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    hvd::shutdown();
  } catch (const std::exception& e) {
    say("chaos: rank " + rank + " failed: " + e.what());
    return 3;
  }
  say("chaos: rank " + rank + " done");
  return 0;
}
