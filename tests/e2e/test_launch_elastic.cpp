// Elastic training through hvdrun (--min-np; docs/elastic.md): the real hvdrun, its agent and
// rank processes of tests/libhvd/elastic_check.cpp (a BufferState training loop whose weights end
// at 210.0 when every one of its 20 steps ran exactly once, whatever the world's size was) on
// this machine. A rank is killed mid-training; the others must go on in a new generation from
// their last commit, and hvdrun must say what happened, in its log and in --json.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers
using Catch::Matchers::ContainsSubstring;
using nlohmann::json;

namespace {

std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 6000) +
         "\n--- stderr ---\n" + r.err.substr(0, 12000);
}

// hvdrun ARGS... elastic_check PROGRAM_ARGS..., every process marked so that none outlives the
// test.
// `step_ms`: each step of the program sleeps that long first (time for a cooldown to end).
RunResult run_elastic(const JobMarker& marker, std::vector<std::string> args,
                      const std::vector<std::string>& program_args, int step_ms = 0) {
  if (step_ms > 0)
    args.insert(args.end(), {"-x", "ELASTIC_CHECK_STEP_MS=" + std::to_string(step_ms)});
  args.insert(args.end(), {"-x", marker.forward(), ELASTIC_CHECK});
  args.insert(args.end(), program_args.begin(), program_args.end());
  return run_hvdrun(args, {marker.env()}, std::chrono::seconds(100));
}

std::string done_line(int worker, int generation, int rank, int size, int resets, int steps,
                      const std::string& weights) {
  return "worker " + std::to_string(worker) + " done: generation " + std::to_string(generation) +
         " rank " + std::to_string(rank) + " size " + std::to_string(size) + " resets " +
         std::to_string(resets) + " steps " + std::to_string(steps) + " weights " + weights;
}

std::string done_line(int worker, int generation, int rank, int size, int resets) {
  return done_line(worker, generation, rank, size, resets, 20, "210.0");
}

}  // namespace

TEST_CASE("elastic launch: a killed rank leaves, the others finish in a smaller world",
          "[elastic]") {
  JobMarker marker;
  // Worker 2 kills itself (SIGKILL) after step 7 of 20.
  const RunResult r = run_elastic(
      marker, {"-np", "3", "--min-np", "2", "-H", "localhost:3", "--json"}, {"20", "2", "7"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  // Every step ran once on the survivors: generation 0 at size 3, generation 1 at size 2.
  CHECK_THAT(r.err, ContainsSubstring(done_line(0, 1, 0, 2, 1)));
  CHECK_THAT(r.err, ContainsSubstring(done_line(1, 1, 1, 2, 1)));
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: generation 1: 2 ranks on 1 host (rank 2 (worker 2) on "
                               "localhost was killed by signal 9"));
  CHECK_THAT(r.err, ContainsSubstring("elastic: generation 1 formed in"));
  const json doc = json::parse(r.out);
  CHECK(doc["exit_code"] == 0);
  CHECK(doc["first_failure"].is_null());
  CHECK(doc["ranks"][2]["signal"] == "SIGKILL");
  CHECK(doc["ranks"][2]["stopped_by_hvdrun"] == false);
  const json& elastic = doc["elastic"];
  CHECK(elastic["min_np"] == 2);
  CHECK(elastic["max_np"].is_null());  // no limit by default, as horovodrun's --max-np
  CHECK(elastic["resets"] == 1);
  REQUIRE(elastic["generations"].size() == 2);
  CHECK(elastic["generations"][0]["size"] == 3);
  CHECK(elastic["generations"][1]["workers"] == json::array({0, 1}));
  CHECK_THAT(elastic["generations"][1]["reason"].get<std::string>(),
             ContainsSubstring("worker 2) on localhost was killed by signal 9"));
  CHECK_FALSE(elastic["generations"][1]["formed_ms"].is_null());
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: a failed slot comes back after its cooldown, a new rank takes it",
          "[elastic]") {
  JobMarker marker;
  // Worker 2 kills itself after step 5 of 60 (100 ms each); its slot cools down for 1 s, then a
  // new worker (3) takes it, gets the state from rank 0 and trains to the end with the others.
  const RunResult r = run_elastic(marker,
                                  {"-np", "3", "--min-np", "2", "-H", "localhost:3",
                                   "--blacklist-cooldown-range", "1", "1", "--json"},
                                  {"60", "2", "5"}, 100);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  // 60 steps, each once, whatever the size: every weight is 60 * 61 / 2 on every rank.
  CHECK_THAT(r.err, ContainsSubstring(done_line(0, 2, 0, 3, 2, 60, "1830.0")));
  CHECK_THAT(r.err, ContainsSubstring(done_line(1, 2, 1, 3, 2, 60, "1830.0")));
  CHECK_THAT(r.err, ContainsSubstring(done_line(3, 2, 2, 3, 0, 60, "1830.0")));
  CHECK_THAT(r.err, ContainsSubstring("elastic: slot localhost#2 cools down for 1."));
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: generation 2: 3 ranks on 1 host (growing: localhost#2 "
                               "back after its cooldown)"));
  const json doc = json::parse(r.out);
  const json& elastic = doc["elastic"];
  REQUIRE(elastic["generations"].size() == 3);
  CHECK(elastic["generations"][2]["workers"] == json::array({0, 1, 3}));
  CHECK(elastic["workers"][3] == json({{"worker", 3}, {"host", "localhost"}, {"slot", 2}}));
  REQUIRE(elastic["blacklisted"].size() == 1);
  CHECK(elastic["blacklisted"][0]["name"] == "localhost#2");
  CHECK(elastic["blacklisted"][0]["kind"] == "slot");
  CHECK(elastic["blacklisted"][0]["times"] == 1);
  REQUIRE(doc["ranks"].size() == 4);  // one entry per worker
  CHECK(doc["ranks"][3]["exit_code"] == 0);
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: below --min-np the job waits for a cooldown instead of failing",
          "[elastic]") {
  JobMarker marker;
  const RunResult r = run_elastic(marker,
                                  {"-np", "2", "--min-np", "2", "-H", "localhost:2",
                                   "--blacklist-cooldown-range", "1", "1", "--json"},
                                  {"30", "1", "5"}, 100);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: 1 rank left, fewer than --min-np 2: waiting up to 600 s"));
  CHECK_THAT(r.err, ContainsSubstring(done_line(0, 1, 0, 2, 1, 30, "465.0")));
  CHECK_THAT(r.err, ContainsSubstring(done_line(2, 1, 1, 2, 0, 30, "465.0")));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: with -np below --max-np the job grows onto the free slots",
          "[elastic]") {
  JobMarker marker;
  const RunResult r = run_elastic(
      marker, {"-np", "2", "--min-np", "1", "--max-np", "3", "-H", "localhost:3", "--json"}, {"20"},
      50);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: generation 1: 3 ranks on 1 host (growing: localhost#2 "
                               "free slot up to --max-np 3)"));
  for (int w = 0; w < 3; ++w) {
    CHECK_THAT(r.err, ContainsSubstring(done_line(w, 1, w, 3, w == 2 ? 0 : 1)));
  }
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: --gpus-per-rank gives a rank that takes a free slot that slot's GPUs",
          "[elastic]") {
  // The devices come from the plan's --gpus-per-rank (a typed fact), not from another rank's
  // CUDA_VISIBLE_DEVICES read back: slot K gets 2K,2K+1.
  JobMarker marker;
  const RunResult r = run_hvdrun({"-np", "1", "--min-np", "1", "-H", "localhost:3",
                                  "--gpus-per-rank", "2", "-x", marker.forward(), "sh", "-c",
                                  "echo \"slot $HOROVOD_LOCAL_RANK sees $CUDA_VISIBLE_DEVICES\"; "
                                  "sleep 1"},
                                 {marker.env()}, std::chrono::seconds(60));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("slot 0 sees 0,1") && ContainsSubstring("slot 1 sees 2,3") &&
                        ContainsSubstring("slot 2 sees 4,5"));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: a new rank dies before it connects, the others give its generation up",
          "[elastic]") {
  JobMarker marker;
  // Worker 2 is started for generation 1 (the job grows to --max-np 3) and dies 1.5 s later,
  // before hvd::init(), while workers 0 and 1 wait for it in generation 1's rendezvous: they
  // give it up when hvdrun announces generation 2 (without it), instead of timing out.
  const RunResult r =
      run_elastic(marker,
                  {"-np", "2", "--min-np", "1", "--max-np", "3", "-H", "localhost:3", "-x",
                   "ELASTIC_CHECK_DIE_BEFORE_INIT=2:1500", "--json"},
                  {"30"}, 100);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, ContainsSubstring("worker 2: killing myself before hvd::init()"));
  CHECK_THAT(r.err, ContainsSubstring("elastic: generation 1 could not be formed"));
  CHECK_THAT(r.err, ContainsSubstring("a newer generation of the elastic job was announced"));
  CHECK_THAT(r.err, ContainsSubstring(done_line(0, 2, 0, 2, 1, 30, "465.0")));
  CHECK_THAT(r.err, ContainsSubstring(done_line(1, 2, 1, 2, 1, 30, "465.0")));
  const json doc = json::parse(r.out);
  CHECK(doc["elastic"]["generations"][2]["workers"] == json::array({0, 1}));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: the C API (hvd_elastic_run) survives a killed rank the same way",
          "[elastic]") {
  JobMarker marker;
  std::vector<std::string> args{"-np",           "3",  "--min-np", "2", "-x", marker.forward(),
                                ELASTIC_CHECK_C, "20", "1",        "7"};
  const RunResult r = run_hvdrun(args, {marker.env()}, std::chrono::seconds(100));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  // Worker 1 died after step 7: workers 0 and 2 end as ranks 0 and 1 of 2, every step once.
  CHECK_THAT(r.out, ContainsSubstring(done_line(0, 1, 0, 2, 1)));
  CHECK_THAT(r.out, ContainsSubstring(done_line(2, 1, 1, 2, 1)));
  CHECK_THAT(r.out, ContainsSubstring("worker 2: generation 1 rank 1 size 2 from step 7"));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: rank 0 dies, the next survivor is rank 0 of the new world",
          "[elastic]") {
  JobMarker marker;
  const RunResult r = run_elastic(marker, {"-np", "3", "--min-np", "2"}, {"20", "0", "7"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring(done_line(1, 1, 0, 2, 1)));
  CHECK_THAT(r.out, ContainsSubstring(done_line(2, 1, 1, 2, 1)));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: a rank dying inside the reset costs one more generation", "[elastic]") {
  JobMarker marker;
  // Worker 3 dies after step 5; worker 2 dies inside generation 1's sync().
  const RunResult r = run_elastic(marker, {"-np", "4", "--min-np", "2"}, {"20", "3", "5", "2"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring(done_line(0, 2, 0, 2, 2)));
  CHECK_THAT(r.out, ContainsSubstring(done_line(1, 2, 1, 2, 2)));

  // The same with --reset-limit 1: the second change ends the job with its cause.
  JobMarker limited;
  const RunResult l = run_elastic(limited, {"-np", "4", "--min-np", "2", "--reset-limit", "1"},
                                  {"20", "3", "5", "2"});
  INFO(show(l));
  CHECK(l.exit_code == 137);
  CHECK_THAT(l.err, ContainsSubstring(
                        "hvdrun: rank 2 (host localhost, local rank 2) was killed by signal 9"));
  CHECK_THAT(l.err,
             ContainsSubstring("hvdrun: elastic: --reset-limit 1 reached (generation 1 was the "
                               "last); hvdrun stopped 2 other ranks."));
  CHECK(wait_until([&] { return limited.alive().empty(); }, 10s));
}

TEST_CASE("elastic launch: below --min-np the job ends with the failure that took it there",
          "[elastic]") {
  JobMarker marker;
  const RunResult r =
      run_elastic(marker, {"-np", "2", "--min-np", "2", "--json"}, {"20", "1", "7"});
  INFO(show(r));
  CHECK(r.exit_code == 137);
  CHECK_THAT(r.err, ContainsSubstring(
                        "hvdrun: rank 1 (host localhost, local rank 1) was killed by signal 9"));
  CHECK_THAT(r.err, ContainsSubstring("hvdrun: elastic: 1 rank left, fewer than --min-np 2; hvdrun "
                                      "stopped 1 other rank."));
  const json doc = json::parse(r.out);
  CHECK(doc["first_failure"]["rank"] == 1);
  CHECK(doc["first_failure"]["elastic"] == "elastic: 1 rank left, fewer than --min-np 2");
  CHECK(doc["ranks"][0]["stopped_by_hvdrun"] == true);
  CHECK(doc["elastic"]["resets"] == 0);
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}

TEST_CASE("elastic launch: survivors that never rebuild their world fail at the deadline",
          "[elastic]") {
  // A program without hvd::elastic: rank 1 dies, rank 0 never says "joined 1".
  JobMarker marker;
  const RunResult r =
      run_hvdrun({"-np", "2", "--min-np", "1", "--start-timeout", "2", "-x", marker.forward(), "sh",
                  "-c", "if [ $HOROVOD_RANK = 1 ]; then kill -9 $$; fi; sleep 60"},
                 {marker.env()}, std::chrono::seconds(60));
  INFO(show(r));
  CHECK(r.exit_code == 75);  // a start-up phase (the reset) did not finish in time
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: generation 1 did not form within 2 s: worker 0 never "
                               "joined"));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}

TEST_CASE("elastic launch: flags it cannot honour are refused before anything starts",
          "[elastic]") {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"--min-np", "2", "--mpi"}, "needs the native launch: MPI_COMM_WORLD cannot change size"},
      {{"-np", "2", "--min-np", "3"}, "--min-np 3 is more than the 2 ranks the job starts with"},
      {{"-np", "3", "--min-np", "2", "--max-np", "2"}, "--max-np 2 is less than the 3 ranks"},
      {{"--max-np", "4"}, "--max-np was given without --min-np"},
      {{"--min-np", "0"}, "--min-np 0: must be 1 or more"},
      {{"--min-np", "1", "--max-restarts", "2"}, "--max-restarts and --min-np were both given"},
      {{"--min-np", "1", "--host-discovery-script", "./no-such-script.sh"},
       "--host-discovery-script ./no-such-script.sh: not an executable file"},
      {{"--elastic-timeout", "60"}, "--elastic-timeout was given without --min-np"},
      {{"--min-np", "1", "--elastic-timeout", "soon"}, "--elastic-timeout"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back("true");
    const RunResult r = run_hvdrun(args);
    INFO(show(r));
    CHECK(r.exit_code == 64);
    CHECK_THAT(r.err, ContainsSubstring(c.error));
  }
  // The dry run says what the job will do.
  const RunResult dry = run_hvdrun({"--dry-run", "-np", "3", "--min-np", "2", "true"});
  INFO(show(dry));
  CHECK(dry.exit_code == 0);
  CHECK_THAT(dry.out, ContainsSubstring("while at least 2 of the 3 ranks remain (--min-np)"));
  CHECK_THAT(dry.out, ContainsSubstring("a failed slot is out for good"));
  const RunResult dry_json =
      run_hvdrun({"--dry-run", "--json", "-np", "3", "--min-np", "2", "--max-np", "5",
                  "--reset-limit", "4", "--elastic-timeout", "30", "--blacklist-cooldown-range",
                  "2", "8", "-H", "localhost:5", "--verbose", "true"});
  INFO(show(dry_json));
  const json plan = json::parse(dry_json.out);
  CHECK(plan["elastic"] == json({{"min_np", 2},
                                 {"max_np", 5},
                                 {"discovery_script", nullptr},
                                 {"reset_limit", 4},
                                 {"elastic_timeout_seconds", 30.0},
                                 {"slot_cooldown_seconds", {2.0, 8.0}}}));
}

TEST_CASE("elastic launch: a host the discovery script adds joins, and leaves when it is gone",
          "[elastic]") {
  JobMarker marker;
  TempDir dir;
  // Runs 1-2 (the launch, then 0.5 s later): localhost:2. Runs 3-6: also 127.0.0.1:1, a second
  // host (on this machine) that joins with one rank; from run 7 on it is gone again.
  const std::string script = discovery_script(
      dir, "echo localhost:2\nif [ $n -ge 3 ] && [ $n -le 6 ]; then echo 127.0.0.1:1; fi\n");
  const RunResult r = run_elastic(
      marker,
      {"--host-discovery-script", script, "--discovery-interval", "0.5", "--min-np", "1", "--json"},
      {"80"}, 100);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, ContainsSubstring("elastic: the host discovery lists 2 hosts; new: 127.0.0.1"));
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: the agent on 127.0.0.1 is up; checking its network"));
  // The joiner reached the running host and the rendezvous server, and the running host it.
  CHECK_THAT(r.err, ContainsSubstring("elastic: 127.0.0.1 passed the network check (3 probes)"));
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: generation 1: 3 ranks on 2 hosts (growing: 127.0.0.1#0 "
                               "free slot)"));
  CHECK_THAT(r.err, ContainsSubstring("worker 2: generation 1 rank 2 size 3"));
  CHECK_THAT(r.err, ContainsSubstring("elastic: generation 2: 2 ranks on 1 host (hosts changed: "
                                      "127.0.0.1#0 no longer listed by the host discovery)"));
  CHECK_THAT(r.err, ContainsSubstring("HVD_ERR_REMOVED"));  // worker 2 learnt it at its reset
  CHECK_THAT(r.err, ContainsSubstring("elastic: 127.0.0.1 left the job: its agent ends"));
  // Every step once, on every rank that finished.
  CHECK_THAT(r.err, ContainsSubstring(done_line(0, 2, 0, 2, 2, 80, "3240.0")));
  CHECK_THAT(r.err, ContainsSubstring(done_line(1, 2, 1, 2, 2, 80, "3240.0")));
  const json doc = json::parse(r.out);
  CHECK(doc["exit_code"] == 0);
  const json& elastic = doc["elastic"];
  REQUIRE(elastic["generations"].size() == 3);
  CHECK(elastic["generations"][1]["workers"] == json::array({0, 1, 2}));
  CHECK(elastic["generations"][1]["hosts"] == json({{"localhost", 2}, {"127.0.0.1", 1}}));
  CHECK(elastic["generations"][2]["workers"] == json::array({0, 1}));
  CHECK(elastic["generations"][2]["hosts"] == json({{"localhost", 2}}));
  CHECK(elastic["workers"][2] == json({{"worker", 2}, {"host", "127.0.0.1"}, {"slot", 0}}));
  CHECK(doc["ranks"][2]["host"] == "127.0.0.1");
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}

TEST_CASE("elastic launch: the launch waits for the discovery script to list --min-np slots",
          "[elastic]") {
  JobMarker marker;
  TempDir dir;
  const std::string script = discovery_script(dir, "if [ $n -ge 3 ]; then echo localhost:2; fi\n");
  const RunResult r = run_elastic(
      marker,
      {"--host-discovery-script", script, "--discovery-interval", "0.3", "--min-np", "2", "--json"},
      {"20"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: the host discovery script lists 0 slots; waiting up to "
                               "600 s (--elastic-timeout) for --min-np 2"));
  CHECK_THAT(r.err, ContainsSubstring(done_line(0, 0, 0, 2, 0)));
  CHECK_THAT(r.err, ContainsSubstring(done_line(1, 0, 1, 2, 0)));
  // Never enough: a usage error at --elastic-timeout, naming the script.
  TempDir empty;
  const std::string nothing = discovery_script(empty, "true\n");
  const RunResult never = run_hvdrun({"--host-discovery-script", nothing, "--discovery-interval",
                                      "0.2", "--elastic-timeout", "1", "--min-np", "1", "true"});
  INFO(show(never));
  CHECK(never.exit_code == 64);
  CHECK_THAT(never.err, ContainsSubstring("listed 0 slots for 1 s, fewer than --min-np 1"));
}

TEST_CASE("elastic launch: a failing discovery script keeps the last list", "[elastic]") {
  JobMarker marker;
  TempDir dir;
  const std::string script = discovery_script(
      dir, "if [ $n -ge 3 ]; then echo 'no scheduler today' >&2; exit 1; fi\necho localhost:2\n");
  const RunResult r = run_elastic(
      marker, {"--host-discovery-script", script, "--discovery-interval", "0.2", "--json"}, {"20"},
      100);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err,
             ContainsSubstring("exited with 1 (its stderr: no scheduler today); keeping the last "
                               "list"));
  CHECK_THAT(r.err, ContainsSubstring(done_line(0, 0, 0, 2, 0)));
  // Refused before anything starts: with -H, not executable, --slots-per-host alone.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--host-discovery-script", script, "-H", "localhost:2"},
       "--host-discovery-script and -H/--hostfile were both given"},
      {{"--host-discovery-script", dir / "count"}, "not an executable file"},
      {{"--min-np", "1", "--slots-per-host", "2"}, "--slots-per-host was given without"},
  };
  for (const auto& [args, words] : refused) {
    std::vector<std::string> full = args;
    full.push_back("true");
    const RunResult u = run_hvdrun(full);
    INFO(show(u));
    CHECK(u.exit_code == 64);
    CHECK_THAT(u.err, ContainsSubstring(words));
  }
}

TEST_CASE("elastic launch: on a terminal, one status line counts the cooldown down", "[elastic]") {
  if (::access("/usr/bin/script", X_OK) != 0) {
    WARN(
        "skipped: util-linux's script(1) is not installed (Debian's bsdutils): no terminal to "
        "run hvdrun on");
    return;
  }
  JobMarker marker;
  // script(1) gives hvdrun a terminal for stdout and stderr.
  const std::string command =
      std::string(HVDRUN_BINARY) +
      " -np 3 --min-np 2 -H localhost:3 --blacklist-cooldown-range 2 2 -x " + marker.forward() +
      " -x ELASTIC_CHECK_STEP_MS=100 " + ELASTIC_CHECK + " 50 2 5";
  const RunResult r = run_program({"/usr/bin/script", "-qec", command, "/dev/null"}, {marker.env()},
                                  std::chrono::seconds(100));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  // Drawn after a carriage return and an erase, redrawn as it changes, and cleared at the end.
  const std::string clear = "\r\033[K";
  CHECK_THAT(r.out, ContainsSubstring(clear + "elastic: 3 ranks on 1 host, generation 0"));
  CHECK_THAT(r.out,
             ContainsSubstring(clear + "elastic: 2 ranks on 1 host, generation 1; localhost#2 back "
                                       "in 2 s"));
  CHECK_THAT(r.out,
             ContainsSubstring(clear + "elastic: 2 ranks on 1 host, generation 1; localhost#2 back "
                                       "in 1 s"));
  CHECK_THAT(r.out, ContainsSubstring(clear + "elastic: 3 ranks on 1 host, generation 2"));
  CHECK(r.out.size() >= clear.size());
  CHECK(r.out.substr(r.out.size() - clear.size()) == clear);  // the terminal is left clean
  // Every log line and rank line starts on a cleared line: none is glued to the status.
  CHECK_THAT(r.out, !ContainsSubstring("generation 0hvdrun"));
  CHECK_THAT(r.out, ContainsSubstring(clear + "hvdrun: info: elastic: generation 2 formed in"));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}
