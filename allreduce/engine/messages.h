// The engine's control-plane messages: what a rank asks for (Request) and what the coordinator
// decides (Response), in a small binary encoding. Workers send RequestLists to rank 0; rank 0
// sends every rank the same ResponseLists, in the same order: that order is the order in which
// every rank runs its collectives.
//
// Encoding: little-endian fixed-width integers, strings and vectors prefixed by a u32 count.
// decode_*() throw StatusError(HVD_ERR_INTERNAL) on a truncated or malformed message.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/hvd.hpp"

namespace hvd::runtime {

enum class OpKind : std::uint8_t {
  kAllreduce = 0,
  kBroadcast = 1,
  kAllgather = 2,
  kReducescatter = 3,
  kAlltoall = 4,
  kBarrier = 5,
  // hvd::join(): this rank has no more data (cycle_engine.h). No collective: once every rank
  // joined, each join op finishes with the last rank to join.
  kJoin = 6,
};
const char* op_kind_name(OpKind kind);

// The name of a synchronous call's op (hvd::allreduce(...) without a name): "hvd.<kind>.<n>",
// the n-th of its kind on this rank. Every rank makes its calls in the same order, so the names
// match across ranks; they never repeat, so the response cache does not keep them.
std::string automatic_name(OpKind kind, long long n);
// Whether `name` has that form (a user's tensor named so counts as automatic too).
bool is_automatic_name(std::string_view name);

// One rank's submission of one named op: everything the coordinator validates across ranks.
struct Request {
  std::string name;
  OpKind kind = OpKind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device{};
  std::vector<std::int64_t> shape;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  std::int32_t root = 0;
  // Grouped ops (hvd::grouped_allreduce_async, ...): the group's id (group_id() of its kind and
  // name; 0: not in a group) and its member count. The coordinator runs a group as one unit: once
  // every member is ready on every rank, all of it in one response (controller.h).
  std::uint64_t group = 0;
  std::uint32_t group_size = 0;
  bool operator==(const Request&) const = default;
};
// The id of the group of `kind` named `base` (its members are "<base>_<i>of<n>"): a hash
// (FNV-1a 64) that is never 0, the same on every rank for the same call and from step to step (a
// group's requests stay response-cache hits). The name, not the members, makes the id, so that
// ranks passing different tensors to one grouped call are told so (controller.h).
std::uint64_t group_id(OpKind kind, std::string_view base);
// "hvd.allreduce.3_2of4": the name of member `index` (from 0) of a group of `count` under `base`.
std::string group_member_name(std::string_view base, std::size_t index, std::size_t count);
// The group name in a member's name ("grads" for "grads_2of4"; the name itself otherwise).
std::string_view group_base(std::string_view member);

struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;  // this rank is shutting down: nothing more will come from it
  bool operator==(const RequestList&) const = default;
};

// Run these tensors (one collective; several names = fused), or fail them with `error`.
struct Response {
  OpKind kind = OpKind::kAllreduce;
  std::vector<std::string> names;
  std::string error;  // non-empty: every rank fails these names' handles with it
  // The error is a rank's departure (it shut down before submitting these names): the handles
  // fail with HVD_ERR_PEER_LOST, as when a peer dies, not HVD_ERR_INVALID_ARGUMENT.
  bool departed = false;
  bool operator==(const Response&) const = default;
};

struct ResponseList {
  std::vector<Response> responses;
  std::string fatal;  // non-empty: the job is broken (stall shutdown, a rank left); stop
  // What the ops fail with: HVD_ERR_PEER_LOST when a rank left, else HVD_ERR_BACKEND.
  hvd_status fatal_status = HVD_ERR_BACKEND;
  bool operator==(const ResponseList&) const = default;
};

std::string encode(const RequestList& list);
std::string encode(const ResponseList& list);
RequestList decode_requests(std::string_view bytes);
ResponseList decode_responses(std::string_view bytes);

// Negotiation cycles (cycle_engine.h): one rank's part of a cycle, what it submitted since its
// last one; the cached requests as response-cache slots, the others in full.
struct CycleContribution {
  std::vector<std::uint32_t> hits;
  RequestList misses;  // .shutdown: this rank says goodbye
  bool operator==(const CycleContribution&) const = default;
};

// A message on the TCP control plane between cycles: "join cycle N" (a rank waits in it), or
// the job is over (stall shutdown, a rank lost) with `fatal` saying why.
struct CycleSignal {
  std::uint64_t doorbell = 0;  // the cycle to join
  std::string fatal;
  hvd_status fatal_status = HVD_ERR_BACKEND;
  bool operator==(const CycleSignal&) const = default;
};

std::string encode(const CycleContribution& c);
// The same bytes as encode(CycleContribution{hits, {misses, shutdown}}), from the submitted
// requests themselves (no copy of each).
std::string encode_contribution(std::span<const std::uint32_t> hits,
                                std::span<const Request* const> misses, bool shutdown);
std::string encode(const CycleSignal& s);
CycleContribution decode_contribution(std::string_view bytes);

// A contribution as the allgather round carries it: the encoded CycleContribution (its head),
// then, for a rank that brought one small allreduce alone, that tensor's input bytes ("eager
// data": every rank can reduce the gathered inputs itself, with no collective after the round;
// cycle_engine.h), starting at a multiple of kEagerAlign in the message, then a trailer of two
// u32: the head's length and the data's.
inline constexpr std::size_t kEagerAlign = 16;
struct FramedContribution {
  std::string_view head;
  std::string_view data;  // empty: none
};
// Appends `data` (may be empty) and the trailer to `head`, which becomes the framed message.
void frame_contribution(std::string& head, std::string_view data);
// Throws StatusError(HVD_ERR_INTERNAL) when the trailer does not describe `bytes`.
FramedContribution unframe_contribution(std::string_view bytes);
CycleSignal decode_signal(std::string_view bytes);

}  // namespace hvd::runtime
