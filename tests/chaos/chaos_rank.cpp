// One rank of a chaos-suite job (tests/chaos/README.md): prints numbered lines and runs an
// allreduce every few lines, for SECONDS. Every line it prints it first appends to its own
// ledger (LEDGER_DIR/rank.R, "UNIX_TIME<TAB>LINE", written with write(2), so it is on disk before
// the line leaves), the ground truth the suite compares hvdrun's --output-filename files with.
//
//   chaos_rank SECONDS LEDGER_DIR
//
// Lines: "chaos: rank R before init", "chaos: rank R ready", "chaos: rank R line N sum S", and
// "chaos: rank R done" before it exits 0. A failed collective prints its error and exits 3.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.hpp"

namespace {

int ledger_fd = -1;

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: chaos_rank SECONDS LEDGER_DIR\n");
    return 64;
  }
  const double seconds = std::atof(argv[1]);
  const char* rank_env = std::getenv("HOROVOD_RANK");
  const std::string rank = rank_env != nullptr ? rank_env : "0";
  const std::string ledger = std::string(argv[2]) + "/rank." + rank;
  ledger_fd = ::open(ledger.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (ledger_fd < 0) {
    std::perror(ledger.c_str());
    return 65;
  }
  say("chaos: rank " + rank + " before init");
  try {
    hvd::init();
    say("chaos: rank " + rank + " ready");
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::vector<float> data(256);
    for (long n = 1; std::chrono::steady_clock::now() < end; ++n) {
      float sum = 0;
      if (n % 5 == 0) {
        for (float& v : data) v = 1.0f;
        hvd::allreduce(std::span<float>(data), hvd::ReduceOp::kSum);
        sum = data[0];
      }
      say("chaos: rank " + rank + " line " + std::to_string(n) + " sum " +
          std::to_string(static_cast<int>(sum)));
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
