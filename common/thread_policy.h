// Scheduling policy for threads a library starts where we cannot reach them: Gloo's TCP device
// starts its event-loop thread inside CreateDevice(). Linux threads inherit their creator's
// policy, so the device is created on a short-lived thread that lowered its own policy first;
// the caller's policy is never touched (an unprivileged thread could not raise it back from
// SCHED_IDLE).
//
// Why (bench/README.md, "Gloo's event loop and the scheduler"): on a host whose cores the ranks
// have to themselves, Gloo's event loop under SCHED_BATCH (no wake-up preemption) made small
// collectives 1.2-2x faster and a training epoch about 15% shorter on the 2-core development VM;
// on a host whose cores are all busy with other work it costs time (14-29% longer), and
// SCHED_IDLE starves it (14x).
#pragma once

#include <functional>
#include <optional>
#include <string_view>

namespace hvd {

enum class ThreadPolicy {
  kNormal,  // SCHED_OTHER: what the thread would have had
  kBatch,   // SCHED_BATCH: a fair share of the CPU, but no wake-up preemption of other threads
  kIdle,    // SCHED_IDLE: runs only when nothing else wants the CPU
};

// "normal", "batch" or "idle" (exactly, lower case); nullopt for anything else.
std::optional<ThreadPolicy> parse_thread_policy(std::string_view text);
const char* thread_policy_name(ThreadPolicy policy);

// Runs `body` on a new thread whose scheduling policy is `policy` (kNormal: left as inherited),
// waits for it, and rethrows what `body` threw. Threads that `body` starts inherit the policy.
// Returns 0, or the errno of a refused sched_setscheduler() (then `body` ran all the same, under
// the inherited policy): the caller decides whether to say so.
int run_with_thread_policy(ThreadPolicy policy, const std::function<void()>& body);

}  // namespace hvd
