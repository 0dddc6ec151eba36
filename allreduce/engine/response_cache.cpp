#include "allreduce/engine/response_cache.h"

namespace hvd::runtime {

std::optional<std::uint32_t> ResponseCache::hit(const Request& request) const {
  if (by_name_.empty()) return std::nullopt;
  auto it = by_name_.find(request.name);
  if (it == by_name_.end() || !(slots_[it->second].request == request)) return std::nullopt;
  return it->second;
}

const Request* ResponseCache::at(std::uint32_t slot) const {
  if (slot >= slots_.size() || !slots_[slot].used) return nullptr;
  return &slots_[slot].request;
}

void ResponseCache::unlink(std::uint32_t id) {
  Slot& slot = slots_[id];
  (slot.newer == kNoSlot ? newest_ : slots_[slot.newer].older) = slot.older;
  (slot.older == kNoSlot ? oldest_ : slots_[slot.older].newer) = slot.newer;
  slot.newer = slot.older = kNoSlot;
}

void ResponseCache::push_front(std::uint32_t id) {
  Slot& slot = slots_[id];
  slot.newer = kNoSlot;
  slot.older = newest_;
  (newest_ == kNoSlot ? oldest_ : slots_[newest_].newer) = id;
  newest_ = id;
}

void ResponseCache::put(const Request& request, std::uint32_t hint) {
  if (capacity_ == 0 || is_automatic_name(request.name)) return;  // never seen again
  auto refresh = [&](std::uint32_t id) {
    Slot& slot = slots_[id];
    if (!(slot.request == request)) slot.request = request;
    if (newest_ != id) {
      unlink(id);
      push_front(id);
    }
  };
  if (hint < slots_.size() && slots_[hint].used && slots_[hint].request.name == request.name) {
    refresh(hint);  // the steady state: no hashing
    return;
  }
  auto it = by_name_.find(request.name);
  if (it != by_name_.end()) {
    refresh(it->second);
    return;
  }
  std::uint32_t id;
  if (by_name_.size() >= capacity_) {  // full: the least recently used slot takes the new name
    id = oldest_;
    unlink(id);
    by_name_.erase(slots_[id].request.name);
  } else if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[id];
  slot.request = request;
  slot.used = true;
  push_front(id);
  by_name_.emplace(request.name, id);
}

void ResponseCache::erase(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  unlink(it->second);
  Slot& slot = slots_[it->second];
  slot.used = false;
  slot.request = {};
  free_.push_back(it->second);
  by_name_.erase(it);
}

}  // namespace hvd::runtime
