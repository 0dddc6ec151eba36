#include "common/thread_policy.h"

#include <sched.h>

#include <cerrno>
#include <exception>
#include <thread>

namespace hvd {

std::optional<ThreadPolicy> parse_thread_policy(std::string_view text) {
  if (text == "normal") return ThreadPolicy::kNormal;
  if (text == "batch") return ThreadPolicy::kBatch;
  if (text == "idle") return ThreadPolicy::kIdle;
  return std::nullopt;
}

const char* thread_policy_name(ThreadPolicy policy) {
  switch (policy) {
    case ThreadPolicy::kBatch:
      return "batch";
    case ThreadPolicy::kIdle:
      return "idle";
    case ThreadPolicy::kNormal:
      break;
  }
  return "normal";
}

int run_with_thread_policy(ThreadPolicy policy, const std::function<void()>& body) {
  int error = 0;
  std::exception_ptr thrown;
  std::thread([&] {
    if (policy != ThreadPolicy::kNormal) {
      const sched_param param{};  // priority 0: the only one these policies take
      const int linux_policy = policy == ThreadPolicy::kBatch ? SCHED_BATCH : SCHED_IDLE;
      if (::sched_setscheduler(0, linux_policy, &param) != 0) error = errno;  // 0: this thread
    }
    try {
      body();
    } catch (...) {
      thrown = std::current_exception();
    }
  }).join();
  if (thrown) std::rethrow_exception(thrown);
  return error;
}

}  // namespace hvd
