// The engine's thread against a peer that breaks the control-plane protocol: two ranks' worth of
// engine, rank 1 real, rank 0 played by the test over a socketpair. A malformed message must fail
// the pending ops with an error naming the peer, never std::terminate the process. The same pair
// also shows what rank 1 sends: its batches (the batching delay's backstop).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "allreduce/api/status_error.h"
#include "allreduce/engine/engine.h"
#include "allreduce/engine/messages.h"
#include "allreduce/engine/op_state.h"
#include "hvd/hvd.hpp"
#include "tests/unit/libhvd_engine_helpers.h"

using Catch::Matchers::ContainsSubstring;
using namespace hvd::runtime;
using hvd::test::allreduce_op;
using hvd::test::outcome;

namespace {

// Nothing reaches it in these tests: no response is ever valid.
class NoRunner final : public OpRunner {
 public:
  void run(const std::vector<std::shared_ptr<hvd::detail::OpState>>&, Timeline*) override {}
};

// Two ranks' worth of engine: this rank's real one (`rank`), the other played by the test over a
// socketpair (`peer`, its end). `options.rank` and `.size` are set here.
struct EnginePair {
  hvd::UniqueFd peer;
  NoRunner runner;
  std::unique_ptr<Engine> engine;
  EnginePair(int rank, EngineOptions options) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    peer = hvd::UniqueFd(fds[0]);
    std::vector<hvd::UniqueFd> peers(2);
    peers[static_cast<size_t>(1 - rank)] = hvd::UniqueFd(fds[1]);
    options.rank = rank;
    options.size = 2;
    engine =
        std::make_unique<Engine>(runner, ControlPlane::adopt(rank, 2, std::move(peers)), options);
  }
};

}  // namespace

TEST_CASE("engine: a malformed message from the coordinator fails the pending ops, naming it",
          "[libhvd][engine]") {
  EnginePair pair(1, {});  // the test plays rank 0
  const hvd::UniqueFd& rank0 = pair.peer;
  Engine& engine = *pair.engine;

  auto op = allreduce_op("grad.0");
  engine.submit(op, true);
  engine.flush();  // the batch goes to "rank 0"
  // A frame of 16 bytes that are not a ResponseList.
  const std::uint32_t n = 16;
  std::string garbage(reinterpret_cast<const char*>(&n), 4);
  garbage += std::string(16, '\xff');
  REQUIRE(::write(rank0.get(), garbage.data(), garbage.size()) ==
          static_cast<ssize_t>(garbage.size()));

  const std::string error = outcome(*op);
  INFO(error);
  CHECK_THAT(error, ContainsSubstring("rank 0 sent a message this rank cannot read"));
  CHECK_THAT(error, ContainsSubstring("same libhvd version"));
  // The engine is failed for good: a new op is refused with the same reason.
  try {
    engine.submit(allreduce_op("grad.1"), true);
    FAIL("a failed engine must refuse new ops");
  } catch (const StatusError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("rank 0 sent a message this rank cannot read"));
  }
  // And rank 0's end sees this rank go away.
  char buf[4096];
  ssize_t got;
  while ((got = ::read(rank0.get(), buf, sizeof buf)) > 0) {
  }
  CHECK(got == 0);
}

// ---------------------------------------------------------------------------------------------
// A frozen coordinator (SIGSTOP, a debugger, a host that stalls) keeps its connections open: no
// EOF ever comes. The other ranks must not wait forever (the chaos suite found this hang).

namespace {

// One control-plane frame: a 4-byte length, then the message (control_plane.h): a request or
// response list, as the engine frames it for an eager allreduce's data (none here).
std::string frame(std::string list) {
  frame_contribution(list, {});
  const auto n = static_cast<std::uint32_t>(list.size());
  return std::string(reinterpret_cast<const char*>(&n), 4) + list;
}

hvd_status status_of(hvd::detail::OpState& op) {
  std::lock_guard<std::mutex> lock(op.mutex);
  if (!op.error) return HVD_OK;
  try {
    std::rethrow_exception(op.error);
  } catch (const hvd::RuntimeError& e) {
    return e.status();
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

bool done_within(hvd::detail::OpState& op, std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(op.mutex);
  return op.cv.wait_for(lock, limit, [&] { return op.finished(); });
}

}  // namespace

TEST_CASE("engine: a coordinator silent past the limit fails the waiting ops with PEER_LOST",
          "[libhvd][engine]") {
  EngineOptions options;
  options.coordinator_timeout = std::chrono::milliseconds(1500);
  EnginePair pair(1, options);  // "rank 0": reads nothing, answers nothing, stays connected
  const hvd::UniqueFd& rank0 = pair.peer;
  Engine& engine = *pair.engine;

  const auto start = std::chrono::steady_clock::now();
  auto op = allreduce_op("grad.0");
  engine.submit(op, true);
  engine.flush();
  // Keepalives from "rank 0" (empty response lists) hold the limit off for 3 s...
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
    const std::string keepalive = frame(encode(ResponseList{}));
    REQUIRE(::write(rank0.get(), keepalive.data(), keepalive.size()) ==
            static_cast<ssize_t>(keepalive.size()));
    CHECK_FALSE(done_within(*op, std::chrono::milliseconds(500)));
  }
  // ... and then silence: the op fails within the limit (and the 1 s it looks), not never.
  const auto silent = std::chrono::steady_clock::now();
  REQUIRE(done_within(*op, std::chrono::seconds(5)));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - silent).count();
  CHECK(waited >= 1.0);
  CHECK(waited < 3.5);
  CHECK(status_of(*op) == HVD_ERR_PEER_LOST);
  const std::string error = outcome(*op);
  INFO(error);
  CHECK_THAT(error, ContainsSubstring("rank 0 (the coordinator) has not been heard from"));
  CHECK_THAT(error, ContainsSubstring("'grad.0'"));
  CHECK_THAT(error, ContainsSubstring("HOROVOD_GLOO_TIMEOUT_SECONDS"));
}

TEST_CASE("engine: the coordinator tells ranks waiting on a late rank that it is alive",
          "[libhvd][engine]") {
  EngineOptions options;
  options.controller.size = 2;
  EnginePair pair(0, options);  // "rank 1": submits grad.0, which rank 0 never does
  const hvd::UniqueFd& rank1 = pair.peer;

  RequestList list;
  list.requests.push_back(allreduce_op("grad.0")->request);
  const std::string request = frame(encode(list));
  REQUIRE(::write(rank1.get(), request.data(), request.size()) ==
          static_cast<ssize_t>(request.size()));
  // About one keepalive a second, each an empty response list.
  std::string inbox;
  int keepalives = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(3500);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{rank1.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t got = ::read(rank1.get(), buf, sizeof buf);
    REQUIRE(got > 0);
    inbox.append(buf, static_cast<size_t>(got));
    while (inbox.size() >= 4) {
      std::uint32_t n = 0;
      std::memcpy(&n, inbox.data(), 4);
      if (inbox.size() < 4 + n) break;
      const ResponseList response =
          decode_responses(unframe_contribution(std::string_view(inbox).substr(4, n)).head);
      CHECK(response.responses.empty());
      CHECK(response.fatal.empty());
      ++keepalives;
      inbox.erase(0, 4 + n);
    }
  }
  CHECK(keepalives >= 2);
  CHECK(keepalives <= 5);
}

TEST_CASE(
    "engine: after many batches sent at once by waiters (the batching timer becomes a "
    "backstop), a submission nobody waits on still goes to the coordinator",
    "[libhvd][engine]") {
  EngineOptions options;
  options.cycle_time = std::chrono::microseconds(200);
  EnginePair pair(1, options);  // this rank is 1; the test plays the coordinator, rank 0
  const hvd::UniqueFd& rank0 = pair.peer;
  std::string inbox;
  // The names rank 1 sends, as they arrive, waiting at most `limit` for `name`.
  auto receive_until = [&](const std::string& name, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      while (inbox.size() >= 4) {
        std::uint32_t n = 0;
        std::memcpy(&n, inbox.data(), 4);
        if (inbox.size() < 4 + n) break;
        const RequestList list =
            decode_requests(unframe_contribution(std::string_view(inbox).substr(4, n)).head);
        inbox.erase(0, 4 + n);
        for (const Request& q : list.requests) {
          if (q.name == name) return true;
        }
      }
      pollfd p{rank0.get(), POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      char buf[4096];
      const ssize_t got = ::read(rank0.get(), buf, sizeof buf);
      if (got <= 0) return false;
      inbox.append(buf, static_cast<size_t>(got));
    }
    return false;
  };
  std::vector<std::shared_ptr<hvd::detail::OpState>> ops;
  for (int i = 0; i < 3 * BatchDelay::kStreak; ++i) {  // submit, then wait at once: sent now
    ops.push_back(allreduce_op("w." + std::to_string(i)));
    pair.engine->submit(ops.back(), false);
    pair.engine->wait(*ops.back(), Clock::time_point::max());
    REQUIRE(receive_until("w." + std::to_string(i), std::chrono::seconds(5)));
  }
  ops.push_back(allreduce_op("free"));
  pair.engine->submit(ops.back(), false);  // nobody waits: the timer (the backstop) sends it
  CHECK(receive_until("free", std::chrono::seconds(5)));
}
