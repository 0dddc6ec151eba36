// What the engine unit tests share (test_libhvd_engine_faults.cpp, test_libhvd_cycle_engine.cpp):
// a submitted op and its outcome.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "allreduce/engine/op_state.h"

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

}  // namespace hvd::test
