// End-to-end tests of the native launch on remote hosts over SSH: the real hvdrun, real OpenSSH
// sshd test hosts on 127.0.0.2.. (tests/sshd/README.md), the agent started over SSH on each host
// and real rank processes. What a rank sees (its environment), what the user sees (exit code,
// tagged output, the failure report, the --json result), and that nothing is left running on any
// host. The hosts are this machine, so /proc shows the remote ranks, their agents and the sshd
// session processes that carry them.
//
// Every hvdrun here is hermetic: the fixture's port, ssh_config and a private copy of its
// known_hosts, and fixture addresses in -H.
//
// Finding a job's processes: hvdrun carries the job marker (LC_HVDJOB) and the ranks carry it
// through -x HVDTEST_RANK_MARKER (launch_helpers.h). A remote agent does not (sshd does not pass
// LC_* here): it is found as the parent of a rank (`AGENT --agent`, SSH_CONNECTION in its
// environment), its guard (`hvdrun-guard`, agent/agent_guard.h) as the agent's parent, and its
// sshd session (`sshd: USER@notty`) as the guard's parent.
#include "tests/e2e/launch_ssh_helpers.h"

using namespace hvd::test::launch_ssh;  // NOLINT: test helpers

// ---------------------------------------------------------------------------------------------
// The rank environment on remote hosts

TEST_CASE("four ranks on four ssh hosts see the documented rank environment", "[launch-ssh]") {
  Hosts hosts;
  std::vector<Expected> want;
  std::string list;
  for (int i = 0; i < 4; ++i) {
    want.push_back({hosts.addr(static_cast<size_t>(i)), 0, 1, i, 4, i});
    list += (list.empty() ? "" : ",") + hosts.addr(static_cast<size_t>(i));
  }
  check_rank_environment(hosts, list, want);
}

TEST_CASE("four ranks on two ssh hosts with two slots see the rank environment", "[launch-ssh]") {
  Hosts hosts;
  const std::string a = hosts.addr(4), b = hosts.addr(5);
  check_rank_environment(
      hosts, a + ":2," + b + ":2",
      {{a, 0, 2, 0, 2, 0}, {a, 1, 2, 0, 2, 0}, {b, 0, 2, 1, 2, 1}, {b, 1, 2, 1, 2, 1}});
}

TEST_CASE("localhost and an ssh host: MASTER_ADDR is the launcher as the remote host sees it",
          "[launch-ssh]") {
  Hosts hosts;
  JobMarker marker;
  const std::string b = hosts.addr(6);
  // Rank 0 (local) ends last: the case where the local agent ends first is the next test's.
  Hvdrun hvdrun(
      {.args = hosts.args({"-H", "localhost:1," + b + ":1", "--json", "-x", marker.forward(), "sh",
                           "-c", "env; [ $HOROVOD_RANK = 1 ] || sleep 0.5; echo done"}),
       .env = {marker.env()},
       .out_path = hosts.dir() / "out",
       .err_path = hosts.dir() / "err"});
  const int code = hvdrun.wait(20s);  // -1: it hung (and was killed)
  const std::string err = read_file(hosts.dir() / "err");
  INFO("exit code " << code << "\n--- stderr ---\n" << err.substr(0, 6000));
  REQUIRE(code == 0);
  const TaggedLines out = split_tagged(err, "stdout");
  REQUIRE(out.by_rank.size() == 2);
  const auto env0 = env_lines(out.by_rank.at(0));
  const auto env1 = env_lines(out.by_rank.at(1));
  CHECK(out.by_rank.at(0).back() == "done");
  CHECK(out.by_rank.at(1).back() == "done");
  // Rank 1 is remote: it runs behind an SSH login to b; the client side of that login is the
  // launcher's address as b reaches it.
  REQUIRE(env1.count("SSH_CONNECTION") == 1);
  const std::vector<std::string> conn = words(env1.at("SSH_CONNECTION"));
  REQUIRE(conn.size() == 4);
  CHECK(conn[2] == b);
  const std::string launcher = conn[0];
  CHECK(launcher == "127.0.0.1");
  CHECK(env0.count("SSH_CONNECTION") == 0);  // rank 0 is local: no SSH in between
  for (const auto* env : {&env0, &env1}) {
    REQUIRE(env->count("MASTER_ADDR") == 1);
    CHECK(env->at("MASTER_ADDR") == launcher);
    CHECK(env->at("MASTER_ADDR") != "localhost");
    REQUIRE(env->count("MASTER_PORT") == 1);
    CHECK(all_digits(env->at("MASTER_PORT")));
  }
  CHECK(env0.at("MASTER_PORT") == env1.at("MASTER_PORT"));
  CHECK(env0.at("HOROVOD_HOSTNAME") == "localhost");
  CHECK(env1.at("HOROVOD_HOSTNAME") == b);
  CHECK(env1.at("HVD_ADVERTISE_ADDR") == b);
  // Rank 0's host is reached at the launcher's address too.
  CHECK(env0.at("HVD_ADVERTISE_ADDR") == launcher);
  const json doc = parse_json(read_file(hosts.dir() / "out"));
  CHECK(doc["ok"] == true);
  CHECK(doc["ranks"][0]["host"] == "localhost");
  CHECK(doc["ranks"][1]["host"] == b);
  CHECK(wait_until([&] { return marker.alive().empty(); }, 3s));
}

// While alive, this thread runs on one CPU only, and so does what it starts (affinity is
// inherited): hvdrun and its local agent then share a CPU.
class OneCpu {
 public:
  OneCpu() {
    ::sched_getaffinity(0, sizeof old_, &old_);
    int cpu = 0;
    while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &old_)) ++cpu;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ::sched_setaffinity(0, sizeof one, &one);
  }
  OneCpu(const OneCpu&) = delete;
  OneCpu& operator=(const OneCpu&) = delete;
  ~OneCpu() { ::sched_setaffinity(0, sizeof old_, &old_); }

 private:
  cpu_set_t old_{};
};

// The local agent ends while the remote host's rank still runs: hvdrun must still notice that its
// child exited (SIGCHLD) and finish. hvdrun sees the agent's pipe close a moment before the
// agent becomes a zombie; on one shared CPU hvdrun usually runs in that moment, so its first
// waitpid() comes too early and only SIGCHLD can tell it later. Several rounds.
TEST_CASE("localhost and an ssh host: hvdrun finishes when the local agent ends first",
          "[launch-ssh]") {
  Hosts hosts;
  const std::string b = hosts.addr(7);
  std::vector<std::pair<int, std::string>> runs;  // exit code (-1: hung), stderr
  for (int round = 0; round < 6; ++round) {
    JobMarker marker;
    std::optional<OneCpu> pinned;
    pinned.emplace();
    Hvdrun hvdrun({.args = hosts.args({"-H", "localhost:1," + b + ":1", "-x", marker.forward(),
                                       "sh", "-c", "[ $HOROVOD_RANK = 0 ] || sleep 0.3"}),
                   .env = {marker.env()},
                   .out_path = hosts.dir() / "out",
                   .err_path = hosts.dir() / "err"});
    pinned.reset();
    runs.emplace_back(hvdrun.wait(6s), read_file(hosts.dir() / "err"));
    if (runs.back().first != 0) break;
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    INFO("round " << i << " (-1: still running after 6 s, then killed)\n--- stderr ---\n"
                  << runs[i].second);
    CHECK(runs[i].first == 0);
  }
}

TEST_CASE("the launch on ssh hosts follows the dry-run plan", "[launch-ssh]") {
  Hosts hosts;
  JobMarker marker;
  const std::string a = hosts.addr(8), b = hosts.addr(9), c = hosts.addr(10);
  const std::vector<std::string> common{
      "-H", a + ":1," + b + ":3," + c + ":2", "-np", "5", "-x", marker.forward(),
      "-x", "HVDTEST_PLAIN=plain value"};
  std::vector<std::string> plan_args = common;
  plan_args.insert(plan_args.begin(), {"--dry-run", "--json"});
  plan_args.insert(plan_args.end(), {"sh", "-c", "env"});
  std::vector<std::string> run_args = common;
  run_args.insert(run_args.begin(), "--json");
  run_args.insert(run_args.end(), {"sh", "-c", "env"});

  const RunResult dry = run_hvdrun(hosts.args(plan_args), {marker.env()});
  INFO("dry run: " << show(dry));
  REQUIRE(dry.exit_code == 0);
  const json plan = parse_json(dry.out);
  const RunResult r = run_hvdrun(hosts.args(run_args), {marker.env()});
  INFO("run: " << show(r));
  REQUIRE(r.exit_code == 0);
  const json doc = parse_json(r.out);
  const TaggedLines out = split_tagged(r.err, "stdout");

  REQUIRE(plan["ranks"].size() == 5);
  REQUIRE(doc["ranks"].size() == 5);
  REQUIRE(out.by_rank.size() == 5);
  // The plan's hosts in -H order: 1 rank on a, 3 on b, 1 of c's 2 slots.
  REQUIRE(plan["hosts"].size() == 3);
  CHECK(plan["hosts"][0]["host"] == a);
  CHECK(plan["hosts"][1]["host"] == b);
  CHECK(plan["hosts"][2]["host"] == c);
  for (int rank = 0; rank < 5; ++rank) {
    INFO("rank " << rank);
    const json& p = plan["ranks"][rank];
    const json& jr = doc["ranks"][rank];
    CHECK(p["rank"] == rank);
    CHECK(p["local"] == false);
    CHECK(jr["rank"] == rank);
    CHECK(jr["host"] == p["host"]);
    CHECK(jr["local_rank"] == p["local_rank"]);
    const auto env = env_lines(out.by_rank.at(rank));
    CHECK(env.at("HOROVOD_HOSTNAME") == p["host"].get<std::string>());
    CHECK(env.at("HOROVOD_LOCAL_RANK") == std::to_string(p["local_rank"].get<int>()));
    CHECK(env.at("HOROVOD_LOCAL_SIZE") == std::to_string(p["local_size"].get<int>()));
    CHECK(env.at("HOROVOD_CROSS_RANK") == std::to_string(p["cross_rank"].get<int>()));
    CHECK(env.at("HOROVOD_CROSS_SIZE") == std::to_string(p["cross_size"].get<int>()));
    CHECK(env.at("GROUP_RANK") == std::to_string(p["host_index"].get<int>()));
    const std::vector<std::string> conn =
        words(env.count("SSH_CONNECTION") == 1 ? env.at("SSH_CONNECTION") : std::string());
    CHECK(conn.size() == 4);
    if (conn.size() == 4) CHECK(conn[2] == p["host"].get<std::string>());
    // Every value the plan knows is what the rank got; the job id is new for each invocation,
    // values set at launch and -x values read `<...>` in the plan.
    for (const auto& [name, value] : p["env"].items()) {
      const std::string v = value.get<std::string>();
      if (name == "HVD_JOB_ID" || (!v.empty() && v.front() == '<')) continue;
      INFO(name);
      CHECK(env.count(name) == 1);
      if (env.count(name) == 1) CHECK(env.at(name) == v);
    }
    CHECK(env.at("HVDTEST_PLAIN") == "plain value");
  }
  CHECK(plan["ranks"][0]["env"]["MASTER_ADDR"] == a);
}

// ---------------------------------------------------------------------------------------------
// Failures on a remote host: the first failed rank's code, the others stopped, the host named

// ---------------------------------------------------------------------------------------------
// The start-up's live line on a terminal

TEST_CASE("launch on a terminal: a live line through the start-up, cleared before rank output",
          "[launch-ssh]") {
  if (::access("/usr/bin/script", X_OK) != 0) {
    WARN("skipped: util-linux's script(1) is not installed (Debian's bsdutils): no terminal");
    return;
  }
  Hosts hosts;
  JobMarker marker;
  const std::string list = hosts.addr(36) + "," + hosts.addr(37);
  std::string command = "TERM=xterm " + std::string(HVDRUN_BINARY);
  for (const std::string& a : hosts.args({"-H", list, "-x", marker.forward()})) {
    command += " '" + a + "'";
  }
  command += " sh -c 'echo rank $HOROVOD_RANK up'";
  // script(1) gives hvdrun a terminal for stdout and stderr.
  const RunResult r = run_program({"/usr/bin/script", "-qec", command, "/dev/null"}, {marker.env()},
                                  std::chrono::seconds(60));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  const std::string clear = "\r\033[K";
  // The SSH logins, then the agents (both drawn at their start), each after an erase.
  CHECK_THAT(r.out, ContainsSubstring(clear + "launch: SSH logins 0 of 2 done, 0 failed ("));
  CHECK_THAT(r.out, ContainsSubstring(clear + "launch: agents up on 0 of 2 hosts ("));
  // Gone before the ranks' lines, which start on a cleared line, and gone at the end.
  CHECK_THAT(r.out, ContainsSubstring("[1,0]<stdout>:rank 0 up"));
  CHECK_THAT(r.out, ContainsSubstring("[1,1]<stdout>:rank 1 up"));
  CHECK_THAT(r.out, !ContainsSubstring(" s)[1,"));
  const size_t last = r.out.rfind("launch: ");
  REQUIRE(last != std::string::npos);
  CHECK(r.out.find(clear, last) != std::string::npos);
  // Not on a pipe, and not with --json on a terminal.
  const RunResult piped =
      run_hvdrun(hosts.args({"-H", list, "-x", marker.forward(), "true"}), {marker.env()});
  REQUIRE(piped.exit_code == 0);
  CHECK_THAT(piped.err, !ContainsSubstring("launch: "));
  std::string json_command = command;
  json_command.insert(json_command.find(" sh -c"), " --json");
  const RunResult json_run = run_program({"/usr/bin/script", "-qec", json_command, "/dev/null"},
                                         {marker.env()}, std::chrono::seconds(60));
  REQUIRE(json_run.exit_code == 0);
  CHECK_THAT(json_run.out, !ContainsSubstring("launch: "));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}
