#include "launcher/elastic/elastic_world.h"

#include <algorithm>
#include <set>

namespace hvd::launcher {
namespace {

// The pool's slots in slot order, as (host index, slot).
std::vector<std::pair<int, SlotKey>> slots_in_order(const std::vector<PoolHost>& pool) {
  std::vector<std::pair<int, SlotKey>> out;
  for (std::size_t h = 0; h < pool.size(); ++h) {
    for (int s = 0; s < pool[h].slots; ++s) out.push_back({static_cast<int>(h), {pool[h].host, s}});
  }
  return out;
}

}  // namespace

std::string slot_name(const SlotKey& slot) { return slot.host + "#" + std::to_string(slot.slot); }

WorldChoice choose_world(const std::vector<PoolHost>& pool, const std::vector<SlotKey>& survivors,
                         const CoolingFn& cooling, int max_np) {
  const std::set<SlotKey> alive(survivors.begin(), survivors.end());
  const auto all = slots_in_order(pool);
  std::vector<bool> chosen(all.size(), false);
  int count = 0;
  // Survivors first, in slot order, so that a lower max_np keeps the first ones.
  for (std::size_t i = 0; i < all.size() && count < max_np; ++i) {
    if (alive.count(all[i].second) != 0) {
      chosen[i] = true;
      ++count;
    }
  }
  for (std::size_t i = 0; i < all.size() && count < max_np; ++i) {
    if (!chosen[i] && !(cooling && cooling(all[i].second))) {
      chosen[i] = true;
      ++count;
    }
  }
  WorldChoice out;
  std::vector<int> per_host(pool.size(), 0);
  bool root_found = false;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!chosen[i]) continue;
    if (!root_found && alive.count(all[i].second) != 0) {
      out.sync_root = out.size();
      root_found = true;
    }
    out.slots.push_back(all[i].second);
    ++per_host[static_cast<std::size_t>(all[i].first)];
  }
  out.placements = contract::compute_topology(per_host);
  return out;
}

}  // namespace hvd::launcher
