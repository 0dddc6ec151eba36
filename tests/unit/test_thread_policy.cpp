// run_with_thread_policy (common/thread_policy.h) and the one place that uses it: Gloo's TCP
// event-loop thread under HOROVOD_GLOO_LOOP_POLICY. The policies are read back from the kernel
// (sched_getscheduler), on the threads themselves.
#include <sched.h>
#include <sys/types.h>
#include "tests/support/catch.h"

#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/thread_policy.h"

#if HVD_TEST_HAS_GLOO
#include <gloo/rendezvous/hash_store.h>

#include "allreduce/backends/gloo_backend.h"
#endif

namespace {

using hvd::ThreadPolicy;

// The policy of a thread that `body` starts, as that thread sees it.
int policy_of_a_thread_started_under(ThreadPolicy policy) {
  int seen = -1;
  hvd::run_with_thread_policy(policy,
                              [&] { std::thread([&] { seen = ::sched_getscheduler(0); }).join(); });
  return seen;
}

std::set<pid_t> tasks() {
  std::set<pid_t> ids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    ids.insert(static_cast<pid_t>(std::stol(e.path().filename().string())));
  }
  return ids;
}

}  // namespace

TEST_CASE("thread policy: names", "[toolkit]") {
  for (ThreadPolicy p : {ThreadPolicy::kNormal, ThreadPolicy::kBatch, ThreadPolicy::kIdle}) {
    CHECK(hvd::parse_thread_policy(hvd::thread_policy_name(p)) == p);
  }
  for (const char* bad : {"", "Batch", "fifo", "normal ", "SCHED_IDLE"}) {
    INFO(bad);
    CHECK_FALSE(hvd::parse_thread_policy(bad));
  }
}

TEST_CASE("thread policy: threads started by the body inherit it, the caller keeps its own",
          "[toolkit]") {
  const int caller = ::sched_getscheduler(0);
  REQUIRE(caller == SCHED_OTHER);
  CHECK(policy_of_a_thread_started_under(ThreadPolicy::kBatch) == SCHED_BATCH);
  CHECK(policy_of_a_thread_started_under(ThreadPolicy::kIdle) == SCHED_IDLE);
  CHECK(policy_of_a_thread_started_under(ThreadPolicy::kNormal) == SCHED_OTHER);
  CHECK(::sched_getscheduler(0) == caller);
}

TEST_CASE("thread policy: the body's exception reaches the caller", "[toolkit]") {
  CHECK_THROWS_WITH(hvd::run_with_thread_policy(ThreadPolicy::kBatch,
                                                [] { throw std::runtime_error("from the body"); }),
                    "from the body");
  int ran = 0;
  CHECK(hvd::run_with_thread_policy(ThreadPolicy::kIdle, [&] { ++ran; }) == 0);
  CHECK(ran == 1);
}

#if HVD_TEST_HAS_GLOO
TEST_CASE("gloo: HOROVOD_GLOO_LOOP_POLICY reaches Gloo's event-loop thread and no other",
          "[libhvd]") {
  const auto [policy, expected] = GENERATE(std::pair{ThreadPolicy::kNormal, SCHED_OTHER},
                                           std::pair{ThreadPolicy::kBatch, SCHED_BATCH},
                                           std::pair{ThreadPolicy::kIdle, SCHED_IDLE});
  INFO(hvd::thread_policy_name(policy));
  const std::set<pid_t> before = tasks();
  gloo::rendezvous::HashStore store;
  hvd::runtime::GlooBackend gloo({.rank = 0,
                                  .size = 1,
                                  .bind_address = "127.0.0.1",
                                  .timeout = std::chrono::milliseconds(10000),
                                  .loop_policy = policy},
                                 store, "an in-process store");
  int started = 0;
  for (pid_t t : tasks()) {
    if (before.count(t) != 0) continue;
    ++started;
    CHECK(::sched_getscheduler(t) == expected);  // Gloo's TCP device: its event loop
  }
  CHECK(started >= 1);
  for (pid_t t : before) {
    if (::sched_getscheduler(t) >= 0) CHECK(::sched_getscheduler(t) == SCHED_OTHER);
  }
  float one = 1.0f;
  gloo.allreduce(&one, 1, hvd::DataType::kFloat32, hvd::ReduceOp::kSum);
  CHECK(one == 1.0f);
}
#endif
