// A rank program for libhvd's elastic API (tests/e2e/test_libhvd_elastic.cpp): a training loop of
// STEPS steps over a BufferState (1000 weights and the step counter), committing every step. Each
// step allreduces a gradient of ones and adds (step + 1) * mean to every weight, so after a run
// that neither skips nor repeats a step every weight is STEPS * (STEPS + 1) / 2 whatever the
// world's size was at each step.
//
//   elastic_check STEPS [DIE_WORKER DIE_STEP [SYNC_WORKER]]
//     worker DIE_WORKER kills itself (SIGKILL) after the allreduce of step DIE_STEP, in
//     generation 0 (with ELASTIC_CHECK_KILL_AGENT set, it kills its parent, the hvdrun agent,
//     first); worker SYNC_WORKER kills itself inside State::sync() in generation 1, while
//     the others broadcast the state (a reset that fails half-way)
//   ELASTIC_CHECK_STEP_MS=N: each step sleeps N ms first (time for a cooldown to end mid-run)
//   ELASTIC_CHECK_DIE_BEFORE_INIT=W:MS: worker W (HVD_ELASTIC_WORKER) sleeps MS ms and kills
//     itself before hvd::init(), while the others wait for it in the new generation's rendezvous
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "hvd/elastic.hpp"
#include "hvd/hvd.hpp"

namespace {

// A BufferState whose sync() can be made to die half-way.
class DyingState : public hvd::elastic::BufferState {
 public:
  explicit DyingState(int sync_worker) : sync_worker_(sync_worker) {}
  void sync() override {
    const hvd::elastic::WorldInfo w = hvd::elastic::world();
    if (w.worker == sync_worker_ && w.generation == 1) ::raise(SIGKILL);
    BufferState::sync();
  }

 private:
  int sync_worker_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc == 3 || argc > 5) {
    std::fprintf(stderr, "usage: elastic_check STEPS [DIE_WORKER DIE_STEP [SYNC_WORKER]]\n");
    return 2;
  }
  const long long steps = std::atoll(argv[1]);
  const int die_worker = argc >= 4 ? std::atoi(argv[2]) : -1;
  const long long die_step = argc >= 4 ? std::atoll(argv[3]) : -1;
  const int sync_worker = argc == 5 ? std::atoi(argv[4]) : -1;
  if (const char* die = std::getenv("ELASTIC_CHECK_DIE_BEFORE_INIT")) {
    const char* me = std::getenv("HVD_ELASTIC_WORKER");
    if (me != nullptr && std::atoi(die) == std::atoi(me)) {
      const char* colon = std::strchr(die, ':');
      ::usleep(static_cast<useconds_t>(colon != nullptr ? std::atoi(colon + 1) : 0) * 1000);
      std::printf("worker %s: killing myself before hvd::init()\n", me);
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
  }
  try {
    hvd::init();
    std::vector<float> weights(1000, 0.0f);
    long long step = 0;
    DyingState state(sync_worker);
    state.add("weights", weights.data(), weights.size() * sizeof(float));
    state.add("step", &step, sizeof step);
    hvd::elastic::run(state, [&] {
      const hvd::elastic::WorldInfo w = hvd::elastic::world();
      std::printf("worker %d: generation %d rank %d size %d from step %lld, master %s:%d\n",
                  w.worker, w.generation, hvd::rank(), hvd::size(), step, w.master_addr.c_str(),
                  w.master_port);
      std::fflush(stdout);
      const char* step_ms = std::getenv("ELASTIC_CHECK_STEP_MS");
      for (; step < steps;) {
        if (step_ms != nullptr) ::usleep(static_cast<useconds_t>(std::atoi(step_ms)) * 1000);
        std::vector<float> grad(weights.size(), 1.0f);
        hvd::allreduce(std::span<float>(grad), hvd::ReduceOp::kAverage);
        for (std::size_t i = 0; i < weights.size(); ++i) weights[i] += (step + 1) * grad[i];
        ++step;
        if (w.worker == die_worker && step == die_step && w.generation == 0) {
          // ELASTIC_CHECK_KILL_AGENT=1: take the whole host down instead (the agent's ranks die
          // with it), as a lost machine would.
          if (std::getenv("ELASTIC_CHECK_KILL_AGENT") != nullptr) ::kill(::getppid(), SIGKILL);
          ::raise(SIGKILL);
        }
        state.commit();
      }
    });
    double sum = 0;
    for (float v : weights) sum += v;
    const hvd::elastic::WorldInfo w = hvd::elastic::world();
    std::printf("worker %d done: generation %d rank %d size %d resets %d steps %lld weights %.1f\n",
                w.worker, w.generation, hvd::rank(), hvd::size(), w.resets, step,
                sum / static_cast<double>(weights.size()));
    std::fflush(stdout);
    hvd::shutdown();
  } catch (const hvd::RuntimeError& e) {
    std::printf("libhvd error (%s): %s\n", hvd_status_name(e.status()), e.what());
    std::fflush(stdout);
    return 3;
  }
  return 0;
}
