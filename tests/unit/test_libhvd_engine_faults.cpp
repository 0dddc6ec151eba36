// The engine's thread against a peer that breaks the control-plane protocol: two ranks' worth of
// engine, rank 1 real, rank 0 played by the test over a socketpair. A malformed message must fail
// the pending ops with an error naming the peer, never std::terminate the process.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/api/status_error.h"
#include "allreduce/engine/engine.h"
#include "allreduce/engine/op_state.h"

using Catch::Matchers::Contains;
using namespace hvd::runtime;

namespace {

// Nothing reaches it in these tests: no response is ever valid.
class NoRunner final : public OpRunner {
 public:
  void run(const std::vector<std::shared_ptr<hvd::detail::OpState>>&, Timeline*) override {}
};

std::shared_ptr<hvd::detail::OpState> allreduce_op(const std::string& name) {
  auto op = std::make_shared<hvd::detail::OpState>();
  op->request.name = name;
  op->request.kind = OpKind::kAllreduce;
  op->request.dtype = hvd::DataType::kFloat32;
  op->request.shape = {4};
  return op;
}

// Waits for the op's outcome (at most 10 s) and returns its error text, or "" when it succeeded.
std::string outcome(hvd::detail::OpState& op) {
  std::unique_lock<std::mutex> lock(op.mutex);
  if (!op.cv.wait_for(lock, std::chrono::seconds(10), [&] { return op.done; })) return "timeout";
  if (!op.error) return "";
  try {
    std::rethrow_exception(op.error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("engine: a malformed message from the coordinator fails the pending ops, naming it",
          "[libhvd][engine]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  hvd::UniqueFd rank0(fds[0]);  // the test's end: it plays rank 0
  std::vector<hvd::UniqueFd> peers;
  peers.emplace_back(fds[1]);
  peers.emplace_back();
  NoRunner runner;
  EngineOptions options;
  options.rank = 1;
  options.size = 2;
  Engine engine(runner, ControlPlane::adopt(1, 2, std::move(peers)), options);

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
  CHECK_THAT(error, Contains("rank 0 sent a message this rank cannot read"));
  CHECK_THAT(error, Contains("same libhvd version"));
  // The engine is failed for good: a new op is refused with the same reason.
  try {
    engine.submit(allreduce_op("grad.1"), true);
    FAIL("a failed engine must refuse new ops");
  } catch (const StatusError& e) {
    CHECK_THAT(e.what(), Contains("rank 0 sent a message this rank cannot read"));
  }
  // And rank 0's end sees this rank go away.
  char buf[4096];
  ssize_t got;
  while ((got = ::read(rank0.get(), buf, sizeof buf)) > 0) {
  }
  CHECK(got == 0);
}
