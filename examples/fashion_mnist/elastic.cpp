// --elastic: the same model and data trained through hvd::elastic::run (hvd/elastic.hpp), so that
// under `hvdrun --min-np N` the survivors of a lost rank or host go on from the last commit in a
// smaller world, without a restart:
//   hvdrun -np 4 --min-np 2 build/examples/train_fashion_mnist --elastic --epochs 2
//
// What differs from the static loop (train.cpp), and why:
// - Data: each epoch is one global shuffle of the 60,000 training images, the same on every rank;
//   a step takes the next batch x size samples of it, rank r the r-th batch. The position in the
//   epoch is committed state, so a smaller world goes on where the last commit left off and an
//   epoch still sees each sample once, whatever the world's size was at each step.
// - The learning rate is scaled by the current size and decays with the samples seen, not the
//   steps taken, so it stays on course when the size changes.
// - The state (parameters, momentum, progress) is committed every --commit-every steps and at the
//   end of each epoch; a lost peer costs the steps since the last commit.
// - Each reset runs the loop body again, which reads rank and size afresh.
#include <hvd/elastic.hpp>
#include <hvd/hvd.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "train.h"

namespace fmnist {
namespace {

// Where training stands; committed with the parameters (plain data: BufferState copies bytes).
struct Progress {
  std::int64_t epoch = 1;     // the epoch being trained, from 1
  std::int64_t position = 0;  // samples of this epoch's order already trained on
  std::int64_t steps = 0;     // steps done since the start, all epochs and generations
  double loss_sum = 0;        // this epoch's training loss so far (the sync root's, after a reset)
  std::int64_t loss_steps = 0;  // the steps loss_sum adds up
};

// The test hook --die-in: a BufferState whose restore() or sync() kills this process the first
// time it runs in a reset (generation 1 and up), on worker `worker`.
class HookedState : public hvd::elastic::BufferState {
 public:
  HookedState(std::string where, int worker) : where_(std::move(where)), worker_(worker) {}
  void restore() override {
    if (where_ == "restore") maybe_die();
    BufferState::restore();
  }
  void sync() override {
    if (where_ == "sync") maybe_die();
    BufferState::sync();
  }

 private:
  void maybe_die() const {
    const hvd::elastic::WorldInfo w = hvd::elastic::world();
    if (w.worker == worker_ && (where_ == "restore" || w.generation > 0)) {
      std::printf("worker %d: killing myself (SIGKILL) inside %s() in generation %d\n", w.worker,
                  where_.c_str(), w.generation);
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
  }
  std::string where_;
  int worker_;
};

// Epoch `epoch`'s order of the training samples: the same on every rank.
std::vector<std::size_t> epoch_order(std::size_t n, std::int64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1000u * static_cast<unsigned>(epoch)));
  return order;
}

}  // namespace

int train_elastic(const Args& args) {
  const Dataset train_set = load(args.data, "train");
  const Dataset test_set = load(args.data, "t10k");
  Mlp model(static_cast<int>(train_set.pixels()), args.hidden, 10);
  model.init(42 + static_cast<std::uint32_t>(hvd::rank()));  // differs per rank until synced
  // Outside an elastic launch run() does not sync: rank 0's parameters go out here. In one, run()
  // syncs, and no collective may run before it: a worker that joins a running job would run it
  // alone while the others are in run()'s sync (and both would wait forever).
  if (!hvd::elastic::enabled()) broadcast_parameters(model);

  Progress progress;
  HookedState state(args.die_in, args.die_in_worker);
  const char* kParts[] = {"w1", "b1", "w2", "b2"};
  for (std::size_t i = 0; i < 4; ++i) {
    std::vector<float>* p = model.params().tensors()[i];
    std::vector<float>* v = model.velocity().tensors()[i];
    state.add(std::string("param.") + kParts[i], p->data(), p->size() * sizeof(float));
    state.add(std::string("velocity.") + kParts[i], v->data(), v->size() * sizeof(float));
  }
  state.add("progress", &progress, sizeof progress);

  const std::size_t n = train_set.count(), pixels = train_set.pixels();
  const auto batch = static_cast<std::size_t>(args.batch);
  const double total_samples = static_cast<double>(n) * args.epochs;
  std::vector<float> x(batch * pixels);
  std::vector<std::uint8_t> y(batch);
  double final_accuracy = 0;
  int rc = 0;
  hvd::elastic::run(state, [&] {
    const int rank = hvd::rank(), size = hvd::size();
    const hvd::elastic::WorldInfo world = hvd::elastic::world();
    const float lr = args.lr * static_cast<float>(size);
    const std::size_t per_step = batch * static_cast<std::size_t>(size);
    // Every rank starts the generation from the same parameters (run() synced them).
    const bool synced = same_everywhere(model.checksum());
    if (rank == 0) {
      std::printf(
          "fashion-mnist elastic: generation %d, %d ranks, batch %d per rank (%zu global), lr "
          "%.3f, from epoch %lld sample %lld (step %lld), a commit every %d steps, parameters "
          "%s\n",
          world.generation, size, args.batch, per_step, static_cast<double>(lr),
          static_cast<long long>(progress.epoch), static_cast<long long>(progress.position),
          static_cast<long long>(progress.steps), args.commit_every,
          synced ? "identical on every rank" : "DIFFER between ranks");
      std::fflush(stdout);
    }
    if (!synced) {
      rc = 1;
      return;
    }
    bool first_step = true;
    while (progress.epoch <= args.epochs) {
      const std::vector<std::size_t> order = epoch_order(n, progress.epoch);
      const auto start = std::chrono::steady_clock::now();
      while (static_cast<std::size_t>(progress.position) + per_step <= n) {
        const std::size_t mine =
            static_cast<std::size_t>(progress.position) + static_cast<std::size_t>(rank) * batch;
        for (std::size_t b = 0; b < batch; ++b) {
          const std::size_t s = order[mine + b];
          std::memcpy(x.data() + b * pixels, train_set.images.data() + s * pixels,
                      pixels * sizeof(float));
          y[b] = train_set.labels[s];
        }
        progress.loss_sum += model.train_step(x, y);
        ++progress.loss_steps;
        average_gradients(model);
        const double seen = static_cast<double>(progress.epoch - 1) * static_cast<double>(n) +
                            static_cast<double>(progress.position);
        model.apply(lr * static_cast<float>(1.0 - 0.9 * seen / total_samples), args.momentum);
        progress.position += static_cast<std::int64_t>(per_step);
        ++progress.steps;
        if (first_step && rank == 0 && args.report_first_step) {
          std::printf("rank 0: first step of generation %d done at %.6f\n", world.generation,
                      wall_seconds());
          std::fflush(stdout);
        }
        first_step = false;
        if (world.generation == 0 && world.worker == args.kill_rank &&
            progress.steps == args.kill_step) {
          die_here("worker", world.worker, args.kill_step);
        }
        if (progress.steps % args.commit_every == 0) state.commit();
      }
      double loss =
          progress.loss_sum / static_cast<double>(std::max<std::int64_t>(progress.loss_steps, 1));
      hvd::allreduce(std::span<double>(&loss, 1));  // the mean over ranks
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      final_accuracy = test_accuracy(model, test_set);
      const std::uint64_t checksum = model.checksum();
      const bool same = same_everywhere(checksum);
      if (rank == 0) {
        std::printf(
            "epoch %lld/%d: loss %.4f, test accuracy %.2f%%, %.2f s (generation %d, %d ranks), "
            "parameter checksum %016llx %s\n",
            static_cast<long long>(progress.epoch), args.epochs, loss, final_accuracy, seconds,
            world.generation, size, static_cast<unsigned long long>(checksum),
            same ? "identical on every rank" : "DIFFERS between ranks");
        std::fflush(stdout);
      }
      if (!same) {
        std::fprintf(stderr, "rank %d: parameters differ between ranks after epoch %lld\n", rank,
                     static_cast<long long>(progress.epoch));
        rc = 1;
        return;
      }
      ++progress.epoch;
      progress.position = 0;
      progress.loss_sum = 0;
      progress.loss_steps = 0;
      state.commit();
    }
  });
  if (rc == 0 && hvd::rank() == 0) {
    std::printf("final test accuracy: %.2f%% on %d ranks (elastic, %d resets)\n", final_accuracy,
                hvd::size(), hvd::elastic::world().resets);
  }
  return rc;
}

}  // namespace fmnist
