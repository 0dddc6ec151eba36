#include <map>
#include <random>
#include "tests/support/catch.h"

#include "common/error.h"
#include "contract/topology.h"

using hvd::contract::compute_topology;
using hvd::contract::RankTopology;
using hvd::contract::read_topology;
using hvd::contract::topology_env;

namespace {

// Horovod's definition, written the slow obvious way: cross_rank = index of the host among the
// hosts that have a rank with this local_rank; cross_size = how many such hosts.
RankTopology reference(const std::vector<int>& per_host, int host, int local_rank, int rank) {
  int size = 0;
  for (int n : per_host) size += n;
  std::vector<int> hosts_with;
  for (int h = 0; h < static_cast<int>(per_host.size()); ++h) {
    if (per_host[h] > local_rank) hosts_with.push_back(h);
  }
  const int cross_rank =
      static_cast<int>(std::find(hosts_with.begin(), hosts_with.end(), host) - hosts_with.begin());
  return {rank, size, local_rank, per_host[host], cross_rank, static_cast<int>(hosts_with.size())};
}

}  // namespace

TEST_CASE("topology: the issue's example w0:1,w1:2", "[topology]") {
  const auto p = compute_topology({1, 2});
  REQUIRE(p.size() == 3);
  CHECK(p[0].host_index == 0);
  CHECK(p[0].topology == RankTopology{0, 3, 0, 1, 0, 2});
  CHECK(p[1].topology == RankTopology{1, 3, 0, 2, 1, 2});
  CHECK(p[2].host_index == 1);
  CHECK(p[2].topology == RankTopology{2, 3, 1, 2, 0, 1});
}

TEST_CASE("topology: matches Horovod's definition on random layouts", "[topology]") {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int> per_host(1 + rng() % 8);
    for (int& n : per_host) n = static_cast<int>(rng() % 5);  // 0 allowed
    const auto placements = compute_topology(per_host);
    int rank = 0;
    for (int h = 0; h < static_cast<int>(per_host.size()); ++h) {
      for (int l = 0; l < per_host[h]; ++l, ++rank) {
        REQUIRE(placements[rank].host_index == h);
        REQUIRE(placements[rank].topology == reference(per_host, h, l, rank));
      }
    }
    REQUIRE(static_cast<int>(placements.size()) == rank);
  }
}

TEST_CASE("topology: written env reads back the same", "[topology]") {
  for (const auto& placement : compute_topology({3, 1, 2})) {
    std::map<std::string, std::string> env;
    for (const auto& [k, v] : topology_env(placement)) env[k] = v;
    CHECK(env["RANK"] == env["HOROVOD_RANK"]);
    CHECK(env["WORLD_SIZE"] == "6");
    CHECK(env["LOCAL_WORLD_SIZE"] == env["HOROVOD_LOCAL_SIZE"]);
    CHECK(env["GROUP_RANK"] == std::to_string(placement.host_index));
    const auto read = read_topology([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    REQUIRE(read.has_value());
    CHECK(*read == placement.topology);
  }
}

TEST_CASE("topology reader: absent, incomplete, malformed, inconsistent", "[topology]") {
  std::map<std::string, std::string> env;
  auto getter = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  CHECK_FALSE(read_topology(getter).has_value());

  env = {{"HOROVOD_RANK", "1"},       {"HOROVOD_SIZE", "2"},       {"HOROVOD_LOCAL_RANK", "0"},
         {"HOROVOD_LOCAL_SIZE", "1"}, {"HOROVOD_CROSS_RANK", "1"}, {"HOROVOD_CROSS_SIZE", "2"}};
  CHECK(read_topology(getter).has_value());

  auto expect = [&](const std::string& key, const std::string& value, const std::string& what) {
    auto saved = env;
    if (value.empty()) {
      env.erase(key);
    } else {
      env[key] = value;
    }
    CHECK_THROWS_WITH(read_topology(getter), Catch::Matchers::ContainsSubstring(what));
    CHECK_THROWS_AS(read_topology(getter), hvd::ContractError);
    env = saved;
  };
  expect("HOROVOD_SIZE", "", "HOROVOD_SIZE is not set, but HOROVOD_RANK is");
  expect("HOROVOD_SIZE", "two", "HOROVOD_SIZE='two' is not a non-negative integer");
  expect("HOROVOD_SIZE", "2x", "HOROVOD_SIZE='2x'");
  expect("HOROVOD_LOCAL_RANK", "-1", "HOROVOD_LOCAL_RANK='-1'");
  expect("HOROVOD_RANK", "2", "HOROVOD_RANK=2 must be less than HOROVOD_SIZE=2");
  expect("HOROVOD_LOCAL_RANK", "1", "HOROVOD_LOCAL_RANK=1 must be less than HOROVOD_LOCAL_SIZE=1");
  expect("HOROVOD_LOCAL_SIZE", "3", "HOROVOD_LOCAL_SIZE=3 must be at most HOROVOD_SIZE=2");
  expect("HOROVOD_CROSS_RANK", "2", "HOROVOD_CROSS_RANK=2 must be less than HOROVOD_CROSS_SIZE=2");
  expect("HOROVOD_CROSS_SIZE", "3", "HOROVOD_CROSS_SIZE=3 must be at most HOROVOD_SIZE=2");
}
