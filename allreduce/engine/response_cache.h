// The response cache (Horovod's HOROVOD_CACHE_CAPACITY): the requests this rank submitted that
// every rank agreed on, so that the next submission of the same tensor travels as a slot number
// instead of a full request. Every rank updates its cache at the same points of the same
// sequence of negotiation cycles (CycleEngine), so a slot number names the same tensor on every
// rank; what each slot holds is this rank's own request (an allgather's first dimension may
// differ between ranks, nothing the coordinator validates does).
//
// The synchronous calls' automatic names (is_automatic_name) are never kept: each is used once,
// and keeping them would only evict the tensors that come back.
//
// Least recently used out first; "use" is a put(), which happens when a response runs, in the
// agreed order. Not thread-safe: the engine's driver lock guards it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "allreduce/engine/messages.h"

namespace hvd::runtime {

class ResponseCache {
 public:
  explicit ResponseCache(std::size_t capacity) : capacity_(capacity) {}

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return by_name_.size(); }
  // Slot numbers in use are below this (it only grows, up to the capacity).
  std::size_t slot_count() const { return slots_.size(); }

  // The slot of `request`'s name when it holds exactly this request; nullopt otherwise (not
  // cached, or cached with another shape, dtype, ...: a miss, negotiated in full).
  std::optional<std::uint32_t> hit(const Request& request) const;
  // The request in `slot`; nullptr for a slot that holds nothing (a malformed message).
  const Request* at(std::uint32_t slot) const;

  static constexpr std::uint32_t kNoSlot = 0xFFFFFFFF;

  // A response for request.name ran: cache (or refresh) it as the most recently used, evicting
  // the least recently used when full. Nothing with capacity 0. `hint`: the slot hit() gave for
  // it when it was announced (kNoSlot: none), looked at before the name is hashed; the slot may
  // since have gone to another name (then the hint is ignored).
  void put(const Request& request, std::uint32_t hint = kNoSlot);
  // A response failed (a mismatch, a departed rank): the name is negotiated in full next time.
  void erase(const std::string& name);

 private:
  // The used slots form a list in order of use, linked by slot numbers inside the slots (no
  // node per entry): a refresh moves its slot to the front, a full cache evicts the back.
  struct Slot {
    Request request;
    std::uint32_t newer = kNoSlot;  // towards the most recently used
    std::uint32_t older = kNoSlot;  // towards the least recently used
    bool used = false;
  };
  void unlink(std::uint32_t id);
  void push_front(std::uint32_t id);

  std::size_t capacity_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;  // slots emptied by erase()
  std::uint32_t newest_ = kNoSlot;
  std::uint32_t oldest_ = kNoSlot;
  std::unordered_map<std::string, std::uint32_t> by_name_;
};

}  // namespace hvd::runtime
