#include "contract/topology.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "common/error.h"
#include "contract/env_table.h"

namespace hvd::contract {

std::vector<RankPlacement> compute_topology(const std::vector<int>& ranks_per_host) {
  // cross_size for local rank L = number of hosts with more than L ranks.
  int max_local = 0;
  for (int n : ranks_per_host) max_local = std::max(max_local, n);
  std::vector<int> hosts_with_local_rank(max_local, 0);
  for (int n : ranks_per_host) {
    for (int l = 0; l < n; ++l) ++hosts_with_local_rank[l];
  }

  int size = 0;
  for (int n : ranks_per_host) size += n;
  const auto hosts = static_cast<int>(
      std::count_if(ranks_per_host.begin(), ranks_per_host.end(), [](int n) { return n > 0; }));

  std::vector<RankPlacement> out;
  out.reserve(size);
  std::vector<int> next_cross_rank(max_local, 0);
  for (int host = 0; host < static_cast<int>(ranks_per_host.size()); ++host) {
    const int local_size = ranks_per_host[host];
    for (int l = 0; l < local_size; ++l) {
      RankPlacement p;
      p.host_index = host;
      p.hosts = hosts;
      p.topology = {.rank = static_cast<int>(out.size()),
                    .size = size,
                    .local_rank = l,
                    .local_size = local_size,
                    .cross_rank = next_cross_rank[l]++,
                    .cross_size = hosts_with_local_rank[l]};
      out.push_back(p);
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> topology_env(const RankPlacement& placement) {
  const RankTopology& t = placement.topology;
  auto entry = [](const EnvVar& var, int value) {
    return std::pair<std::string, std::string>(var.name, std::to_string(value));
  };
  return {entry(kHorovodRank, t.rank),
          entry(kHorovodSize, t.size),
          entry(kHorovodLocalRank, t.local_rank),
          entry(kHorovodLocalSize, t.local_size),
          entry(kHorovodCrossRank, t.cross_rank),
          entry(kHorovodCrossSize, t.cross_size),
          entry(kRank, t.rank),
          entry(kWorldSize, t.size),
          entry(kLocalRank, t.local_rank),
          entry(kLocalWorldSize, t.local_size),
          entry(kGroupRank, placement.host_index),
          entry(kGroupWorldSize, placement.hosts),
          entry(kRoleRank, t.rank),
          entry(kRoleWorldSize, t.size),
          {std::string(kRoleName.name), "default"}};
}

namespace {

int read_int(const EnvGetter& getenv, const EnvVar& var) {
  const char* raw = getenv(std::string(var.name).c_str());
  if (raw == nullptr) {
    throw ContractError(std::string(var.name) + " is not set, but HOROVOD_RANK is",
                        "start the program with hvdrun, or set all HOROVOD_* topology variables");
  }
  std::string_view text(raw);
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value < 0) {
    throw ContractError(
        std::string(var.name) + "='" + std::string(text) + "' is not a non-negative integer",
        "unset it, or let hvdrun set it");
  }
  return value;
}

void require(bool ok, const EnvVar& lhs, int lv, std::string_view relation, const EnvVar& rhs,
             int rv) {
  if (ok) return;
  throw ContractError(std::string(lhs.name) + "=" + std::to_string(lv) + " must be " +
                          std::string(relation) + " " + std::string(rhs.name) + "=" +
                          std::to_string(rv),
                      "an inherited HOROVOD_* value may be stale: let hvdrun set them all");
}

}  // namespace

std::optional<RankTopology> read_topology(const EnvGetter& getenv) {
  if (getenv(std::string(kHorovodRank.name).c_str()) == nullptr) return std::nullopt;
  RankTopology t;
  t.rank = read_int(getenv, kHorovodRank);
  t.size = read_int(getenv, kHorovodSize);
  t.local_rank = read_int(getenv, kHorovodLocalRank);
  t.local_size = read_int(getenv, kHorovodLocalSize);
  t.cross_rank = read_int(getenv, kHorovodCrossRank);
  t.cross_size = read_int(getenv, kHorovodCrossSize);
  require(t.rank < t.size, kHorovodRank, t.rank, "less than", kHorovodSize, t.size);
  require(t.local_rank < t.local_size, kHorovodLocalRank, t.local_rank, "less than",
          kHorovodLocalSize, t.local_size);
  require(t.local_size <= t.size, kHorovodLocalSize, t.local_size, "at most", kHorovodSize, t.size);
  require(t.cross_rank < t.cross_size, kHorovodCrossRank, t.cross_rank, "less than",
          kHorovodCrossSize, t.cross_size);
  require(t.cross_size <= t.size, kHorovodCrossSize, t.cross_size, "at most", kHorovodSize, t.size);
  return t;
}

}  // namespace hvd::contract
