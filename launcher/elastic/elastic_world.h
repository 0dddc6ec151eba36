// Elastic training: which slots the next generation's ranks take (docs/design/elastic.md,
// section 4.2). Pure: the elastic driver calls it with the hosts it may use now, the slots whose
// workers are still alive, and which slots are cooling down after a failure.
//
// The rule, Horovod's (get_host_assignments) with survivors first:
//   - every surviving worker keeps its slot while its host is still in the pool with that slot;
//   - free slots that are not cooling down are added in slot order (hosts in pool order, slots
//     ascending) up to max_np;
//   - the chosen slots, sorted in slot order, are ranks 0, 1, ...; local and cross coordinates
//     follow from compute_topology (contract/topology.h), as at start-up.
// Survivors beyond max_np (the limit went down) keep the first slots in slot order.
#pragma once

#include <compare>
#include <functional>
#include <string>
#include <vector>

#include "contract/topology.h"

namespace hvd::launcher {

// One slot: a host and the index of one of its slots (0 .. slots-1).
struct SlotKey {
  std::string host;
  int slot = 0;
  auto operator<=>(const SlotKey&) const = default;
};

// "host#slot": how a slot is named in messages and charged its failures (ElasticDriver).
std::string slot_name(const SlotKey& slot);

// A host the job may use now, and how many ranks it may hold.
struct PoolHost {
  std::string host;
  int slots = 1;
};

struct WorldChoice {
  std::vector<SlotKey> slots;                       // by rank
  std::vector<contract::RankPlacement> placements;  // by rank; host_index indexes the pool
  // The lowest rank held by a survivor: the rank every other syncs its state from (a refilled
  // slot may come before the survivors in slot order, so it is not always rank 0). 0 when there
  // are no survivors.
  int sync_root = 0;

  int size() const { return static_cast<int>(slots.size()); }
};

using CoolingFn = std::function<bool(const SlotKey&)>;

WorldChoice choose_world(const std::vector<PoolHost>& pool, const std::vector<SlotKey>& survivors,
                         const CoolingFn& cooling, int max_np);

}  // namespace hvd::launcher
