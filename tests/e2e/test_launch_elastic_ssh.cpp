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
