// Elastic training across hosts (--min-np over the sshd test hosts, tests/sshd/README.md): a rank
// on one host dies, a whole host goes (its agent killed, its ranks with it), rank 0's host goes;
// the others must go on in a smaller world from their last commit (elastic_check's weights end at
// 210.0 only when each of its 20 steps ran once), and below --min-np the job must end with the
// lost host's code and words.
#include <catch2/catch.hpp>

#include "tests/e2e/launch_ssh_helpers.h"

using namespace hvd::test::launch_ssh;  // NOLINT: test helpers

namespace {

std::string done_line(int worker, int generation, int rank, int size) {
  return "worker " + std::to_string(worker) + " done: generation " + std::to_string(generation) +
         " rank " + std::to_string(rank) + " size " + std::to_string(size) +
         " resets 1 steps 20 weights 210.0";
}

// hvdrun over hosts a and b (2 slots each), 4 ranks, worker `die` dies after step 7; with
// `kill_agent` it takes its host's agent (and so every rank there) with it.
RunResult run_elastic(const Hosts& hosts, const JobMarker& marker, const std::string& a,
                      const std::string& b, int min_np, int die, bool kill_agent) {
  std::vector<std::string> args =
      hosts.args({"-H", a + ":2," + b + ":2", "-np", "4", "--min-np", std::to_string(min_np),
                  "--json", "-x", marker.forward()});
  if (kill_agent) args.insert(args.end(), {"-x", "ELASTIC_CHECK_KILL_AGENT=1"});
  args.insert(args.end(), {ELASTIC_CHECK, "20", std::to_string(die), "7"});
  return run_hvdrun(args, {marker.env()}, std::chrono::seconds(100));
}

}  // namespace

TEST_CASE("elastic over SSH: a rank on the second host dies, three ranks on two hosts go on",
          "[elastic][ssh]") {
  Hosts hosts;
  JobMarker marker;
  const std::string a = hosts.addr(52), b = hosts.addr(53);
  const RunResult r = run_elastic(hosts, marker, a, b, 2, 3, false);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  for (int w : {0, 1, 2}) CHECK_THAT(r.err, Contains(done_line(w, 1, w, 3)));
  const json doc = parse_json(r.out);
  const json& g1 = doc["elastic"]["generations"][1];
  CHECK(g1["workers"] == json::array({0, 1, 2}));
  CHECK_THAT(g1["reason"].get<std::string>(), Contains("(worker 3) on " + b));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}

TEST_CASE("elastic over SSH: a lost host takes its ranks, the other host's ranks go on",
          "[elastic][ssh]") {
  Hosts hosts;
  JobMarker marker;
  const std::string a = hosts.addr(54), b = hosts.addr(55);
  const RunResult r = run_elastic(hosts, marker, a, b, 2, 3, true);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("elastic: generation 1: 2 ranks on 1 host (lost the agent on " + b));
  for (int w : {0, 1}) CHECK_THAT(r.err, Contains(done_line(w, 1, w, 2)));
  const json doc = parse_json(r.out);
  CHECK(doc["elastic"]["generations"][1]["workers"] == json::array({0, 1}));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}

TEST_CASE("elastic over SSH: rank 0's host is lost, the next host's first rank is rank 0",
          "[elastic][ssh]") {
  Hosts hosts;
  JobMarker marker;
  const std::string a = hosts.addr(56), b = hosts.addr(57);
  const RunResult r = run_elastic(hosts, marker, a, b, 2, 0, true);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains(done_line(2, 1, 0, 2)));
  CHECK_THAT(r.err, Contains(done_line(3, 1, 1, 2)));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}

TEST_CASE("elastic over SSH: a lost host below --min-np ends the job as a lost host (74)",
          "[elastic][ssh]") {
  Hosts hosts;
  JobMarker marker;
  const std::string a = hosts.addr(58), b = hosts.addr(59);
  const RunResult r = run_elastic(hosts, marker, a, b, 3, 3, true);
  INFO(show(r));
  CHECK(r.exit_code == 74);
  CHECK_THAT(r.err, Contains("lost the agent on " + b));
  CHECK_THAT(r.err, Contains("elastic: 2 ranks left, fewer than --min-np 3"));
  const json doc = parse_json(r.out);
  CHECK(doc["error"]["kind"] == "host_lost");
  CHECK(wait_until([&] { return marker.alive().empty(); }, 15s));
}

TEST_CASE("elastic over SSH: a discovered host joins over SSH, one that refuses is charged",
          "[elastic][ssh]") {
  Hosts hosts;
  JobMarker marker;
  TempDir dir;
  const std::string a = hosts.addr(60), b = hosts.addr(61);
  // 127.0.0.251 runs no sshd: its connection is refused, and the job goes on without it.
  const std::string refused = "127.0.0.251";
  const std::string script = discovery_script(dir, "echo " + a + ":2\nif [ $n -ge 3 ]; then echo " +
                                                       b + ":2; echo " + refused + ":1; fi\n");
  std::vector<std::string> args =
      hosts.args({"--host-discovery-script", script, "--discovery-interval", "0.5", "--min-np", "2",
                  "--json", "-x", marker.forward(), "-x", "ELASTIC_CHECK_STEP_MS=100"});
  args.insert(args.end(), {ELASTIC_CHECK, "60"});
  const RunResult r = run_hvdrun(args, {marker.env()}, std::chrono::seconds(100));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("elastic: the agent on " + b + " is up; checking its network"));
  CHECK_THAT(r.err, Contains("elastic: " + b + " passed the network check (3 probes)"));
  CHECK_THAT(r.err, Contains("elastic: host " + refused + " could not join: connection_refused"));
  CHECK_THAT(r.err, Contains("elastic: host " + refused + " is out for good"));
  CHECK_THAT(r.err, Contains("elastic: generation 1: 4 ranks on 2 hosts (growing: " + b + "#0, " +
                             b + "#1 free slots)"));
  // Each step once on every rank, those that joined included (their state came from rank 0).
  for (int w = 0; w < 4; ++w) {
    CHECK_THAT(r.err, Contains("worker " + std::to_string(w) + " done: generation 1 rank " +
                               std::to_string(w) + " size 4 resets " + (w < 2 ? "1" : "0") +
                               " steps 60 weights 1830.0"));
  }
  const json doc = parse_json(r.out);
  CHECK(doc["elastic"]["generations"][1]["workers"] == json::array({0, 1, 2, 3}));
  REQUIRE(doc["elastic"]["blacklisted"].size() == 1);
  CHECK(doc["elastic"]["blacklisted"][0]["name"] == refused);
  CHECK(doc["elastic"]["blacklisted"][0]["kind"] == "host");
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}
