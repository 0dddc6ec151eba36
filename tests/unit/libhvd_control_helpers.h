// Hand-made requests, responses and a fake clock for the unit tests of libhvd's control plane
// (test_libhvd_messages.cpp: the codec; test_libhvd_controller.cpp: the coordinator).
#pragma once

#include "tests/support/catch.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/api/status_error.h"
#include "allreduce/engine/controller.h"
#include "allreduce/engine/messages.h"
#include "hvd/hvd.hpp"

using hvd::DataType;
using hvd::Device;
using hvd::ReduceOp;
using hvd::runtime::Clock;
using hvd::runtime::Controller;
using hvd::runtime::ControllerOptions;
using hvd::runtime::OpKind;
using hvd::runtime::Request;
using hvd::runtime::RequestList;
using hvd::runtime::Response;
using hvd::runtime::ResponseList;
using hvd::runtime::StatusError;
using Names = std::vector<std::string>;
using namespace std::string_literals;

namespace hvd::test::control {

// A point of the fake clock, `seconds` after its epoch.
inline Clock::time_point at(double seconds) {
  return Clock::time_point{} +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

inline Request op(OpKind kind, std::string name, std::vector<std::int64_t> shape = {4},
                  DataType dtype = DataType::kFloat32) {
  Request r;
  r.name = std::move(name);
  r.kind = kind;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}

inline Request allreduce(std::string name, std::vector<std::int64_t> shape = {4},
                         DataType dtype = DataType::kFloat32) {
  return op(OpKind::kAllreduce, std::move(name), std::move(shape), dtype);
}

inline Request broadcast(std::string name, std::int32_t root) {
  Request r = op(OpKind::kBroadcast, std::move(name));
  r.root = root;
  return r;
}

inline RequestList list_of(std::vector<Request> requests, bool shutdown = false) {
  return {std::move(requests), shutdown};
}

inline RequestList names_list(const Names& names) {
  RequestList list;
  for (const std::string& n : names) list.requests.push_back(allreduce(n));
  return list;
}

inline Controller controller(int size, std::size_t fusion_threshold = 64u << 20) {
  return Controller(ControllerOptions{.size = size, .fusion_threshold = fusion_threshold});
}

// Every response's names, in order.
inline std::vector<Names> names_of(const ResponseList& list) {
  std::vector<Names> out;
  for (const Response& r : list.responses) out.push_back(r.names);
  return out;
}

// Rank 0 submits `a`, rank 1 submits `b` (size 2); returns the one response's error.
inline std::string error_between(const Request& a, const Request& b) {
  Controller c = controller(2);
  c.add(0, list_of({a}), at(0));
  c.add(1, list_of({b}), at(0));
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  CHECK(out.responses[0].names == Names{a.name});
  CHECK(out.fatal.empty());
  return out.responses[0].error;
}

template <class Fn>
inline std::optional<hvd_status> status_thrown(Fn&& fn) {
  try {
    fn();
  } catch (const StatusError& e) {
    return e.status();
  }
  return std::nullopt;
}

inline RequestList full_request_list() {
  Request a;
  a.name = "grad/layer 1/w\xC3\xBC\xE2\x9C\x93 \0tail"s;  // space, UTF-8 and a NUL byte
  a.kind = OpKind::kAlltoall;
  a.dtype = DataType::kBFloat16;
  a.device = Device::cuda(3);
  a.shape = {std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::max(), 0, -1, 7};
  a.op = ReduceOp::kProduct;
  a.prescale = 0.125;
  a.postscale = -3.5e300;
  a.root = 7;
  a.group = 0xFEDCBA9876543210ULL;  // a grouped op's id and size
  a.group_size = 0xFFFFFFFFu;
  Request b = broadcast("", -2);  // empty name and scalar shape
  b.shape = {};
  b.dtype = DataType::kInt64;
  Request c = op(OpKind::kReducescatter, std::string(1000, 'x'), std::vector<std::int64_t>(64, 3),
                 DataType::kUInt8);
  c.op = ReduceOp::kMin;
  return list_of({a, b, c}, true);
}

inline ResponseList full_response_list() {
  ResponseList list;
  list.fatal = "rank 3 left\n\0with a NUL"s;
  list.fatal_status = HVD_ERR_PEER_LOST;
  list.responses.push_back({OpKind::kBarrier, {"b\0arrier"s}, ""});
  list.responses.push_back({OpKind::kAllreduce, {"a", "b c", "\xE2\x88\x91"}, ""});
  list.responses.push_back({OpKind::kAlltoall, {"z"}, "tensor 'z': shape mismatch"});
  list.responses.push_back({OpKind::kBroadcast, {}, ""});
  list.responses.push_back({OpKind::kAllgather, {"g"}, "tensor 'g': rank 1 left", true});
  return list;
}

}  // namespace hvd::test::control

using namespace hvd::test::control;  // NOLINT: test helpers
