// Where each rank sits: Horovod's rank, local and cross coordinates.
//
// compute_topology() is the one definition (the launcher plans with it); topology_env() writes it
// as the rank's environment and read_topology() reads it back in the rank, strictly.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hvd::contract {

struct RankTopology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;  // index of this host among the hosts that have a rank with this local_rank
  int cross_size = 1;  // number of such hosts
  bool operator==(const RankTopology&) const = default;
};

struct RankPlacement {
  int host_index = 0;  // index into the ranks_per_host argument of compute_topology
  RankTopology topology;
  int hosts = 1;  // hosts with at least one rank (torchrun's GROUP_WORLD_SIZE)
};

// Horovod's slot order: host 0 gets ranks 0..n0-1, host 1 the next n1, and so on.
// `ranks_per_host[i]` is the number of ranks on host i (0 allowed: the host gets none).
// Returns one placement per rank, in rank order. Pure.
std::vector<RankPlacement> compute_topology(const std::vector<int>& ranks_per_host);

// HOROVOD_RANK..HOROVOD_CROSS_SIZE and the torchrun names RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK (= host_index), GROUP_WORLD_SIZE (= hosts), ROLE_RANK,
// ROLE_WORLD_SIZE and ROLE_NAME (one role, "default"), as (name, value) pairs.
std::vector<std::pair<std::string, std::string>> topology_env(const RankPlacement& placement);

// Reads the HOROVOD_* topology a launcher set. `getenv` returns nullptr for an unset variable.
// Returns nullopt when HOROVOD_RANK is unset (not started by a launcher); throws ContractError
// naming the variable and its value when a value is missing, not an integer, or inconsistent.
using EnvGetter = std::function<const char*(const char*)>;
std::optional<RankTopology> read_topology(const EnvGetter& getenv);

}  // namespace hvd::contract
