// Elastic training across hosts (--min-np over the sshd test hosts, tests/sshd/README.md): a rank
// on one host dies, a whole host goes (its agent killed, its ranks with it), rank 0's host goes;
// the others must go on in a smaller world from their last commit (elastic_check's weights end at
// 210.0 only when each of its 20 steps ran once), and below --min-np the job must end with the
// lost host's code and words.
#include "tests/support/catch.h"

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
  for (int w : {0, 1, 2}) CHECK_THAT(r.err, ContainsSubstring(done_line(w, 1, w, 3)));
  const json doc = parse_json(r.out);
  const json& g1 = doc["elastic"]["generations"][1];
  CHECK(g1["workers"] == json::array({0, 1, 2}));
  CHECK_THAT(g1["reason"].get<std::string>(), ContainsSubstring("(worker 3) on " + b));
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
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: generation 1: 2 ranks on 1 host (lost the agent on " + b));
  for (int w : {0, 1}) CHECK_THAT(r.err, ContainsSubstring(done_line(w, 1, w, 2)));
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
  CHECK_THAT(r.err, ContainsSubstring(done_line(2, 1, 0, 2)));
  CHECK_THAT(r.err, ContainsSubstring(done_line(3, 1, 1, 2)));
  // The new rank 0's host is generation 1's master (hvd::elastic::world()), on both ranks.
  CHECK(std::regex_search(r.err,
                          std::regex("worker 2: generation 1 rank 0 size 2 from step [0-9]+, "
                                     "master " +
                                     std::regex_replace(b, std::regex("\\."), "\\.") + ":[0-9]+")));
  CHECK(std::regex_search(r.err,
                          std::regex("worker 3: generation 1 rank 1 size 2 from step [0-9]+, "
                                     "master " +
                                     std::regex_replace(b, std::regex("\\."), "\\.") + ":[0-9]+")));
  // Generation 0's master was a, as a survivor on b printed it (a's own lines may be lost with
  // its agent).
  CHECK_THAT(r.err, ContainsSubstring("worker 2: generation 0 rank 2 size 4 from step 0, master " +
                                      a + ":"));
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
  CHECK_THAT(r.err, ContainsSubstring("lost the agent on " + b));
  CHECK_THAT(r.err, ContainsSubstring("elastic: 2 ranks left, fewer than --min-np 3"));
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
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: the agent on " + b + " is up; checking its network"));
  CHECK_THAT(r.err, ContainsSubstring("elastic: " + b + " passed the network check (3 probes)"));
  CHECK_THAT(r.err,
             ContainsSubstring("elastic: host " + refused + " could not join: connection_refused"));
  CHECK_THAT(r.err, ContainsSubstring("elastic: host " + refused + " is out for good"));
  CHECK_THAT(r.err, ContainsSubstring("elastic: generation 1: 4 ranks on 2 hosts (growing: " + b +
                                      "#0, " + b + "#1 free slots)"));
  // Each step once on every rank, those that joined included (their state came from rank 0).
  for (int w = 0; w < 4; ++w) {
    CHECK_THAT(r.err,
               ContainsSubstring("worker " + std::to_string(w) + " done: generation 1 rank " +
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

namespace {

// Waits until `path` contains `text` (true), or `limit` passed.
bool wait_for_text(const std::string& path, const std::string& text,
                   std::chrono::milliseconds limit) {
  return wait_until([&] { return read_file(path).find(text) != std::string::npos; }, limit);
}

// The pid of the process of worker `worker` of the job marked `marker`.
pid_t worker_pid(const JobMarker& marker, int worker) {
  const std::string mine = "HVD_ELASTIC_WORKER=" + std::to_string(worker);
  for (pid_t pid : marker.ranks()) {
    const std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
    if (env.find(std::string("\0", 1) + mine + std::string("\0", 1)) != std::string::npos) {
      return pid;
    }
  }
  return -1;
}

}  // namespace

// The scenario with the Fashion-MNIST example (--elastic) over the sshd hosts, each step
// waiting for the one before: the job starts on a (2 ranks); b appears in the discovery output
// and joins (4 ranks, b's ranks get the parameters); a rank on b is killed (3 ranks); b leaves
// the output (2 ranks). Every generation starts with identical parameters on every rank, and
// the training ends at its usual accuracy.
TEST_CASE("elastic over SSH: the Fashion-MNIST example while hosts join, fail and leave",
          "[elastic][ssh][slow]") {
  Hosts hosts;
  JobMarker marker;
  TempDir dir;
  const std::string a = hosts.addr(62), b = hosts.addr(63);
  const std::string list = dir / "hosts";
  write_file(list, a + ":2\n");
  const std::string script = discovery_script(dir, "cat '" + list + "'\n");
  Hvdrun::Setup setup;
  setup.args = hosts.args({"--host-discovery-script", script, "--discovery-interval", "0.5",
                           "--min-np", "2", "-x", marker.forward(), TRAIN_FASHION_MNIST,
                           "--elastic", "--epochs", "4", "--commit-every", "20"});
  setup.env = {marker.env()};
  setup.out_path = dir / "out";
  setup.err_path = dir / "err";
  Hvdrun run(setup);
  const auto show_all = [&] { return read_file(dir / "out") + "\n---\n" + read_file(dir / "err"); };
  REQUIRE(wait_for_text(dir / "out", "fashion-mnist elastic: generation 0, 2 ranks", 60s));
  write_file(list, a + ":2\n" + b + ":2\n");
  INFO(show_all());
  REQUIRE(wait_for_text(dir / "out", "fashion-mnist elastic: generation 1, 4 ranks", 60s));
  const pid_t victim = worker_pid(marker, 3);  // rank 3, on b
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  REQUIRE(wait_for_text(dir / "out", "fashion-mnist elastic: generation 2, 3 ranks", 60s));
  write_file(list, a + ":2\n");
  REQUIRE(wait_for_text(dir / "out", "fashion-mnist elastic: generation 3, 2 ranks", 60s));
  const int code = run.wait(120s);
  const std::string out = read_file(dir / "out"), err = read_file(dir / "err");
  INFO(out + "\n---\n" + err);
  CHECK(code == 0);
  CHECK_THAT(err, ContainsSubstring("elastic: " + b + " passed the network check"));
  CHECK_THAT(err, ContainsSubstring("was killed by signal 9"));
  CHECK_THAT(err, ContainsSubstring(b + "#0 no longer listed by the host discovery"));
  CHECK_THAT(err, ContainsSubstring("elastic: " + b + " left the job: its agent ends"));
  // Every generation began with the same parameters everywhere, and so did every epoch's end.
  CHECK_THAT(out, !ContainsSubstring("DIFFER"));
  CHECK(std::regex_search(out, std::regex("final test accuracy: (8[0-9]|9[0-9])\\.[0-9]+% on 2 "
                                          "ranks \\(elastic, 3 resets\\)")));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}

TEST_CASE(
    "elastic over SSH: a host SSH cannot reach at the launch is left out while --min-np "
    "remain",
    "[elastic][ssh]") {
  Hosts hosts;
  JobMarker marker;
  const std::string a = hosts.addr(47);
  const std::string refused = "127.0.0.252";  // no sshd there: connection refused
  std::vector<std::string> args = hosts.args(
      {"-H", a + ":2," + refused + ":2", "-np", "4", "--min-np", "2", "-x", marker.forward()});
  args.insert(args.end(), {ELASTIC_CHECK, "20"});
  const RunResult r = run_hvdrun(args, {marker.env()}, std::chrono::seconds(100));
  INFO(show(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, ContainsSubstring("hvdrun: elastic: " + refused +
                                      " cannot be reached over SSH; the "
                                      "job starts without it on 2 slots (--min-np 2)"));
  CHECK_THAT(r.err, ContainsSubstring("connection_refused"));
  for (int w : {0, 1}) {
    CHECK_THAT(r.out,
               ContainsSubstring("worker " + std::to_string(w) + " done: generation 0 rank " +
                                 std::to_string(w) + " size 2 resets 0 steps 20 weights 210.0"));
  }
  // Not enough left for --min-np 3: the launch fails as any SSH failure does (69).
  std::vector<std::string> more = hosts.args(
      {"-H", a + ":2," + refused + ":2", "-np", "4", "--min-np", "3", "-x", marker.forward()});
  more.insert(more.end(), {ELASTIC_CHECK, "20"});
  const RunResult short_of = run_hvdrun(more, {marker.env()}, std::chrono::seconds(100));
  INFO(show(short_of));
  CHECK(short_of.exit_code == 69);
  CHECK(wait_until([&] { return marker.alive().empty(); }, 10s));
}
