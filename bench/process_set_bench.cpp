// Process sets (hvd::ProcessSet): what a set costs and how fast its collectives run.
//
//   hvdrun -np N+1 process_set_bench create N     # a set of ranks 0..N-1: ms and sockets
//   hvdrun -np 4 process_set_bench speed pair     # allreduce on {0, 1} while 2, 3 wait
//   hvdrun -np 2 process_set_bench speed world    # the same allreduce in a job of 2
//
// `create` times add_process_set (the agreement allgather on the global set plus the set's own
// connect: Gloo context or MPI communicator, control plane, engine) on every rank and counts the
// socket descriptors each rank opened for it. `speed` prints the median time of an allreduce
// (float32, sum) at 4 KiB and 64 MiB, and (pair) the share of a core ranks 2 and 3 used while
// they waited in the barrier; bench/process_set_bench.sh alternates the two jobs.
// Needs HOROVOD_DYNAMIC_PROCESS_SETS=1 (the script sets it).
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <hvd/hvd.hpp>

namespace {

using Clock = std::chrono::steady_clock;

int socket_fds() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  char target[256];
  while (dirent* e = readdir(dir)) {
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t len = readlink(path.c_str(), target, sizeof target - 1);
    if (len > 0 && std::string(target, static_cast<std::size_t>(len)).rfind("socket:", 0) == 0) ++n;
  }
  closedir(dir);
  return n;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int create(int n) {
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  hvd::barrier();
  const int before = socket_fds();
  const auto start = Clock::now();
  const hvd::ProcessSet set = hvd::add_process_set(ranks);
  double ms = ms_since(start);
  int opened = socket_fds() - before;
  // Every rank's figures, to rank 0 (the slowest rank's time is the set's).
  std::vector<double> mine{ms, static_cast<double>(opened)};
  const hvd::Buffer all = hvd::allgather(hvd::tensor(mine.data(), mine.size()));
  if (hvd::rank() == 0) {
    double slowest = 0, sockets = 0;
    for (std::size_t i = 0; i < all.as<double>().size(); i += 2) {
      slowest = std::max(slowest, all.as<double>()[i]);
      sockets += all.as<double>()[i + 1];
    }
    std::printf(
        "create: set of %d ranks in a job of %d (%s): %.1f ms (slowest rank), %.0f "
        "socket descriptors opened on its ranks (%.1f per rank)\n",
        n, hvd::size(), hvd::backend_name().c_str(), slowest, sockets, sockets / n);
  }
  hvd::remove_process_set(set);
  return 0;
}

double median_ms(const hvd::ProcessSet& set, std::size_t bytes, int iterations) {
  std::vector<float> v(bytes / sizeof(float), 1.0f);
  std::vector<double> times;
  for (int i = 0; i < iterations + 2; ++i) {
    const auto start = Clock::now();
    hvd::allreduce(hvd::tensor(v.data(), v.size()), {hvd::ReduceOp::kSum}, set);
    if (i >= 2) times.push_back(ms_since(start));  // two warm-up calls
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// This process's CPU time (every thread's: the engine's, MPI's progress) in milliseconds.
double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

int speed(bool pair) {
  hvd::ProcessSet set;
  if (pair) set = hvd::add_process_set(std::vector<int>{0, 1});
  double small = 0, large = 0;
  if (set.included()) {
    small = median_ms(set, 4096, 200);
    large = median_ms(set, 64u << 20, 5);
  }
  // Ranks 2 and 3 wait here meanwhile: the share of a core they used doing so (spinning would
  // show as ~100% each) is printed with the times.
  const double cpu_before = cpu_ms();
  const auto wall_before = Clock::now();
  hvd::barrier();
  std::vector<double> mine{cpu_ms() - cpu_before, ms_since(wall_before)};
  const hvd::Buffer all = hvd::allgather(hvd::tensor(mine.data(), mine.size()));
  if (hvd::rank() == 0) {
    double cpu = 0, wall = 0;
    for (std::size_t r = 2; r < static_cast<std::size_t>(hvd::size()); ++r) {
      cpu += all.as<double>()[2 * r];
      wall += all.as<double>()[2 * r + 1];
    }
    std::printf("speed %s (%s): 4 KiB %.4f ms, 64 MiB %.1f ms", pair ? "pair of 4" : "job of 2",
                hvd::backend_name().c_str(), small, large);
    if (pair)
      std::printf("; ranks 2, 3 used %.1f%% of a core each in the barrier", 100 * cpu / wall);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  try {
    hvd::init();
    int rc = 64;
    if (mode == "create") rc = create(std::atoi(argv[2]));
    if (mode == "speed") rc = speed(std::string(argv[2]) == "pair");
    if (rc == 64) std::fprintf(stderr, "usage: process_set_bench create N | speed pair|world\n");
    hvd::shutdown();
    return rc;
  } catch (const hvd::RuntimeError& e) {
    std::fprintf(stderr, "process_set_bench: %s\n", e.what());
    return 1;
  }
}
