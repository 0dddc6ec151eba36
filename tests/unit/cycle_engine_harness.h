// The cycle engine's test harness (test_libhvd_cycle_engine.cpp): ranks as threads of one
// process, each a real CycleEngine with its own background thread, the control plane over
// socketpairs, and the cycle's allgather played by an in-process transport (ThreadTransport, the
// test double for MPI_Iallgather) or TcpCycleTransport over socketpairs. RecordingRunner records
// what runs instead of reducing it (eager allreduces excepted: it sums their gathered inputs).
#pragma once

#include <sys/socket.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/api/status_error.h"
#include "allreduce/engine/cycle_engine.h"
#include "allreduce/engine/op_state.h"
#include "allreduce/engine/tcp_cycle_transport.h"
#include "tests/unit/libhvd_engine_helpers.h"

namespace hvd::test::cycles {

using namespace hvd::runtime;

// Every rank's part of round k, once all posted (an allgather's contribution, or an AND round's
// words as bytes), and how many rounds of each kind completed.
struct Allgather {
  std::mutex mutex;
  int size;
  std::map<std::uint64_t, std::vector<std::optional<std::string>>> rounds;
  std::map<std::uint64_t, int> taken;
  int gathers = 0, ands = 0;  // rounds completed (counted by rank 0)
  explicit Allgather(int n) : size(n) {}
};

class ThreadTransport final : public CycleTransport {
 public:
  ThreadTransport(std::shared_ptr<Allgather> shared, int rank)
      : shared_(std::move(shared)), rank_(rank) {}
  void start(std::string contribution, std::size_t) override { post(std::move(contribution)); }
  const std::vector<std::string>* gathered() override {
    auto parts = take(false);
    if (!parts) return nullptr;
    gathered_ = std::move(*parts);
    return &gathered_;
  }
  void start_and(std::vector<std::uint64_t> words) override {
    post(std::string(reinterpret_cast<const char*>(words.data()), words.size() * 8));
  }
  std::optional<std::vector<std::uint64_t>> anded() override {
    auto parts = take(true);
    if (!parts) return std::nullopt;
    std::vector<std::uint64_t> out(parts->front().size() / 8, ~std::uint64_t{0});
    for (const std::string& p : *parts) {
      // Every rank brings as many words (the engine's contract). Catch's REQUIRE is not for
      // the engine's threads, where this runs: a broken contract aborts the test run.
      if (p.size() != out.size() * 8) std::abort();
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint64_t w;
        std::memcpy(&w, p.data() + 8 * i, 8);
        out[i] &= w;
      }
    }
    return out;
  }

 private:
  void post(std::string part) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    auto& slots = shared_->rounds[round_];
    slots.resize(static_cast<std::size_t>(shared_->size));
    slots[static_cast<std::size_t>(rank_)] = std::move(part);
  }
  std::optional<std::vector<std::string>> take(bool is_and) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    auto& slots = shared_->rounds[round_];
    slots.resize(static_cast<std::size_t>(shared_->size));
    std::vector<std::string> out;
    for (const auto& s : slots) {
      if (!s) return std::nullopt;
      out.push_back(*s);
    }
    if (++shared_->taken[round_] == shared_->size) {
      shared_->rounds.erase(round_);
      shared_->taken.erase(round_);
    }
    if (rank_ == 0) ++(is_and ? shared_->ands : shared_->gathers);
    ++round_;
    return out;
  }

  std::shared_ptr<Allgather> shared_;
  int rank_;
  std::uint64_t round_ = 0;
  std::vector<std::string> gathered_;
};

// Records what each response ran, in order. With `eager`, an op with int32 data in host memory
// travels with its negotiation (OpRunner::eager_input) and run_eager() sums the gathered inputs
// into its output, as the Runtime does.
class RecordingRunner final : public OpRunner {
 public:
  void run(const std::vector<std::shared_ptr<hvd::detail::OpState>>& ops, Timeline*) override {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& op : ops) ran.push_back(op->request.name);
  }
  std::string_view eager_input(const hvd::detail::OpState& op) override {
    if (!eager || op.in.data == nullptr) return {};
    return {static_cast<const char*>(op.in.data), op.in.byte_size()};
  }
  void run_eager(hvd::detail::OpState& op, std::span<const std::string_view> inputs,
                 Timeline*) override {
    std::lock_guard<std::mutex> lock(mutex);
    ran.push_back(op.request.name);
    ++eager_runs;
    auto* out = static_cast<std::int32_t*>(op.in.data);
    const auto n = static_cast<std::size_t>(op.in.num_elements());
    std::vector<std::int32_t> sum(n, 0);
    for (const std::string_view in : inputs) {
      if (in.size() != n * 4) throw hvd::runtime::StatusError(HVD_ERR_INTERNAL, "input size");
      for (std::size_t i = 0; i < n; ++i) {
        std::int32_t v;
        std::memcpy(&v, in.data() + 4 * i, 4);
        sum[i] += v;
      }
    }
    std::copy(sum.begin(), sum.end(), out);
  }
  bool eager = false;
  std::mutex mutex;
  std::vector<std::string> ran;
  int eager_runs = 0;
};

// `n` ranks' engines in this process.
struct Job {
  std::vector<RecordingRunner> runners;
  std::vector<std::unique_ptr<CycleEngine>> engines;
  std::shared_ptr<Allgather> shared;
  // tcp: the cycles over TcpCycleTransport (HOROVOD_GLOO_CYCLES=1) on a star of their own,
  // instead of the in-process transport.
  Job(int n, std::size_t cache_capacity, EngineOptions options = {}, bool tcp = false)
      : runners(n), shared(std::make_shared<Allgather>(n)) {
    auto control = hvd::test::socketpair_star(n);
    auto negotiation = hvd::test::socketpair_star(n);
    options.size = n;
    options.controller.size = n;
    for (int r = 0; r < n; ++r) {
      options.rank = r;
      const auto i = static_cast<std::size_t>(r);
      std::unique_ptr<CycleTransport> transport;
      if (tcp) {
        transport = std::make_unique<TcpCycleTransport>(
            ControlPlane::adopt(r, n, std::move(negotiation[i])));
      } else {
        transport = std::make_unique<ThreadTransport>(shared, r);
      }
      engines.push_back(std::make_unique<CycleEngine>(
          runners[i], ControlPlane::adopt(r, n, std::move(control[i])), std::move(transport),
          options, cache_capacity));
    }
  }
  ~Job() {
    for (auto& e : engines) e->shutdown();  // every rank's goodbye, then teardown
  }
};

// Rank `r` of `job` submits `names` in the given order, then waits on each.
inline std::vector<std::string> step(CycleEngine& engine, const std::vector<std::string>& names) {
  std::vector<std::shared_ptr<hvd::detail::OpState>> ops;
  for (const auto& name : names) {
    ops.push_back(allreduce_op(name));
    engine.submit(ops.back(), false);
  }
  std::vector<std::string> errors;
  for (auto& op : ops) {
    engine.wait(*op, Clock::time_point::max());
    errors.push_back(outcome(*op));
  }
  return errors;
}

}  // namespace hvd::test::cycles
