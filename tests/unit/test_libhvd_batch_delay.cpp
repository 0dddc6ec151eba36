// The batching delay (allreduce/engine/engine.h, BatchDelay): which timer a batch's first
// submission sets, read back from the Wakeup's real timerfd, and when a later submission makes
// the batch due itself. The engines that use it: test_libhvd_cycle_engine.cpp.
#include <sys/timerfd.h>

#include <chrono>
#include <thread>
#include "tests/support/catch.h"

#include "allreduce/engine/engine.h"

using namespace hvd::runtime;
using namespace std::chrono_literals;

namespace {

// How long until the Wakeup's timer fires; 0 when it is disarmed.
std::chrono::microseconds timer_left(Wakeup& wakeup) {
  itimerspec spec{};
  REQUIRE(::timerfd_gettime(wakeup.timer_fd(), &spec) == 0);
  return std::chrono::seconds(spec.it_value.tv_sec) +
         std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::nanoseconds(spec.it_value.tv_nsec));
}

// kStreak batches that a waiter takes at once: the next batch gets the backstop.
void start_streak(BatchDelay& delay) {
  for (int batch = 0; batch < BatchDelay::kStreak; ++batch) {
    CHECK_FALSE(delay.add());
    delay.taken(true);
  }
}

}  // namespace

TEST_CASE(
    "batch delay: a batch's first submission sets the cycle time, until waiters take "
    "kStreak batches in a row before it ends, then the longer backstop",
    "[libhvd][engine]") {
  Wakeup wakeup;
  REQUIRE(wakeup.ok());
  // Times long enough for a loaded machine: a waiter on this thread is prompt.
  BatchDelay delay(wakeup, 200ms, 10s);
  for (int batch = 0; batch < BatchDelay::kStreak; ++batch) {
    INFO("batch " << batch);
    CHECK_FALSE(delay.add());
    CHECK(timer_left(wakeup) > 100ms);
    CHECK(timer_left(wakeup) <= 200ms);
    CHECK_FALSE(delay.add());  // later submissions of the batch set nothing
    delay.taken(true);         // a waiter takes it at once
    CHECK(timer_left(wakeup) == 0us);
  }
  // The streak is on: the backstop, which a later submission does not cut short before the
  // cycle time has passed, and which stays armed when a waiter takes the batch (no system call
  // per batch): the next batch keeps it.
  CHECK_FALSE(delay.add());
  const auto backstop = timer_left(wakeup);
  CHECK(backstop > 5s);
  CHECK_FALSE(delay.add());
  delay.taken(true);
  CHECK(timer_left(wakeup) > 5s);
  CHECK_FALSE(delay.add());
  CHECK(timer_left(wakeup) <= backstop);  // not armed again
  delay.taken(true);
  CHECK_FALSE(delay.fired());      // it fires with nothing queued: nothing to do, nothing armed
  CHECK(timer_left(wakeup) > 5s);  // (the fake firing left the real timer alone)

  // A batch that the timer (or a doorbell) took, not a waiter, ends the streak.
  CHECK_FALSE(delay.add());
  CHECK(timer_left(wakeup) > 5s);
  delay.taken(false);
  CHECK_FALSE(delay.add());
  CHECK(timer_left(wakeup) <= 200ms);
  delay.taken(true);
}

TEST_CASE(
    "batch delay: under the backstop, the first submission after the cycle time makes "
    "the batch due, once, and a waiter that comes late ends the streak",
    "[libhvd][engine]") {
  Wakeup wakeup;
  REQUIRE(wakeup.ok());
  BatchDelay delay(wakeup, 100ms, 10s);
  start_streak(delay);
  CHECK_FALSE(delay.add());
  CHECK(timer_left(wakeup) > 5s);  // the backstop
  std::this_thread::sleep_for(150ms);
  CHECK(delay.add());        // older than the cycle time: due now
  CHECK_FALSE(delay.add());  // already due: the engine's thread is on its way
  delay.taken(true);         // a waiter, but after the delay ended: not prompt
  CHECK_FALSE(delay.add());
  CHECK(timer_left(wakeup) <= 100ms);  // the short timer again
  delay.taken(true);
}

TEST_CASE(
    "batch delay: a backstop left from an earlier batch that fires under a young batch is "
    "armed again for that batch, and one older than the cycle time is due",
    "[libhvd][engine]") {
  Wakeup wakeup;
  REQUIRE(wakeup.ok());
  BatchDelay delay(wakeup, 100ms, 10s);
  start_streak(delay);
  CHECK_FALSE(delay.add());  // the backstop, armed now
  delay.taken(true);         // and left running
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(delay.add());  // a new batch under the old backstop: nothing armed
  const auto left = timer_left(wakeup);
  CHECK(left <= 10s - 20ms);
  // The old backstop fires (called as the engine's thread would, after draining it): this
  // batch is younger than the cycle time, so not due; its own backstop is armed.
  CHECK_FALSE(delay.fired());
  CHECK(timer_left(wakeup) > left);
  CHECK(timer_left(wakeup) <= 10s);
  std::this_thread::sleep_for(150ms);
  CHECK(delay.fired());  // older than the cycle time: due
  delay.taken(false);    // the engine's thread took it: the streak ends
  CHECK_FALSE(delay.add());
  CHECK(timer_left(wakeup) <= 100ms);  // the short timer again
  delay.taken(true);
  CHECK(timer_left(wakeup) == 0us);  // a short timer is taken off with its batch
}

TEST_CASE("batch delay: a cycle time of 0 makes every submission due at once, no timer",
          "[libhvd][engine]") {
  Wakeup wakeup;
  REQUIRE(wakeup.ok());
  BatchDelay delay(wakeup, 0us);
  CHECK(delay.add());
  CHECK(delay.add());
  CHECK(timer_left(wakeup) == 0us);
  delay.taken(true);
}
