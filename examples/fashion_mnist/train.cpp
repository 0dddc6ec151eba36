// Data-parallel training of a small MLP on Fashion-MNIST with libhvd, Horovod style:
//   hvdrun -np 2 build/examples/train_fashion_mnist --epochs 3
//
// - Each rank trains on its own disjoint shard of the 60,000 training images.
// - Rank 0's initial parameters are broadcast to every rank (the others start from other seeds,
//   so a broken broadcast shows).
// - Each layer's gradient is averaged with a named async allreduce; the engine fuses them.
// - The learning rate is scaled by the number of ranks (Horovod's recommendation) and decays
//   linearly to a tenth over the run, so the final accuracy does not depend on the last steps'
//   noise.
// - After each epoch every rank's parameter checksum is gathered and compared: they must match.
// - `--checkpoint FILE`: rank 0 saves the model after each epoch; at start, when FILE exists,
//   every rank resumes from it (rank 0 reads it and broadcasts it), at the epoch after the last
//   one saved. With `hvdrun --max-restarts N` a restarted attempt picks up where the last left.
// Rank 0 prints per-epoch loss, test accuracy and time. Exit 1 if the checksums differ.
#include <hvd/hvd.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "checkpoint.h"
#include "idx.h"
#include "mlp.h"
#include "train.h"

namespace fmnist {

// Averages every layer's gradient across ranks: one named async op per layer, then wait.
void average_gradients(Mlp& model) {
  static const char* kNames[] = {"grad.w1", "grad.b1", "grad.w2", "grad.b2"};
  auto grads = model.grads().tensors();
  std::vector<hvd::Handle> handles;
  for (std::size_t i = grads.size(); i-- > 0;) {  // last layer first, as backprop produces them
    handles.push_back(
        hvd::allreduce_async(kNames[i], hvd::tensor(grads[i]->data(), grads[i]->size())));
  }
  for (hvd::Handle& h : handles) h.wait();
}

void broadcast_parameters(Mlp& model) {
  static const char* kNames[] = {"param.w1", "param.b1", "param.w2", "param.b2"};
  auto params = model.params().tensors();
  std::vector<hvd::Handle> handles;
  for (std::size_t i = 0; i < params.size(); ++i) {
    handles.push_back(
        hvd::broadcast_async(kNames[i], hvd::tensor(params[i]->data(), params[i]->size()), 0));
  }
  for (hvd::Handle& h : handles) h.wait();
}

// True when every rank's parameters hash the same.
bool same_everywhere(std::uint64_t checksum) {
  const auto mine = static_cast<std::int64_t>(checksum);
  const std::vector<std::int64_t> all = hvd::allgather(std::span<const std::int64_t>(&mine, 1));
  return std::all_of(all.begin(), all.end(), [&](std::int64_t c) { return c == mine; });
}

double test_accuracy(Mlp& model, const Dataset& test) {
  // Each rank scores its share of the test set; the counts are summed.
  const std::size_t n = test.count(), size = static_cast<std::size_t>(hvd::size()),
                    rank = static_cast<std::size_t>(hvd::rank());
  const std::size_t begin = n * rank / size, end = n * (rank + 1) / size;
  std::int64_t right = 0;
  constexpr std::size_t kChunk = 500;
  for (std::size_t at = begin; at < end; at += kChunk) {
    const std::size_t m = std::min(kChunk, end - at);
    right += model.correct({test.images.data() + at * test.pixels(), m * test.pixels()},
                           {test.labels.data() + at, m});
  }
  hvd::allreduce(std::span<std::int64_t>(&right, 1), hvd::ReduceOp::kSum);
  return 100.0 * static_cast<double>(right) / static_cast<double>(n);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die_here(const char* who, int id, long long step) {
  std::printf("%s %d: killing myself (SIGKILL) after step %lld at %.6f\n", who, id, step,
              wall_seconds());
  std::fflush(stdout);
  ::raise(SIGKILL);
  std::abort();  // not reached: SIGKILL cannot be caught
}

}  // namespace fmnist

namespace {

using fmnist::Args;
using fmnist::average_gradients;
using fmnist::broadcast_parameters;
using fmnist::same_everywhere;
using fmnist::test_accuracy;

constexpr const char* kUsage =
    "usage: train_fashion_mnist [--epochs N] [--batch-size B] [--lr X] [--momentum M] "
    "[--hidden H] [--data DIR] [--checkpoint FILE] [--elastic [--commit-every N]]\n"
    "  defaults: --epochs 3 --batch-size 32 (per rank) --lr 0.01 (per rank, scaled by the number "
    "of ranks) --momentum 0.9 --hidden 128\n"
    "  --elastic: train through hvd::elastic::run, committing every N steps (default 20): under\n"
    "    hvdrun --min-np, the survivors of a lost rank or host go on from the last commit\n"
    "  run it with hvdrun, e.g. hvdrun -np 2 train_fashion_mnist --epochs 1\n"
    "  test and benchmark hooks: --kill-rank R --kill-step S (rank R, or worker R with --elastic,\n"
    "    kills itself with SIGKILL after global step S of the first attempt or generation),\n"
    "    --report-first-step (rank 0 prints when the first step of each attempt or generation\n"
    "    is done, as Unix time), --die-in restore|sync:W (worker W kills itself inside the\n"
    "    state's restore() or sync() at its first reset)\n";

// The whole of `text` as a number, or an error naming the flag.
template <class T>
T number(const std::string& flag, const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw std::runtime_error(flag + " " + text + ": not a number");
  }
  return value;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--epochs" && has_value) {
      a.epochs = number<int>(flag, argv[++i]);
    } else if (flag == "--batch-size" && has_value) {
      a.batch = number<int>(flag, argv[++i]);
    } else if (flag == "--lr" && has_value) {
      a.lr = number<float>(flag, argv[++i]);
    } else if (flag == "--momentum" && has_value) {
      a.momentum = number<float>(flag, argv[++i]);
    } else if (flag == "--hidden" && has_value) {
      a.hidden = number<int>(flag, argv[++i]);
    } else if (flag == "--data" && has_value) {
      a.data = argv[++i];
    } else if (flag == "--checkpoint" && has_value) {
      a.checkpoint = argv[++i];
    } else if (flag == "--elastic") {
      a.elastic = true;
    } else if (flag == "--commit-every" && has_value) {
      a.commit_every = number<int>(flag, argv[++i]);
    } else if (flag == "--kill-rank" && has_value) {
      a.kill_rank = number<int>(flag, argv[++i]);
    } else if (flag == "--kill-step" && has_value) {
      a.kill_step = number<long long>(flag, argv[++i]);
    } else if (flag == "--report-first-step") {
      a.report_first_step = true;
    } else if (flag == "--die-in" && has_value) {
      const std::string v = argv[++i];
      const auto colon = v.find(':');
      a.die_in = v.substr(0, colon);
      if (colon == std::string::npos || (a.die_in != "restore" && a.die_in != "sync")) {
        throw std::runtime_error("--die-in " + v + ": give restore:W or sync:W");
      }
      a.die_in_worker = number<int>(flag, v.substr(colon + 1));
    } else if (flag == "--help" || flag == "-h") {
      a.help = true;
      return a;
    } else {
      throw std::runtime_error("bad argument: " + flag + " (--help for the usage)");
    }
  }
  if (a.epochs < 1 || a.batch < 1 || !(a.lr > 0) || a.hidden < 1 ||
      !(a.momentum >= 0 && a.momentum < 1) || a.commit_every < 1) {
    throw std::runtime_error(
        "--epochs, --batch-size, --lr, --hidden and --commit-every must be positive, "
        "--momentum in [0, 1)");
  }
  return a;
}

// With a checkpoint file: rank 0 loads it, and every rank gets its epoch count and momentum
// (broadcast_parameters sends the parameters after this). Returns the first epoch to train.
int resume(const std::string& path, fmnist::Mlp& model) {
  if (path.empty()) return 1;
  std::int64_t done = 0;
  if (hvd::rank() == 0) done = fmnist::load_checkpoint(path, model).value_or(0);
  hvd::broadcast(std::span<std::int64_t>(&done, 1), 0);
  if (done == 0) return 1;
  for (std::vector<float>* v : model.velocity().tensors()) {
    hvd::broadcast(hvd::tensor(v->data(), v->size()), 0);
  }
  if (hvd::rank() == 0) {
    std::printf("resuming from %s: %lld epochs done\n", path.c_str(), static_cast<long long>(done));
  }
  return static_cast<int>(done) + 1;
}

int train(const Args& args) {
  const int rank = hvd::rank(), size = hvd::size();
  const fmnist::Dataset train_set = fmnist::load(args.data, "train");
  const fmnist::Dataset test_set = fmnist::load(args.data, "t10k");

  // One fixed shuffle of the training set (the same on every rank), then a disjoint shard each.
  std::vector<std::size_t> order(train_set.count());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(2024));
  const std::size_t n = order.size(), begin = n * static_cast<std::size_t>(rank) / size,
                    end = n * static_cast<std::size_t>(rank + 1) / size;
  std::vector<std::size_t> shard(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                 order.begin() + static_cast<std::ptrdiff_t>(end));
  std::printf("rank %d: training on shard %zu..%zu (%zu of %zu shuffled samples)\n", rank, begin,
              end - 1, shard.size(), n);
  // Every rank takes the same number of steps: the smallest shard decides.
  const std::size_t steps =
      (n / static_cast<std::size_t>(size)) / static_cast<std::size_t>(args.batch);
  const float lr = args.lr * static_cast<float>(size);
  if (rank == 0) {
    std::printf(
        "fashion-mnist: %d ranks, MLP 784-%d-10, batch %d per rank (%d global), lr %.3f "
        "(%.3f x %d ranks, decaying to a tenth), momentum %.2f, %zu steps per epoch\n",
        size, args.hidden, args.batch, args.batch * size, static_cast<double>(lr),
        static_cast<double>(args.lr), size, static_cast<double>(args.momentum), steps);
  }

  fmnist::Mlp model(static_cast<int>(train_set.pixels()), args.hidden, 10);
  model.init(42 + static_cast<std::uint32_t>(rank));  // differs per rank until the broadcast
  const int first_epoch = resume(args.checkpoint, model);
  broadcast_parameters(model);

  std::vector<float> x(static_cast<std::size_t>(args.batch) * train_set.pixels());
  std::vector<std::uint8_t> y(static_cast<std::size_t>(args.batch));
  // A checkpoint of a finished run: nothing left to train, its accuracy is the result.
  double final_accuracy = first_epoch > args.epochs ? test_accuracy(model, test_set) : 0;
  const double total_steps = static_cast<double>(steps) * args.epochs;
  double done_steps = static_cast<double>(steps) * (first_epoch - 1);
  // Each epoch shuffles the shard as the last one left it: a resumed run replays the shuffles of
  // the epochs it skips, so it sees the same batches as a run that never stopped.
  auto shuffle_for = [&](int epoch) {
    std::shuffle(shard.begin(), shard.end(),
                 std::mt19937(1000u * static_cast<unsigned>(epoch) + static_cast<unsigned>(rank)));
  };
  for (int epoch = 1; epoch < first_epoch; ++epoch) shuffle_for(epoch);
  bool first_step = true;
  for (int epoch = first_epoch; epoch <= args.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    shuffle_for(epoch);
    double loss_sum = 0;
    for (std::size_t step = 0; step < steps; ++step) {
      for (int b = 0; b < args.batch; ++b) {
        const std::size_t s =
            shard[step * static_cast<std::size_t>(args.batch) + static_cast<std::size_t>(b)];
        std::memcpy(x.data() + static_cast<std::size_t>(b) * train_set.pixels(),
                    train_set.images.data() + s * train_set.pixels(),
                    train_set.pixels() * sizeof(float));
        y[static_cast<std::size_t>(b)] = train_set.labels[s];
      }
      loss_sum += model.train_step(x, y);
      average_gradients(model);
      model.apply(lr * static_cast<float>(1.0 - 0.9 * done_steps++ / total_steps), args.momentum);
      if (first_step && rank == 0 && args.report_first_step) {
        std::printf("rank 0: first step of this attempt done at %.6f\n", fmnist::wall_seconds());
        std::fflush(stdout);
      }
      first_step = false;
      // The kill hook: only in the first attempt (hvdrun --max-restarts counts them).
      const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
      if (rank == args.kill_rank && static_cast<long long>(done_steps) == args.kill_step &&
          (attempt == nullptr || std::string(attempt) == "0")) {
        fmnist::die_here("rank", rank, args.kill_step);
      }
    }
    double loss = loss_sum / static_cast<double>(steps);
    hvd::allreduce(std::span<double>(&loss, 1));  // the mean over ranks
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    final_accuracy = test_accuracy(model, test_set);
    const std::uint64_t checksum = model.checksum();
    const bool same = same_everywhere(checksum);
    if (rank == 0) {
      std::printf(
          "epoch %d/%d: loss %.4f, test accuracy %.2f%%, %.2f s, parameter checksum "
          "%016llx %s\n",
          epoch, args.epochs, loss, final_accuracy, seconds,
          static_cast<unsigned long long>(checksum),
          same ? "identical on every rank" : "DIFFERS between ranks");
      std::fflush(stdout);  // a pipe is block-buffered: a rank stopped later must not lose it
    }
    if (!same) {
      std::fprintf(stderr, "rank %d: parameters differ between ranks after epoch %d\n", rank,
                   epoch);
      return 1;
    }
    if (rank == 0 && !args.checkpoint.empty())
      fmnist::save_checkpoint(args.checkpoint, epoch, model);
  }
  if (rank == 0) std::printf("final test accuracy: %.2f%% on %d ranks\n", final_accuracy, size);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    if (args.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    hvd::init();
    const int rc = args.elastic ? fmnist::train_elastic(args) : train(args);
    hvd::shutdown();
    return rc;
  } catch (const hvd::RuntimeError& e) {
    std::fprintf(stderr, "train_fashion_mnist: libhvd: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
    return 2;
  }
}
