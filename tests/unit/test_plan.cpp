#include <algorithm>
#include "tests/support/catch.h"

#include "launcher/plan/plan.h"
#include "launcher/plan/rank_defaults.h"
#include "test_helpers.h"

using namespace hvd::launcher;
using hvd::test::require_usage_error;

namespace {

const LocalIdentity kSelf{"launcher-box", {"127.0.0.1", "10.1.2.3", "::1", "fe80::5"}};

PlanRequest request(const std::string& hosts, std::optional<int> np = std::nullopt) {
  PlanRequest r;
  if (!hosts.empty()) r.hosts = parse_host_list(hosts);
  r.num_proc = np;
  r.default_user = "me";
  r.command = {"./train"};
  r.job_id = "job1";
  return r;
}

const EnvEntry* find(const RankPlan& rank, const std::string& name) {
  auto it = std::find_if(rank.env.begin(), rank.env.end(),
                         [&](const EnvEntry& e) { return e.name == name; });
  return it == rank.env.end() ? nullptr : &*it;
}

std::string value(const RankPlan& rank, const std::string& name) {
  const EnvEntry* e = find(rank, name);
  return e == nullptr ? "<unset>" : e->value;
}

}  // namespace

TEST_CASE("plan: -np 3 -H w0:1,w1:2 (the issue's example)", "[plan]") {
  const Plan plan = make_plan(request("w0:1,w1:2", 3), kSelf, {});
  REQUIRE(plan.ranks.size() == 3);
  const RankPlan& r2 = plan.ranks[2];
  CHECK(plan.hosts[r2.host_index].spec.host == "w1");
  CHECK(r2.topology.local_rank == 1);
  CHECK(r2.topology.cross_rank == 0);
  CHECK(r2.topology.cross_size == 1);
  CHECK(value(r2, "HOROVOD_RANK") == "2");
  CHECK(value(r2, "RANK") == "2");
  CHECK(value(r2, "HOROVOD_HOSTNAME") == "w1");
  CHECK(value(r2, "GROUP_RANK") == "1");
  CHECK(plan.warnings.empty());
}

TEST_CASE("plan: -np defaults to all slots, fewer starts exactly np", "[plan]") {
  CHECK(make_plan(request("a:2,b:3"), kSelf, {}).ranks.size() == 5);
  const Plan two = make_plan(request("localhost:4", 2), kSelf, {});
  CHECK(two.ranks.size() == 2);
  CHECK(two.hosts.size() == 1);
  CHECK(two.hosts[0].num_ranks == 2);
  const Plan partial = make_plan(request("a:2,b:2,c:2", 3), kSelf, {});
  REQUIRE(partial.hosts.size() == 2);
  CHECK(partial.hosts[1].spec.host == "b");
  CHECK(partial.hosts[1].num_ranks == 1);
  REQUIRE(partial.warnings.size() == 1);
  CHECK(partial.warnings[0] == "-np 3 uses 3 of 6 slots; no rank on: c");
}

TEST_CASE("plan: -np above the slots is a usage error naming both", "[plan]") {
  require_usage_error([] { make_plan(request("a:2,b:2", 5), kSelf, {}); },
                      "-np 5 is more than the 4 slots of the hosts (a:2, b:2)", "--oversubscribe");
  require_usage_error([] { make_plan(request("a", 0), kSelf, {}); },
                      "-np 0: a job needs at least 1 process");
  require_usage_error([] { make_plan(request("a", -3), kSelf, {}); }, "-np -3");
}

TEST_CASE("plan: --oversubscribe fills slots, then one more per host in turn", "[plan]") {
  PlanRequest r = request("a:2,b:1", 6);
  r.oversubscribe = true;
  const Plan plan = make_plan(r, kSelf, {});
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[0].num_ranks == 4);  // 2 slots + 2 extra
  CHECK(plan.hosts[1].num_ranks == 2);  // 1 slot + 1 extra
  CHECK(plan.ranks.size() == 6);
  CHECK(plan.ranks[4].host_index == 1);
  CHECK(plan.warnings.back() == "--oversubscribe: 6 ranks on 3 slots");
}

TEST_CASE("plan: no hosts means localhost with np slots", "[plan]") {
  const Plan plan = make_plan(request("", 3), kSelf, {});
  REQUIRE(plan.hosts.size() == 1);
  CHECK(plan.hosts[0].spec.host == "localhost");
  CHECK(plan.hosts[0].local);
  CHECK(plan.ranks.size() == 3);
  CHECK(make_plan(request(""), kSelf, {}).ranks.size() == 1);
}

TEST_CASE("plan: local hosts are exactly localhost, loopback 1, hostname, own addresses",
          "[plan]") {
  for (const char* h : {"localhost", "127.0.0.1", "::1", "launcher-box", "10.1.2.3", "fe80::5"}) {
    INFO(h);
    CHECK(is_local_host(h, kSelf));
  }
  for (const char* h : {"127.0.0.2", "127.1.1.1", "10.1.2.4", "other", "LOCALHOST.", "::2"}) {
    INFO(h);
    CHECK_FALSE(is_local_host(h, kSelf));
  }
}

TEST_CASE("plan: ssh user and port per host", "[plan]") {
  PlanRequest r;
  r.hosts = parse_hostfile("a slots=1 port=2222 user=alice\nb slots=1\n", "hf");
  r.ssh_port = 12345;
  r.default_user = "me";
  r.command = {"x"};
  const Plan plan = make_plan(r, kSelf, {});
  CHECK(plan.hosts[0].ssh_port == 2222);
  CHECK(plan.hosts[0].ssh_user == "alice");
  CHECK(plan.hosts[1].ssh_port == 12345);
  CHECK(plan.hosts[1].ssh_user == "me");
  CHECK(make_plan(request("c"), kSelf, {}).hosts[0].ssh_port == kDefaultSshPort);
}

TEST_CASE("plan env: per-rank values win, HVD_* never inherited", "[plan][env]") {
  const EnvList inherited{{"HOROVOD_RANK", "7"},
                          {"RANK", "9"},
                          {"HVD_JOB_ID", "evil"},
                          {"HVD_RENDEZVOUS_TOKEN", "leak"},
                          {"PATH", "/bin"},
                          {"MY_SECRET", "s"},
                          {"HOROVOD_FUSION_THRESHOLD", "0"}};
  const Plan plan = make_plan(request("a:2", 2), kSelf, inherited);
  for (const RankPlan& r : plan.ranks) {
    const std::string rank = std::to_string(r.topology.rank);
    CHECK(value(r, "HOROVOD_RANK") == rank);
    CHECK(value(r, "RANK") == rank);
    CHECK(value(r, "HVD_JOB_ID") == "job1");
    CHECK(find(r, "HVD_RENDEZVOUS_TOKEN")->secret);
    CHECK(value(r, "HVD_RENDEZVOUS_TOKEN") != "leak");
    CHECK(value(r, "PATH") == "/bin");
    CHECK(value(r, "HOROVOD_FUSION_THRESHOLD") == "0");
    CHECK(find(r, "MY_SECRET") == nullptr);
    // each name once
    for (const EnvEntry& e : r.env) {
      CHECK(std::count_if(r.env.begin(), r.env.end(),
                          [&](const EnvEntry& o) { return o.name == e.name; }) == 1);
    }
  }
}

TEST_CASE("plan env: MASTER_ADDR and the advertised address", "[plan][env]") {
  const Plan local = make_plan(request("localhost:2"), kSelf, {});
  CHECK(value(local.ranks[1], "MASTER_ADDR") == "127.0.0.1");
  CHECK(value(local.ranks[1], "HVD_ADVERTISE_ADDR") == "127.0.0.1");
  CHECK(find(local.ranks[0], "MASTER_PORT")->deferred);

  const Plan remote = make_plan(request("127.0.0.2:1,127.0.0.3:1"), kSelf, {});
  CHECK(value(remote.ranks[1], "MASTER_ADDR") == "127.0.0.2");
  CHECK(value(remote.ranks[1], "HVD_ADVERTISE_ADDR") == "127.0.0.3");

  // rank 0 on the launcher's machine, others remote: known only at launch
  const Plan mixed = make_plan(request("localhost:1,127.0.0.3:1"), kSelf, {});
  CHECK(find(mixed.ranks[1], "MASTER_ADDR")->deferred);
  CHECK(find(mixed.ranks[0], "HVD_ADVERTISE_ADDR")->deferred);
  CHECK(value(mixed.ranks[1], "HVD_ADVERTISE_ADDR") == "127.0.0.3");
}

TEST_CASE("plan env: -x specs reach every rank, marked explicit", "[plan][env]") {
  PlanRequest r = request("a:2");
  r.forward = {parse_forward_spec("FOO=bar"), parse_forward_spec("MY_SECRET")};
  const Plan plan = make_plan(r, kSelf, {{"MY_SECRET", "s"}});
  for (const RankPlan& rank : plan.ranks) {
    CHECK(find(rank, "FOO")->source == EnvSource::kExplicit);
    CHECK(value(rank, "FOO") == "bar");
    CHECK(value(rank, "MY_SECRET") == "s");
  }
}

TEST_CASE("plan env: torchrun's group and role variables", "[plan][env]") {
  // -np 3 over three hosts of 1, 2 and 2 slots: the third host gets no rank.
  const Plan plan = make_plan(request("w0:1,w1:2,w2:2", 3), kSelf, {});
  REQUIRE(plan.ranks.size() == 3);
  for (const RankPlan& r : plan.ranks) {
    const std::string rank = std::to_string(r.topology.rank);
    CHECK(value(r, "GROUP_WORLD_SIZE") == "2");
    CHECK(value(r, "ROLE_RANK") == rank);
    CHECK(value(r, "ROLE_WORLD_SIZE") == "3");
    CHECK(value(r, "ROLE_NAME") == "default");
  }
  CHECK(value(plan.ranks[0], "GROUP_RANK") == "0");
  CHECK(value(plan.ranks[2], "GROUP_RANK") == "1");
}

TEST_CASE("plan env: OMP_NUM_THREADS=1 when ranks share a host, unless the user set it",
          "[plan][env]") {
  // Two ranks on w1 share it: every rank gets 1 (torchrun sets it for all), with one notice.
  const Plan shared = make_plan(request("w0:1,w1:2"), kSelf, {});
  CHECK(value(shared.ranks[0], "OMP_NUM_THREADS") == "<unset>");  // w0's rank is alone
  CHECK(value(shared.ranks[1], "OMP_NUM_THREADS") == "1");
  REQUIRE(shared.notices.size() == 1);
  CHECK_THAT(shared.notices[0],
             Catch::Matchers::ContainsSubstring("OMP_NUM_THREADS=1 for every rank") &&
                 Catch::Matchers::ContainsSubstring("2 ranks share w1"));
  // One rank per host: nothing to share, nothing set, no notice.
  const Plan alone = make_plan(request("w0:1,w1:1"), kSelf, {});
  for (const RankPlan& r : alone.ranks) CHECK(find(r, "OMP_NUM_THREADS") == nullptr);
  CHECK(alone.notices.empty());
  // The user's value (inherited through the OMP_* allow-list, or -x) wins, silently.
  const Plan mine = make_plan(request("w1:2"), kSelf, {{"OMP_NUM_THREADS", "4"}});
  for (const RankPlan& r : mine.ranks) CHECK(value(r, "OMP_NUM_THREADS") == "4");
  CHECK(mine.notices.empty());
  PlanRequest x = request("w1:2");
  x.forward = {parse_forward_spec("OMP_NUM_THREADS=3")};
  const Plan explicit_value = make_plan(x, kSelf, {});
  for (const RankPlan& r : explicit_value.ranks) CHECK(value(r, "OMP_NUM_THREADS") == "3");
}

TEST_CASE("plan env: PYTHONUNBUFFERED=1 unless the user set it", "[plan][env]") {
  const Plan plan = make_plan(request("w0:1"), kSelf, {});
  CHECK(value(plan.ranks[0], "PYTHONUNBUFFERED") == "1");
  const Plan mine = make_plan(request("w0:1"), kSelf, {{"PYTHONUNBUFFERED", "0"}});
  CHECK(value(mine.ranks[0], "PYTHONUNBUFFERED") == "0");
}

TEST_CASE("plan env: GLOO_SOCKET_IFNAME beside NCCL_SOCKET_IFNAME when hvdrun picks a network",
          "[plan][env]") {
  PlanRequest r = request("127.0.0.2:1,127.0.0.3:1");
  r.network.interfaces = {"eth1"};
  r.forward = {parse_forward_spec("GLOO_SOCKET_IFNAME=stale")};  // the chosen interface wins
  const Plan plan = make_plan(r, kSelf, {});
  for (const RankPlan& rank : plan.ranks) {
    for (const char* name : {"NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "GLOO_SOCKET_IFNAME"}) {
      INFO(name);
      const EnvEntry* e = find(rank, name);
      REQUIRE(e != nullptr);
      CHECK(e->deferred.has_value());
      CHECK(std::count_if(rank.env.begin(), rank.env.end(),
                          [&](const EnvEntry& o) { return o.name == name; }) == 1);
    }
  }
  const Plan none = make_plan(request("127.0.0.2:1"), kSelf, {});
  CHECK(find(none.ranks[0], "GLOO_SOCKET_IFNAME") == nullptr);
}

TEST_CASE("plan: --port-range too small for the busiest machine is a usage error", "[plan]") {
  auto with_range = [](const std::string& hosts, int low, int high) {
    PlanRequest r = request(hosts);
    r.port_range = {low, high};
    return r;
  };
  // A local 2-rank job: the rendezvous server, the agent's probe port, the control plane.
  require_usage_error([&] { make_plan(with_range("localhost:2", 29500, 29500), kSelf, {}); },
                      "--port-range 29500-29500 has 1 port; this job needs 3",
                      "widen it to at least 3 ports, e.g. --port-range 29500-29502");
  require_usage_error([&] { make_plan(with_range("localhost:2", 29500, 29501), kSelf, {}); },
                      "has 2 ports; this job needs 3", "libhvd's control plane");
  CHECK(make_plan(with_range("localhost:2", 29500, 29502), kSelf, {}).ranks.size() == 2);
  // Two local entries and the launcher share this machine: 1 + 2 + 1.
  require_usage_error(
      [&] { make_plan(with_range("localhost:1,127.0.0.1:1", 29500, 29502), kSelf, {}); },
      "this job needs 4");
  // Remote hosts on their own machines: rank 0's host needs 2 (probe, control plane).
  CHECK(make_plan(with_range("w0:1,w1:1,w2:1", 29500, 29501), kSelf, {}).hosts.size() == 3);
  require_usage_error([&] { make_plan(with_range("w0:1,w1:1", 29500, 29500), kSelf, {}); },
                      "this job needs 2");
  // The example stays inside the port numbers.
  require_usage_error([&] { make_plan(with_range("localhost:2", 65535, 65535), kSelf, {}); },
                      "needs 3", "--port-range 65533-65535");
}

TEST_CASE("plan: an elastic job gives each rank its worker id, generation 0 and its channel",
          "[plan][elastic]") {
  PlanRequest r = request("localhost:3");
  const Plan plain = make_plan(r, kSelf, {});
  CHECK_FALSE(plain.elastic);
  CHECK(find(plain.ranks[1], "HVD_ELASTIC_FD") == nullptr);
  r.elastic = true;
  const Plan plan = make_plan(r, kSelf, {});
  CHECK(plan.elastic);
  for (const RankPlan& rank : plan.ranks) {
    CHECK(value(rank, "HVD_ELASTIC_WORKER") == std::to_string(rank.topology.rank));
    CHECK(value(rank, "HVD_ELASTIC_GENERATION") == "0");
    CHECK(value(rank, "HVD_ELASTIC_FD") == "3");
    CHECK(find(rank, "HVD_ELASTIC_FD")->source == EnvSource::kInternal);
  }
}

TEST_CASE("rank defaults: one writer for the plan, the rank shim and elastic workers", "[plan]") {
  using Env = std::vector<std::pair<std::string, std::string>>;
  const auto none = [](std::string_view) { return false; };
  CHECK(rank_defaults(2, none) == Env{{"OMP_NUM_THREADS", "1"}, {"PYTHONUNBUFFERED", "1"}});
  CHECK(rank_defaults(1, none) == Env{{"PYTHONUNBUFFERED", "1"}});  // alone on its host
  const auto user_set = [](std::string_view name) { return name == "OMP_NUM_THREADS"; };
  CHECK(rank_defaults(4, user_set) == Env{{"PYTHONUNBUFFERED", "1"}});
  CHECK(cuda_visible_devices(0, 1) == "0");
  CHECK(cuda_visible_devices(1, 2) == "2,3");
  CHECK(cuda_visible_devices(3, 3) == "9,10,11");
}
