// What the engine unit tests share (test_libhvd_engine_faults.cpp, test_libhvd_cycle_engine.cpp,
// test_libhvd_tcp_cycle_transport.cpp): a submitted op and its outcome, ranks connected in a star.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "allreduce/api/status_error.h"
#include "allreduce/engine/op_state.h"
#include "common/unique_fd.h"

namespace hvd::test {

// A 4-element float32 allreduce named `name`, ready to submit.
inline std::shared_ptr<hvd::detail::OpState> allreduce_op(const std::string& name) {
  auto op = std::make_shared<hvd::detail::OpState>();
  op->request.name = name;
  op->request.kind = hvd::runtime::OpKind::kAllreduce;
  op->request.dtype = hvd::DataType::kFloat32;
  op->request.shape = {4};
  return op;
}

// Waits for the op's outcome (at most `limit`) and returns its error text, "" when it succeeded,
// "timeout" when it did not finish.
// The status a finished op failed with (HVD_OK when it succeeded).
inline hvd_status outcome_status(hvd::detail::OpState& op) {
  std::lock_guard<std::mutex> lock(op.mutex);
  if (!op.error) return HVD_OK;
  try {
    std::rethrow_exception(op.error);
  } catch (const hvd::RuntimeError& e) {  // op_failure()
    return e.status();
  } catch (const hvd::runtime::StatusError& e) {
    return e.status();
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

inline std::string outcome(hvd::detail::OpState& op,
                           std::chrono::seconds limit = std::chrono::seconds(10)) {
  std::unique_lock<std::mutex> lock(op.mutex);
  if (!op.cv.wait_for(lock, limit, [&] { return op.finished(); })) return "timeout";
  if (!op.error) return "";
  try {
    std::rethrow_exception(op.error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Connections by rank as ControlPlane::adopt takes them: rank 0 to every rank, the others to rank
// 0 (socketpairs).
inline std::vector<std::vector<hvd::UniqueFd>> socketpair_star(int n) {
  std::vector<std::vector<hvd::UniqueFd>> peers(static_cast<std::size_t>(n));
  for (auto& p : peers) p.resize(static_cast<std::size_t>(n));
  for (int r = 1; r < n; ++r) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      throw std::runtime_error("socketpair() failed");
    }
    peers[0][static_cast<std::size_t>(r)] = hvd::UniqueFd(fds[0]);
    peers[static_cast<std::size_t>(r)][0] = hvd::UniqueFd(fds[1]);
  }
  return peers;
}

}  // namespace hvd::test
