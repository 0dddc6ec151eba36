// The network check (issue 11) with the real hvdrun on the sshd test hosts: `--check-net`
// (human and JSON), the probes every native launch runs first, and `--port-range` keeping
// hvdrun's ports and libhvd's control plane inside the range. Probe failures need hosts that
// cannot reach each other: tests/netns/ builds those in network namespaces.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <random>
#include <regex>
#include "tests/support/catch.h"

#include "common/unique_fd.h"
#include "tests/cli/process.h"
#include "tests/e2e/launch_ssh_helpers.h"

using Catch::Matchers::ContainsSubstring;
using hvd::test::launch_ssh::Hosts;
using hvd::test::launch_ssh::show;
using nlohmann::json;

namespace {

bool port_free(int port) {
  hvd::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
}

// `n` consecutive ports free right now, below the kernel's ephemeral range (32768+) so that
// no outgoing connection takes one meanwhile; random start so parallel tests differ.
int free_block(int n) {
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int low = 10000 + static_cast<int>(rng() % 9000);
    bool all = true;
    for (int p = low; p < low + n && all; ++p) all = port_free(p);
    if (all) return low;
  }
  FAIL("no block of " << n << " free ports in 10000-19999");
  return 0;
}

std::string range(int low, int n) {
  return std::to_string(low) + "-" + std::to_string(low + n - 1);
}

}  // namespace

TEST_CASE("check-net: --json on three hosts lists every probe with its result and time", "[net]") {
  Hosts h;
  const std::string hosts = h.addr(20) + "," + h.addr(21) + "," + h.addr(22);
  const auto r = hvd::test::run_hvdrun(h.args({"--check-net", "--json", "-H", hosts}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc["ok"] == true);
  CHECK(doc["failed"] == 0);
  CHECK(doc["full"] == false);
  REQUIRE(doc["hosts"].size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(doc["hosts"][i]["address"] == h.addr(20 + i));
    CHECK(doc["hosts"][i]["probe_port"].get<int>() > 0);
  }
  // Ring 0->1, 1->2, 2->0 (ring+rank0), 1->0 (rank0), and one rendezvous probe per host.
  REQUIRE(doc["probes"].size() == 7);
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (const json& p : doc["probes"]) {
    CHECK(p["result"] == "ok");
    CHECK(p["ms"].is_number());
    CHECK(p["ms"].get<double>() >= 0);
    CHECK(p["port"].get<int>() > 0);
    seen.insert({p["from"].get<std::string>(), p["to"].get<std::string>(),
                 p["purpose"].get<std::string>()});
  }
  CHECK(seen.count({h.addr(20), h.addr(21), "ring"}) == 1);
  CHECK(seen.count({h.addr(21), h.addr(22), "ring"}) == 1);
  CHECK(seen.count({h.addr(22), h.addr(20), "ring+rank0"}) == 1);
  CHECK(seen.count({h.addr(21), h.addr(20), "rank0"}) == 1);
  CHECK(seen.count({h.addr(20), "rendezvous", "rendezvous"}) == 1);
  // Nothing was launched: no rank output, and the agents are gone (the sshd hosts would
  // keep a stray agent; test_launch_ssh checks that separately for launches).
  CHECK_THAT(r.err, !ContainsSubstring("<stdout>"));
}

TEST_CASE("check-net: --check-net-full probes every ordered pair, shown as a matrix", "[net]") {
  Hosts h;
  const std::string hosts = h.addr(23) + "," + h.addr(24) + "," + h.addr(25);
  const auto r = hvd::test::run_hvdrun(h.args({"--check-net-full", "-H", hosts}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, ContainsSubstring("network check: 3 hosts, 9 probes, 0 failed"));
  CHECK_THAT(r.err, ContainsSubstring("FROM \\ TO"));
  // Every off-diagonal cell is an ok with a time; no "." (not probed) cell.
  const std::regex row("\\n  " + std::regex_replace(h.addr(24), std::regex("\\."), "\\.") +
                       " +ok [<0-9.]+ms +- +ok [<0-9.]+ms +ok [<0-9.]+ms\\n");
  CHECK(std::regex_search(r.err, row));
}

TEST_CASE("check-net: with --check-ssh, --json gives both reports in one document", "[net]") {
  Hosts h;
  const std::string hosts = h.addr(26) + "," + h.addr(27);
  const auto r =
      hvd::test::run_hvdrun(h.args({"--check-ssh", "--check-net", "--json", "-H", hosts}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc.contains("check_ssh"));
  REQUIRE(doc.contains("check_net"));
  CHECK(doc["check_net"]["ok"] == true);
  CHECK(doc["check_net"]["probes"].size() == 4);
}

TEST_CASE("check-net: an agent missing is an error document and exit 127", "[net]") {
  Hosts h;
  const auto r = hvd::test::run_hvdrun(
      h.args({"--check-net", "--json", "--agent-path", "/nonexistent/hvdrun", "-H", h.addr(28)}));
  INFO(show(r));
  CHECK(r.exit_code == 127);
  const json doc = json::parse(r.out);
  CHECK(doc["ok"] == false);
  CHECK_THAT(doc["error"]["message"].get<std::string>(),
             ContainsSubstring("no hvdrun agent answered"));
}

TEST_CASE("a launch reports its network check in --json", "[net]") {
  Hosts h;
  const auto r =
      hvd::test::run_hvdrun(h.args({"--json", "-H", h.addr(29) + "," + h.addr(30), "true"}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  REQUIRE(doc["net_check"].is_object());
  CHECK(doc["net_check"]["ok"] == true);
  CHECK(doc["net_check"]["probes"].size() == 4);
}

TEST_CASE("port range: --port-range keeps MASTER_PORT and the rendezvous server inside the range",
          "[net]") {
  Hosts h;
  const int low = free_block(4);
  const auto r = hvd::test::run_hvdrun(
      h.args({"--port-range", range(low, 4), "-H", h.addr(31) + "," + h.addr(32), "sh", "-c",
              "echo port=$MASTER_PORT rv=${HVD_RENDEZVOUS_ADDR##*:} range=$HVD_PORT_RANGE"}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("port=([0-9]+) rv=([0-9]+) range=([0-9-]+)")));
  const int master = std::stoi(m[1]);
  const int rendezvous = std::stoi(m[2]);
  CHECK(master >= low);
  CHECK(master < low + 4);
  CHECK(rendezvous >= low);
  CHECK(rendezvous < low + 4);
  CHECK(m[3] == range(low, 4));
}

TEST_CASE("port range: --port-range confines libhvd's control plane: 3 ports run, 2 are too few",
          "[net]") {
  // A local 2-rank job needs: the agent's probe port (handed to the job as MASTER_PORT), the
  // rendezvous server, and libhvd's control plane on rank 0, which must not take MASTER_PORT.
  const int low = free_block(3);
  SECTION("three ports: the collectives run") {
    const auto r = hvd::test::run_hvdrun(
        {"--port-range", range(low, 3), "-np", "2", LIBHVD_CHECK, "collectives"});
    INFO(show(r));
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, ContainsSubstring("rank 1: all checks passed"));
  }
  SECTION("two ports: refused before anything starts, naming the three it needs") {
    const auto r = hvd::test::run_hvdrun(
        {"--port-range", range(low, 2), "-np", "2", LIBHVD_CHECK, "collectives"});
    INFO(show(r));
    CHECK(r.exit_code == 64);
    CHECK_THAT(r.err, ContainsSubstring("--port-range " + range(low, 2) +
                                        " has 2 ports; this job needs 3"));
    CHECK_THAT(r.out, !ContainsSubstring("rank"));
  }
}

TEST_CASE(
    "port range: --port-range too narrow for the probes and the rendezvous server is a clear error",
    "[net]") {
  Hosts h;
  const int low = free_block(2);
  const auto r = hvd::test::run_hvdrun(
      h.args({"--port-range", range(low, 2), "-H", h.addr(33) + "," + h.addr(34), "true"}));
  INFO(show(r));
  CHECK(r.exit_code == 71);  // the launcher's own part: docs/exit-codes.md
  CHECK_THAT(r.err,
             ContainsSubstring("every port of --port-range " + range(low, 2) + " is in use"));
}

TEST_CASE("port range: a host with no free port in the range is named, and nothing starts",
          "[net]") {
  Hosts h;
  // Three ports: a local host entry shares the launcher's machine, which needs 3 (fewer is a
  // usage error before anything starts).
  const int low = free_block(3);
  std::vector<hvd::UniqueFd> held;  // every port of the range taken on this machine
  for (int p = low; p < low + 3; ++p) {
    hvd::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(p));
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(fd.get(), 1) == 0);
    held.push_back(std::move(fd));
  }
  // Issue 55: it exited 127 ("the job could not start on a host"); a port shortage is hvdrun's
  // own part failing, 71, wherever the port was wanted (the launcher or, here, an agent). Over
  // SSH and on the local host.
  for (const std::string& host : {h.addr(35), std::string("localhost")}) {
    const auto r = hvd::test::run_hvdrun(h.args(
        {"--port-range", range(low, 3), "--json", "-H", host, "sh", "-c", "echo rank-started"}));
    INFO(show(r));
    CHECK(r.exit_code == 71);
    CHECK_THAT(r.err,
               ContainsSubstring("host " + host + ": every port of --port-range " + range(low, 3) +
                                 " is in use on this host (hvdrun's network probes)"));
    CHECK_THAT(r.err, ContainsSubstring("widen the range"));
    CHECK_THAT(r.out + r.err, !ContainsSubstring("rank-started"));
    const json doc = json::parse(r.out, nullptr, false);
    REQUIRE(doc.is_object());
    CHECK(doc["exit_code"] == 71);
    CHECK(doc["error"]["kind"] == "launcher");
  }
}

TEST_CASE("check-net: a host that fails SSH gives the SSH rows and no network check", "[net]") {
  Hosts h;
  // No sshd listens on 127.3.3.3 (loopback, outside the fixture's addresses): refused.
  const auto r = hvd::test::run_hvdrun(h.args({"--check-net", "--json", "-H", "127.3.3.3"}));
  INFO(show(r));
  CHECK(r.exit_code == 69);
  const json doc = json::parse(r.out);
  REQUIRE(doc.contains("check_ssh"));
  CHECK(doc["check_net"].is_null());
  CHECK_THAT(doc["check_ssh"].dump(), ContainsSubstring("127.3.3.3"));
}

TEST_CASE("hosts named by ssh_config aliases: ranks get the addresses SSH arrived at", "[net]") {
  // h40 and h41 exist only in the fixture's ssh_config (HostName 127.0.0.41 / .42): no resolver
  // knows them, so neither Gloo nor a peer could use the names.
  Hosts h;
  const auto r = hvd::test::run_hvdrun(h.args(
      {"-H", "h40,h41", "sh", "-c", "echo env $HOROVOD_RANK $HVD_ADVERTISE_ADDR $MASTER_ADDR"}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("env 0 127.0.0.41 127.0.0.41"));
  CHECK_THAT(r.out, ContainsSubstring("env 1 127.0.0.42 127.0.0.41"));
  const auto gloo = hvd::test::run_hvdrun(h.args({"-H", "h40,h41", LIBHVD_CHECK, "collectives"}));
  INFO(show(gloo));
  CHECK(gloo.exit_code == 0);
  CHECK_THAT(gloo.out, ContainsSubstring("rank 1: all checks passed"));
}
