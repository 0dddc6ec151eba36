#include "allreduce/engine/response_cache.h"

namespace hvd::runtime {

std::optional<std::uint32_t> ResponseCache::hit(const Request& request) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end() || !(slots_[it->second].request == request)) return std::nullopt;
  return it->second;
}

const Request* ResponseCache::at(std::uint32_t slot) const {
  if (slot >= slots_.size() || !slots_[slot].used) return nullptr;
  return &slots_[slot].request;
}

std::uint32_t ResponseCache::least_recently_used() const {
  std::uint32_t oldest = kNoSlot;
  for (std::uint32_t id = 0; id < slots_.size(); ++id) {
    if (slots_[id].used && (oldest == kNoSlot || slots_[id].used_at < slots_[oldest].used_at)) {
      oldest = id;
    }
  }
  return oldest;
}

void ResponseCache::put(const Request& request, std::uint32_t hint) {
  if (capacity_ == 0) return;
  auto refresh = [&](Slot& slot) {
    if (!(slot.request == request)) slot.request = request;
    slot.used_at = ++uses_;
  };
  if (hint < slots_.size() && slots_[hint].used && slots_[hint].request.name == request.name) {
    refresh(slots_[hint]);  // the steady state: no hashing
    return;
  }
  auto it = by_name_.find(request.name);
  if (it != by_name_.end()) {
    refresh(slots_[it->second]);
    return;
  }
  std::uint32_t id;
  if (by_name_.size() >= capacity_) {  // full: the least recently used slot takes the new name
    id = least_recently_used();
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
  slot.used_at = ++uses_;
  by_name_.emplace(request.name, id);
}

void ResponseCache::erase(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  Slot& slot = slots_[it->second];
  slot.used = false;
  slot.request = {};
  free_.push_back(it->second);
  by_name_.erase(it);
}

}  // namespace hvd::runtime
