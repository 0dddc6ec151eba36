// SSH launch tests, part 3: hosts that freeze or fail between attempts: the stop deadline, the
// keepalive, and restarts with host health.
#include "tests/e2e/launch_ssh_helpers.h"

using namespace hvd::test::launch_ssh;  // NOLINT: test helpers

// A frozen host (its agent SIGSTOPped stands for a machine that hangs, or a link that drops
// packets without a reset): hvdrun must neither wait for it forever nor leave its ranks behind.
namespace {

struct FrozenHost {
  Hosts hosts;
  JobMarker marker;
  std::string a, b;
  std::optional<Hvdrun> hvdrun;
  std::vector<RemoteSide> sides;
  std::optional<RemoteSide> frozen;  // b's side, its agent stopped

  FrozenHost(int first, std::vector<std::string> flags)
      : a(hosts.addr(first)), b(hosts.addr(first + 1)) {
    std::vector<std::string> args{"-H",     a + "," + b, "--grace",       "1",
                                  "--json", "-x",        marker.forward()};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"sh", "-c", "exec sleep 1000"});
    hvdrun.emplace(Hvdrun::Setup{.args = hosts.args(args),
                                 .env = {marker.env()},
                                 .out_path = hosts.dir() / "out",
                                 .err_path = hosts.dir() / "err"});
  }
  // Waits for both ranks, then stops b's agent. False if the job never got there.
  bool freeze_b() {
    if (!wait_until([&] { return sleeping(marker) == 2; }, 15s)) return false;
    sides = remote_sides(marker);
    for (const RemoteSide& side : sides) {
      if (side.server == b) frozen = side;
    }
    if (!frozen || !still_running(frozen->agent)) return false;
    return ::kill(frozen->agent.pid, SIGSTOP) == 0;
  }
  // Lets b's agent run again: it finds its input closed and stops its rank.
  bool thaw_and_check_nothing_left() {
    if (frozen) ::kill(frozen->agent.pid, SIGCONT);
    return wait_until([&] { return leftovers(marker, sides).empty(); }, 8s);
  }
  ~FrozenHost() {
    if (frozen) ::kill(frozen->agent.pid, SIGCONT);
  }
};

}  // namespace

TEST_CASE("a frozen host does not hang the stop: hvdrun gives up on it after grace + margin",
          "[launch-ssh]") {
  FrozenHost job(36, {"--keepalive", "0"});  // the stop deadline alone
  const bool frozen = job.freeze_b();
  const auto start = Clock::now();
  job.hvdrun->signal(SIGTERM);
  const int code = job.hvdrun->wait(20s);  // before: it waited for b forever
  const auto elapsed = Clock::now() - start;
  const bool nothing_left = job.thaw_and_check_nothing_left();
  const std::string err = read_file(job.hosts.dir() / "err");
  INFO("--- stderr ---\n"
       << err.substr(0, 6000) << "\nleft running:\n"
       << leftovers(job.marker, job.sides));
  REQUIRE(frozen);
  CHECK(code == 143);
  CHECK(elapsed < 10s);  // grace 1 s + margin 3 s + the session's close (3 s)
  CHECK(nothing_left);
  CHECK_THAT(err, ContainsSubstring("gave up on the agent on " + job.b));
  CHECK(err.find("gave up on the agent on " + job.a) == std::string::npos);
  const json doc = parse_json(read_file(job.hosts.dir() / "out"));
  CHECK(doc["abandoned"] == json::array({job.b}));
  CHECK(doc["exit_code"] == 143);
}

TEST_CASE("a host silent past --keepalive is lost: exit 74 naming it, the others stopped",
          "[launch-ssh]") {
  FrozenHost job(38, {"--keepalive", "2"});
  const bool frozen = job.freeze_b();
  const auto start = Clock::now();
  const int code = job.hvdrun->wait(20s);  // before: the job ran on, b's rank unreachable
  const auto elapsed = Clock::now() - start;
  const bool nothing_left = job.thaw_and_check_nothing_left();
  const std::string err = read_file(job.hosts.dir() / "err");
  INFO("--- stderr ---\n"
       << err.substr(0, 6000) << "\nleft running:\n"
       << leftovers(job.marker, job.sides));
  REQUIRE(frozen);
  CHECK(code == 74);
  CHECK(elapsed >= 1s);  // silence is judged over the whole period, not at the first ping
  CHECK(elapsed < 10s);  // 2 s of silence, then a's rank stopped within its grace
  CHECK(nothing_left);
  CHECK_THAT(err,
             ContainsSubstring("lost the host " + job.b + ": nothing came from its agent for 2 s"));
  const json doc = parse_json(read_file(job.hosts.dir() / "out"));
  CHECK(doc["exit_code"] == 74);
  CHECK(doc["error"]["kind"] == "host_lost");
  CHECK(doc["ranks"][0]["stopped_by_hvdrun"] == true);
}

// ---------------------------------------------------------------------------------------------
// Restarts and host health (launcher/core/restarts.h)

TEST_CASE(
    "restarts: a host whose SSH is refused is blacklisted and the next attempt runs without it",
    "[launch-ssh][restarts]") {
  Hosts hosts;
  const std::string a = hosts.addr(40), b = hosts.addr(41);
  const std::string dead = "127.0.0.199";  // no sshd there: connection refused
  const RunResult r =
      run_hvdrun(hosts.args({"-H", a + ":1," + dead + ":1," + b + ":1", "-np", "2",
                             "--max-restarts", "1", "--restart-backoff", "0", "--json", "sh", "-c",
                             "echo rank $HOROVOD_RANK on $HOROVOD_HOSTNAME"}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, ContainsSubstring("host " + dead + " is blacklisted for"));
  CHECK_THAT(r.err, ContainsSubstring("attempt 2 runs without the blacklisted " + dead));
  CHECK_THAT(r.err, ContainsSubstring("rank 0 on " + a));
  CHECK_THAT(r.err, ContainsSubstring("rank 1 on " + b));
  const json doc = parse_json(r.out);
  REQUIRE(doc["attempts"].size() == 2);
  CHECK(doc["attempts"][0]["exit_code"] == 69);
  CHECK(doc["attempts"][1]["blacklisted"] == json::array({dead}));
  CHECK(doc["np"] == 2);
  CHECK(doc["ranks"][1]["host"] == b);
}

TEST_CASE("restarts: with no spare slots the next attempt waits for the host's cooldown",
          "[launch-ssh][restarts]") {
  Hosts hosts;
  const std::string a = hosts.addr(42);
  const std::string dead = "127.0.0.198";
  const auto start = Clock::now();
  const RunResult r = run_hvdrun(
      hosts.args({"-H", a + ":1," + dead + ":1", "-np", "2", "--max-restarts", "1",
                  "--restart-backoff", "0", "--blacklist-cooldown-range", "1", "1", "true"}));
  const auto elapsed = Clock::now() - start;
  INFO(show(r));
  CHECK(r.exit_code == 69);  // the host is still refused when it comes back
  CHECK_THAT(r.err,
             ContainsSubstring("waiting 1 s for a blacklisted host (" + dead + ") to come back"));
  CHECK(elapsed >= 1s);
  CHECK_THAT(r.err, ContainsSubstring("no restart: all 1 restarts were used"));
}
