// Host discovery (launcher/plan/discovery.h): what the script's output may say, how its runs are
// told apart, and (issue 51, finding 5) what a list must cost: by change, not by turn of the
// launcher's loop. A list of 4096 hosts x 1024 slots (inside the parser's bounds) held hvdrun at
// 320 MB and a full core: next_deadline(), asked every turn, built a key for every listed slot.
#include <unistd.h>

#include "tests/support/catch.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "launcher/elastic/elastic_driver.h"
#include "launcher/plan/discovery.h"

using Catch::Matchers::ContainsSubstring;
using hvd::launcher::ElasticDriver;
using hvd::launcher::ElasticPolicy;
using hvd::launcher::parse_discovery_output;
using hvd::launcher::PoolHost;
using Clock = ElasticDriver::Clock;
using namespace std::chrono_literals;

namespace {

// A discovery script of the test's own: `body` (after "#!/bin/sh\n") in a folder of its own, which
// goes with the object.
struct Script {
  std::filesystem::path dir;
  std::string path;
  Script(const std::string& name, const std::string& body)
      : dir(std::filesystem::temp_directory_path() /
            ("hvd-discovery-" + name + "-" + std::to_string(::getpid()))),
        path((dir / "discover.sh").string()) {
    std::filesystem::create_directories(dir);
    std::ofstream(path) << "#!/bin/sh\n" << body;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  ~Script() { std::filesystem::remove_all(dir); }
  Script(const Script&) = delete;
  Script& operator=(const Script&) = delete;
};

}  // namespace

TEST_CASE("elastic driver: 4096 listed hosts of 1024 slots cost nothing per turn", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticPolicy p;
  p.min_np = 1;
  p.max_np = 2;
  p.discovery = true;
  p.cooldown = std::pair{5.0, 5.0};
  p.elastic_timeout = 60s;
  ElasticDriver d(p, {{"a", 2}}, {{0, {"a", 0}}, {1, {"a", 1}}}, "a", 29500, t0);
  d.start({}, t0);
  std::vector<PoolHost> many{{"a", 2}};
  for (int i = 1; i < 4096; ++i) many.push_back({"h" + std::to_string(i), 1024});
  d.on_discovered(many, t0);
  d.on_exit(1, 1, "rank 1 exited with 1", t0);  // a#1 cools down for 5 s: a deadline to find
  const auto start = Clock::now();
  std::optional<Clock::time_point> next;
  std::vector<hvd::launcher::ElasticBlacklistEntry> blacklist;
  for (int turn = 0; turn < 200; ++turn) {  // what 200 turns of the loop ask
    next = d.next_deadline();
    blacklist = d.blacklist(t0);
  }
  for (int run = 0; run < 20; ++run) d.on_discovered(many, t0);  // the same list again
  const auto took = Clock::now() - start;
  CHECK(took < 2s);  // before: about a second per next_deadline()
  REQUIRE(next.has_value());
  CHECK(*next <= t0 + 5s);
  REQUIRE(blacklist.size() == 1);
  CHECK(blacklist[0].key == "a#1");
  // A failure charged to a host no longer listed is not the pool's.
  d.on_discovered({{"a", 2}}, t0);
  CHECK(d.blacklist(t0).size() == 1);
}

TEST_CASE("discovery output: host[:slots] lines, comments, blanks, IPv6, users", "[elastic]") {
  const auto hosts = parse_discovery_output(
      "# from the scheduler\n\n10.0.0.1:4\n  10.0.0.2  \r\nalice@h3:1\n[fe80::1]:2\n[::1]\n", 8);
  REQUIRE(hosts.size() == 5);
  CHECK(hosts[0].host == "10.0.0.1");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].host == "10.0.0.2");
  CHECK(hosts[1].slots == 8);  // no :slots: --slots-per-host
  CHECK(hosts[2].user == std::optional<std::string>("alice"));
  CHECK(hosts[2].slots == 1);
  CHECK(hosts[3].host == "fe80::1");
  CHECK(hosts[3].slots == 2);
  CHECK(hosts[4].host == "::1");
  CHECK(hosts[4].slots == 8);
  CHECK(hosts[4].origin == "discovery line 7");
  CHECK(parse_discovery_output("", 1).empty());  // no hosts now: not an error
  CHECK(parse_discovery_output("# nothing\n\n", 1).empty());
  // horovodrun takes the set of lines: the same line twice is one host.
  const auto twice = parse_discovery_output("a:2\nb:1\na:2\n", 1);
  REQUIRE(twice.size() == 2);
  CHECK(twice[0].host == "a");
  CHECK(twice[0].slots == 2);
  CHECK(twice[1].host == "b");
}

TEST_CASE("discovery output: every refusal names its line", "[elastic]") {
  const auto refused = [](const std::string& text, const std::string& words) {
    INFO(text);
    try {
      parse_discovery_output(text, 1);
      FAIL("accepted");
    } catch (const hvd::Error& e) {
      CHECK_THAT(std::string(e.what()), ContainsSubstring(words));
    }
  };
  refused("a:2\nb:x\n", "line 2");
  refused("a:2\na:3\n", "line 2: a is listed twice, with other slots");
  refused("a:0\n", "line 1");
  refused("a b:2\n", "line 1");
  refused("fe80::1:2\n", "an IPv6 address needs brackets");
  refused(std::string("a:2\nb\0c\n", 8), "line 2: a NUL byte");
  refused("a:2\n" + std::string(2000, 'x') + "\n", "line 2: 2000 bytes (at most 1024)");
  std::string many;
  for (int i = 0; i <= 4096; ++i) many += "h" + std::to_string(i) + "\n";
  refused(many, "more than 4096 hosts");
}

TEST_CASE("host discovery: a run that prints what the last good one did is unchanged",
          "[elastic]") {
  const Script script("cat", "cat \"$(dirname \"$0\")/list\"\n");
  const std::string list = (script.dir / "list").string();
  hvd::launcher::DiscoveryRunner runner(script.path, 1, 10s);
  auto run = [&](const std::string& text) {
    std::ofstream(list) << text;
    runner.start(Clock::now());
    for (;;) {
      runner.on_readable();
      if (auto outcome = runner.finish(Clock::now())) return *outcome;
      std::this_thread::sleep_for(5ms);
    }
  };
  const auto first = run("a:2\nb\n");
  REQUIRE(first.hosts.has_value());
  CHECK_FALSE(first.unchanged);
  const auto same = run("a:2\nb\n");
  CHECK(same.unchanged);
  CHECK_FALSE(same.hosts.has_value());  // nothing to copy or to pass on
  CHECK_FALSE(run("a:2\nb\nc\n").unchanged);
  CHECK_FALSE(run("a:2\nb:x\n").hosts.has_value());  // a bad list is not remembered
  CHECK(run("a:2\nb\nc\n").unchanged);               // the last good one is
}

TEST_CASE("host discovery: the launch's own list is not parsed again by the job", "[elastic]") {
  // Issue 51, finding 5: the launch ran the script (run_once) and parsed 4096 hosts; the job's
  // first run printed the same and parsed them all again.
  const Script script("seed", "echo a:2\necho b\n");
  const hvd::launcher::DiscoveryListing launch =
      hvd::launcher::DiscoveryRunner::run_once(script.path, 1, 2s);
  CHECK(launch.output == "a:2\nb\n");
  REQUIRE(launch.hosts.size() == 2);
  hvd::launcher::DiscoveryRunner runner(script.path, 1, 10s);
  runner.assume_output(launch.output);
  runner.start(Clock::now());
  std::optional<hvd::launcher::DiscoveryRunner::Outcome> outcome;
  while (!(outcome = runner.finish(Clock::now()))) {
    runner.on_readable();
    std::this_thread::sleep_for(5ms);
  }
  CHECK(outcome->unchanged);
  CHECK_FALSE(outcome->hosts.has_value());
}

TEST_CASE("host discovery: a background process left holding the script's stdout is not waited for",
          "[elastic]") {
  // Issue 51, finding 7: a valid list, then "ran longer than 10 s" (exit 64 before the launch),
  // because the run waited for the pipe's EOF, which the background process held off.
  const Script script("bg", "echo a:2\necho b\nsleep 5 &\n");
  const auto start = Clock::now();
  const auto hosts = hvd::launcher::DiscoveryRunner::run_once(script.path, 1, 2s).hosts;
  CHECK(Clock::now() - start < 1500ms);
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[0].host == "a");
  CHECK(hosts[0].slots == 2);
  CHECK(hosts[1].host == "b");
}

TEST_CASE("elastic driver: hosts that come and go are forgotten after a while", "[elastic]") {
  // Issue 51, finding 6: every host a discovery ever listed and that failed to join stayed
  // charged for good (100 runs of fresh names: 100 entries, and growing).
  const auto t0 = Clock::now();
  ElasticPolicy p;
  p.min_np = 1;
  p.max_np = 1 << 20;
  p.discovery = true;
  ElasticDriver d(p, {{"a", 1}}, {{0, {"a", 0}}}, "a", 29500, t0);
  d.start({}, t0);
  for (int run = 0; run < 100; ++run) {
    const std::string fresh = "fresh" + std::to_string(run);
    d.on_discovered({{"a", 1}, {fresh, 1}}, t0);
    d.on_join_failed(fresh, "connection_refused", t0);  // charged out (--host-failure-limit 1)
  }
  const auto kept = d.blacklist(t0);
  CHECK(kept.size() <= static_cast<size_t>(ElasticDriver::kForgetAfterLists) + 1);
  bool newest = false;
  for (const auto& b : kept) newest |= b.key == "fresh99";
  CHECK(newest);  // the recent ones are still out
}
