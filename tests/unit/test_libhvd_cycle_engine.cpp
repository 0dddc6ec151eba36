// The MPI engine's negotiation cycles (allreduce/engine/cycle_engine.h) with ranks as threads of
// this process: each rank a real CycleEngine with its own background thread, the control plane
// over socketpairs, and the cycle's allgather played by an in-process transport (the test double
// for MPI_Iallgather: start() posts, gathered() completes once every rank posted). What runs is
// recorded, not reduced: every rank must run the same tensors in the same order. These tests
// also let ThreadSanitizer see the engine's locking (under MPI it cannot: tests/sanitizers).
#include <sys/socket.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include "tests/support/catch.h"

#include "allreduce/api/status_error.h"
#include "allreduce/engine/cycle_engine.h"
#include "allreduce/engine/op_state.h"
#include "allreduce/engine/tcp_cycle_transport.h"
#include "hvd/hvd.hpp"
#include "tests/unit/cycle_engine_harness.h"
#include "tests/unit/libhvd_engine_helpers.h"

using Catch::Matchers::ContainsSubstring;
using namespace hvd::runtime;
using hvd::test::allreduce_op;
using hvd::test::outcome;
using hvd::test::outcome_status;
using namespace hvd::test::cycles;

TEST_CASE(
    "cycle engine: 3 ranks in threads submit 40 tensors in their own orders: the same "
    "order everywhere, and a warm cache agrees by slots",
    "[libhvd][engine]") {
  const bool tcp = GENERATE(false, true);
  INFO((tcp ? "over TcpCycleTransport" : "over the in-process transport"));
  Job job(3, 1024, {}, tcp);
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("g." + std::to_string(i));
  std::vector<std::thread> ranks;
  std::vector<std::vector<std::string>> failures(3);
  std::vector<hvd::EngineStats> warm(3), after(3);
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      std::mt19937 rng(static_cast<unsigned>(17 + r));
      for (int s = 0; s < 5; ++s) {
        if (s == 1)
          warm[static_cast<std::size_t>(r)] = job.engines[static_cast<std::size_t>(r)]->stats();
        std::vector<std::string> order = names;
        std::shuffle(order.begin(), order.end(), rng);
        for (const std::string& e : step(*job.engines[static_cast<std::size_t>(r)], order)) {
          if (!e.empty()) failures[static_cast<std::size_t>(r)].push_back(e);
        }
      }
      after[static_cast<std::size_t>(r)] = job.engines[static_cast<std::size_t>(r)]->stats();
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(failures[static_cast<std::size_t>(r)].empty());
    CHECK(job.runners[static_cast<std::size_t>(r)].ran.size() == 200);
    CHECK(job.runners[static_cast<std::size_t>(r)].ran == job.runners[0].ran);
    // Steps 2 to 5: every tensor a cache hit, none negotiated in full.
    CHECK(after[static_cast<std::size_t>(r)].cache_hits -
              warm[static_cast<std::size_t>(r)].cache_hits ==
          160);
    CHECK(after[static_cast<std::size_t>(r)].negotiated ==
          warm[static_cast<std::size_t>(r)].negotiated);
  }
}

TEST_CASE("cycle engine: a tensor nobody waits on runs, the others ring its rank into a cycle",
          "[libhvd][engine]") {
  const bool tcp = GENERATE(false, true);
  INFO((tcp ? "over TcpCycleTransport" : "over the in-process transport"));
  EngineOptions options;
  options.cycle_time = std::chrono::microseconds(200);
  Job job(2, 16, options, tcp);
  // Rank 1 submits "late" and never waits: its background thread must take it to a cycle, and
  // join the one rank 0 waits in.
  auto on1 = allreduce_op("late");
  job.engines[1]->submit(on1, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto on0 = allreduce_op("late");
  job.engines[0]->submit(on0, true);
  job.engines[0]->wait(*on0, Clock::now() + std::chrono::seconds(10));
  CHECK(outcome(*on0) == "");
  CHECK(outcome(*on1) == "");  // run by rank 1's background thread
  CHECK(job.runners[1].ran == std::vector<std::string>{"late"});

  // Rank 0 waits on "quiet", which rank 1 submits 300 ms later without waiting: rank 0 rings,
  // rank 1's background thread joins each cycle, and the tensor runs once rank 1 brings it.
  auto q0 = allreduce_op("quiet");
  std::thread waiter([&] {
    job.engines[0]->submit(q0, true);
    job.engines[0]->wait(*q0, Clock::now() + std::chrono::seconds(10));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto q1 = allreduce_op("quiet");
  job.engines[1]->submit(q1, false);
  waiter.join();
  CHECK(outcome(*q0) == "");
  CHECK(outcome(*q1) == "");
  CHECK(job.engines[0]->stats().doorbells >= 1);
}

TEST_CASE(
    "cycle engine: after many batches that waiters took at once (the batching timer becomes a "
    "backstop), tensors nobody waits on still run",
    "[libhvd][engine]") {
  EngineOptions options;
  options.cycle_time = std::chrono::microseconds(200);
  Job job(2, 16, options);
  std::vector<std::thread> ranks;
  std::vector<std::vector<std::string>> errors(2);
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      for (int s = 0; s < 3 * BatchDelay::kStreak; ++s) {  // submit, then wait at once
        for (const std::string& e : step(*job.engines[static_cast<std::size_t>(r)], {"w"}))
          errors[static_cast<std::size_t>(r)].push_back(e);
      }
    });
  }
  for (auto& t : ranks) t.join();
  // Neither rank waits on these: only the ranks' timers (or a later submission) send them.
  std::vector<std::shared_ptr<hvd::detail::OpState>> ops;
  for (int r = 0; r < 2; ++r) {
    ops.push_back(allreduce_op("free"));
    job.engines[static_cast<std::size_t>(r)]->submit(ops.back(), false);
  }
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == std::vector<std::string>(3 * BatchDelay::kStreak, ""));
    CHECK(outcome(*ops[r], std::chrono::seconds(5)) == "");
    CHECK(job.runners[r].ran.back() == "free");
  }
}

TEST_CASE(
    "cycle engine: after a rank's goodbye, what waits on it fails and new tensors fail at "
    "once",
    "[libhvd][engine]") {
  Job job(2, 16);
  auto pending = allreduce_op("never");
  job.engines[0]->submit(pending, false);
  std::thread bye([&] { job.engines[1]->shutdown(); });  // rank 1 says goodbye
  job.engines[0]->wait(*pending, Clock::now() + std::chrono::seconds(10));
  bye.join();
  CHECK_THAT(outcome(*pending),
             ContainsSubstring("rank(s) 1 already shut down") ||
                 ContainsSubstring("rank 1 called hvd::shutdown() before submitting it"));
  // A departed peer, as a dead one: elastic training resets on it (hvd::elastic::run).
  CHECK(outcome_status(*pending) == HVD_ERR_PEER_LOST);
  auto later = allreduce_op("later");
  job.engines[0]->submit(later, true);
  CHECK_THAT(outcome(*later),
             ContainsSubstring("tensor 'later' cannot run: rank(s) 1 already shut down"));
  CHECK(outcome_status(*later) == HVD_ERR_PEER_LOST);
  CHECK_FALSE(job.engines[1]->broken());  // a goodbye, not a failure
  CHECK_FALSE(job.engines[0]->broken());
}

TEST_CASE(
    "cycle engine: warm ranks that bring as many cached tensors but not the same ones are "
    "decided in full (the steady-state shortcut declines), and run the same order",
    "[libhvd][engine]") {
  EngineOptions options;
  options.cycle_time = std::chrono::hours(1);  // only waiters start cycles: both post theirs
  Job job(2, 16, options);
  const std::vector<std::vector<std::string>> first = {{"a", "b"}, {"a", "c"}};
  const std::vector<std::vector<std::string>> then = {{"c"}, {"b"}};
  std::vector<std::vector<std::string>> errors(2);
  std::vector<hvd::EngineStats> warm(2), after(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      CycleEngine& engine = *job.engines[i];
      // Twice: new names, then hits alone (after which a cycle starts with the AND round).
      for (int round = 0; round < 2; ++round) {
        for (const std::string& e : step(engine, {"a", "b", "c"})) errors[i].push_back(e);
      }
      warm[i] = engine.stats();
      // Two hits each, {a, b} against {a, c}: only `a` is ready on both.
      std::vector<std::shared_ptr<hvd::detail::OpState>> ops;
      for (const std::string& name : first[i]) {
        ops.push_back(allreduce_op(name));
        engine.submit(ops.back(), false);
      }
      engine.wait(*ops.front(), Clock::time_point::max());
      errors[i].push_back(outcome(*ops.front()));
      for (const std::string& e : step(engine, then[i])) errors[i].push_back(e);
      engine.wait(*ops.back(), Clock::time_point::max());
      errors[i].push_back(outcome(*ops.back()));
      after[i] = engine.stats();
    });
  }
  for (auto& t : ranks) t.join();
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == std::vector<std::string>(errors[r].size(), ""));
    CHECK(job.runners[r].ran.size() == 9);
    CHECK(job.runners[r].ran == job.runners[0].ran);
    CHECK(after[r].cache_hits - warm[r].cache_hits == 3);  // every later tensor was cached
  }
}

TEST_CASE(
    "cycle engine: in the steady state a cycle is one AND round of cache bits (no allgather), "
    "whatever order each rank submits in",
    "[libhvd][engine]") {
  EngineOptions options;
  options.cycle_time = std::chrono::hours(1);  // only waiters start cycles, with all 20 queued
  Job job(3, 64, options);
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) names.push_back("w." + std::to_string(i));
  auto rounds = [&] {
    std::lock_guard<std::mutex> lock(job.shared->mutex);
    return std::pair{job.shared->gathers, job.shared->ands};
  };
  // Every rank submits its 20 before any waits (a barrier): a cycle started by a waiter, or by a
  // background thread it rings, then finds all 20 queued on every rank.
  auto run_step = [&](int number) {
    std::vector<std::thread> ranks;
    std::vector<std::vector<std::string>> errors(3);
    std::barrier submitted(3);
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        CycleEngine& engine = *job.engines[static_cast<std::size_t>(r)];
        std::vector<std::string> order = names;
        std::mt19937 rng(static_cast<unsigned>(100 * number + r));
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<std::shared_ptr<hvd::detail::OpState>> ops;
        for (const auto& name : order) {
          ops.push_back(allreduce_op(name));
          engine.submit(ops.back(), false);
        }
        submitted.arrive_and_wait();
        for (auto& op : ops) {
          engine.wait(*op, Clock::time_point::max());
          errors[static_cast<std::size_t>(r)].push_back(outcome(*op));
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (const auto& e : errors) CHECK(e == std::vector<std::string>(20, ""));
  };
  run_step(0);  // the first sight of every name: negotiated in full (allgather)
  run_step(1);  // all hits, still by allgather: its outcome lets the next cycle try the AND round
  const auto [gathers_warm, ands_warm] = rounds();
  CHECK(gathers_warm >= 2);
  CHECK(ands_warm == 0);  // new names: no AND round tried
  for (int step = 2; step <= 6; ++step) run_step(step);
  const auto [gathers, ands] = rounds();
  CHECK(gathers == gathers_warm);  // no allgather once every name is cached
  CHECK(ands - ands_warm == 5);    // one AND round per step
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(job.runners[r].ran.size() == 140);
    CHECK(job.runners[r].ran == job.runners[0].ran);
    CHECK(job.engines[r]->stats().cache_hits == 120);
    CHECK(job.engines[r]->stats().decided_by_bits == 5);
  }
}

TEST_CASE(
    "cycle engine: small allreduces brought alone run from the inputs gathered with their "
    "negotiation (eager), one round each, and a mismatch is still refused",
    "[libhvd][engine]") {
  const bool tcp = GENERATE(false, true);
  INFO((tcp ? "over TcpCycleTransport" : "over the in-process transport"));
  constexpr int kRanks = 3, kCalls = 20;
  Job job(kRanks, 16, {}, tcp);
  for (auto& runner : job.runners) runner.eager = true;
  // Each rank: kCalls synchronous-style calls of new names, then the same name 5 times (cached
  // after the first), int32 data that depends on the rank, the call and the element.
  // Every rank submits a call before any waits on it (a barrier): a synchronous submission starts
  // no cycle, so the call's cycle, started by a waiter or by the doorbell a waiter rings, finds it
  // queued on every rank. Without the barrier a rank the scheduler delays past kDoorbellAfter
  // (1 ms; seen on a loaded 2-core machine) is rung into the cycle with nothing, and the call then
  // runs collectively, which this runner does not reduce.
  std::vector<std::thread> ranks;
  std::vector<std::vector<std::string>> wrong(kRanks);
  std::barrier submitted(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      CycleEngine& engine = *job.engines[static_cast<std::size_t>(r)];
      for (int i = 0; i < kCalls + 5; ++i) {
        std::vector<std::int32_t> data{r, 10 * i, r * i, 7};
        auto op = allreduce_op(i < kCalls ? "s." + std::to_string(i) : "fixed");
        op->in = hvd::Tensor{data.data(), hvd::DataType::kInt32, {4}};
        engine.submit(op, true);
        submitted.arrive_and_wait();
        engine.wait(*op, Clock::now() + std::chrono::seconds(10));
        const std::vector<std::int32_t> want{0 + 1 + 2, 30 * i, 3 * i, 21};
        if (outcome(*op) != "" || data != want) {
          wrong[static_cast<std::size_t>(r)].push_back(std::to_string(i) + ": " + outcome(*op));
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  const auto [gathers, ands] = [&] {
    std::lock_guard<std::mutex> lock(job.shared->mutex);
    return std::pair{job.shared->gathers, job.shared->ands};
  }();
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    const auto i = static_cast<std::size_t>(r);
    CHECK(wrong[i].empty());
    CHECK(job.runners[i].eager_runs == kCalls + 5);
    CHECK(job.engines[i]->stats().eager == kCalls + 5);
    CHECK(job.engines[i]->stats().cache_hits == 4);  // "fixed" after its first call
    CHECK(job.runners[i].ran == job.runners[0].ran);
  }
  if (!tcp) {
    CHECK(gathers == kCalls + 5);  // one round per call: no AND round tried after an eager one
    CHECK(ands == 0);
  }

  // The same name with another shape on rank 2: refused with both shapes, as without data.
  std::vector<std::string> errors(kRanks);
  ranks.clear();
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      std::vector<std::int32_t> data(r == 2 ? 5 : 4, 1);
      auto op = allreduce_op("odd");
      op->request.shape = {static_cast<std::int64_t>(data.size())};
      op->in = hvd::Tensor{data.data(), hvd::DataType::kInt32, {op->request.shape[0]}};
      job.engines[static_cast<std::size_t>(r)]->submit(op, true);
      job.engines[static_cast<std::size_t>(r)]->wait(*op, Clock::now() + std::chrono::seconds(10));
      errors[static_cast<std::size_t>(r)] = outcome(*op);
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    CHECK_THAT(errors[static_cast<std::size_t>(r)],
               ContainsSubstring("[4]") && ContainsSubstring("[5]"));
    CHECK(job.engines[static_cast<std::size_t>(r)]->stats().eager == kCalls + 5);
  }
}

TEST_CASE("cycle engine: ranks that bring different ops alone run them collectively, not eagerly",
          "[libhvd][engine]") {
  Job job(2, 16);
  for (auto& runner : job.runners) runner.eager = true;
  // Rank 0 brings "a" then "b" in two cycles; rank 1 brings "b" then "a": no cycle has the same
  // op with data from both, so both run through run() once both ranks brought them.
  std::vector<std::int32_t> d0a(4, 1), d0b(4, 2), d1a(4, 3), d1b(4, 4);
  auto make = [](const std::string& name, std::vector<std::int32_t>& data) {
    auto op = allreduce_op(name);
    op->in = hvd::Tensor{data.data(), hvd::DataType::kInt32, {4}};
    return op;
  };
  auto a0 = make("a", d0a), b0 = make("b", d0b), a1 = make("a", d1a), b1 = make("b", d1b);
  std::thread rank1([&] {
    job.engines[1]->submit(b1, true);
    job.engines[1]->submit(a1, true);
    job.engines[1]->wait(*b1, Clock::now() + std::chrono::seconds(10));
    job.engines[1]->wait(*a1, Clock::now() + std::chrono::seconds(10));
  });
  job.engines[0]->submit(a0, true);
  job.engines[0]->wait(*a0, Clock::now() + std::chrono::seconds(10));
  job.engines[0]->submit(b0, true);
  job.engines[0]->wait(*b0, Clock::now() + std::chrono::seconds(10));
  rank1.join();
  for (auto* op : {&a0, &b0, &a1, &b1}) CHECK(outcome(**op) == "");
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    std::vector<std::string> ran = job.runners[r].ran;
    std::sort(ran.begin(), ran.end());
    CHECK(ran == std::vector<std::string>{"a", "b"});
    CHECK(job.runners[r].ran == job.runners[0].ran);
    // Rank 1 submitted both before either cycle: its contributions bring two ops, never one
    // alone with data, so nothing ran eagerly.
    CHECK(job.engines[r]->stats().eager == 0);
    CHECK(job.runners[r].eager_runs == 0);
  }
}
