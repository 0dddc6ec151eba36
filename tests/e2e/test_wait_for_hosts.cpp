// --wait-for-hosts: a host that is not up yet (nothing listens on its port, its name does not
// resolve) is tried again until the deadline, for --check-ssh and for a launch; without the flag
// it fails at once. The "host" is a private sshd on 127.0.1.8X that starts ~1.5 s after hvdrun.
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/fake_servers.h"
#include "tests/support/test_hosts.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using Clock = std::chrono::steady_clock;
using hvd::test::RunResult;

namespace {

std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out +
         "\n--- stderr ---\n" + r.err;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// hvdrun's SSH options for a host at address:port, with a fresh known_hosts (accept-new records
// the key), then `rest`.
std::vector<std::string> ssh_args(const std::string& address, int port, const std::string& name,
                                  std::vector<std::string> rest) {
  const auto hosts = hvd::test::TestHosts::load();
  const fs::path known_hosts = fs::temp_directory_path() / ("hvd_wait_" + name + "_known_hosts");
  fs::remove(known_hosts);
  std::vector<std::string> args{"-H",
                                address,
                                "-p",
                                std::to_string(port),
                                "-i",
                                hosts.key,
                                "--ssh-known-hosts",
                                known_hosts.string()};
  args.insert(args.end(), rest.begin(), rest.end());
  return args;
}

// Runs hvdrun with `args` against address:port, where nothing listens until an sshd starts there
// `delay` after hvdrun did. Returns hvdrun's result and its wall time.
std::pair<RunResult, double> run_with_late_sshd(const std::string& address,
                                                const std::vector<std::string>& args,
                                                std::chrono::milliseconds delay, int port) {
  auto closed = std::make_unique<hvd::test::ClosedPort>(address, port);
  const Clock::time_point start = Clock::now();
  auto run = std::async(std::launch::async, [&] { return hvd::test::run_hvdrun(args); });
  std::this_thread::sleep_for(delay);
  closed.reset();  // the port is free for sshd now
  hvd::test::SshdInstance sshd(address, {}, port);
  RunResult r = run.get();
  return {r, seconds_since(start)};
}

// A free port on `address` (the kernel's choice), for a ClosedPort and then the sshd.
int free_port(const std::string& address) {
  hvd::test::ClosedPort probe(address);
  return probe.port();
}

}  // namespace

TEST_CASE("wait for hosts: --check-ssh waits for an sshd that comes up late", "[wait-for-hosts]") {
  const std::string address = "127.0.1.80";
  const int port = free_port(address);
  const auto [r, took] = run_with_late_sshd(
      address,
      ssh_args(address, port, "check", {"--check-ssh", "--json", "--wait-for-hosts", "10"}),
      std::chrono::milliseconds(1500), port);
  INFO(show(r));
  CHECK(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE(doc.is_object());
  CHECK(doc["hosts"][0]["code"] == "ok");
  CHECK(took >= 1.5);
  CHECK(took < 10);
}

TEST_CASE("wait for hosts: without it, a refused connection fails at once", "[wait-for-hosts]") {
  const std::string address = "127.0.1.81";
  hvd::test::ClosedPort closed(address);
  const Clock::time_point start = Clock::now();
  const RunResult r =
      hvd::test::run_hvdrun(ssh_args(address, closed.port(), "refused", {"--check-ssh", "--json"}));
  const double took = seconds_since(start);
  INFO(show(r));
  CHECK(r.exit_code == 69);
  const auto doc = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE(doc.is_object());
  CHECK(doc["hosts"][0]["code"] == "connection_refused");
  CHECK_THAT(doc["hosts"][0]["message"].get<std::string>(), !ContainsSubstring("--wait-for-hosts"));
  CHECK(took < 3);
}

TEST_CASE("wait for hosts: a launch waits for an sshd that comes up late", "[wait-for-hosts]") {
  const std::string address = "127.0.1.82";
  const int port = free_port(address);
  const auto [r, took] =
      run_with_late_sshd(address,
                         ssh_args(address, port, "launch",
                                  {"--wait-for-hosts", "10", "sh", "-c", "echo rank $RANK is up"}),
                         std::chrono::milliseconds(1500), port);
  INFO(show(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("[1,0]<stdout>:rank 0 is up"));
  CHECK(took >= 1.5);
  CHECK(took < 10);
}

TEST_CASE("wait for hosts: a launch without it fails at once on the refused host",
          "[wait-for-hosts]") {
  const std::string address = "127.0.1.83";
  hvd::test::ClosedPort closed(address);
  const Clock::time_point start = Clock::now();
  const RunResult r = hvd::test::run_hvdrun(
      ssh_args(address, closed.port(), "launch_refused", {"sh", "-c", "echo rank $RANK is up"}));
  const double took = seconds_since(start);
  INFO(show(r));
  CHECK(r.exit_code == 69);
  CHECK_THAT(r.err, ContainsSubstring("connection_refused"));
  CHECK(took < 3);
}

TEST_CASE("a --json launch that stops at SSH prints the launch result, the SSH rows inside it",
          "[wait-for-hosts]") {
  // Issue 55: it printed --check-ssh's document alone (no exit_code, no error, no launcher), and
  // a CI script reading .exit_code broke. Every --json run ends with one result of one schema.
  const std::string address = "127.0.1.84";
  hvd::test::ClosedPort closed(address);
  for (const bool mpi : {false, true}) {
    std::vector<std::string> rest{"--json", "sh", "-c", "echo never"};
    if (mpi) rest.insert(rest.begin(), "--mpi");
    const RunResult r =
        hvd::test::run_hvdrun(ssh_args(address, closed.port(), mpi ? "json_mpi" : "json", rest));
    INFO((mpi ? "--mpi\n" : "native\n") << show(r));
    CHECK(r.exit_code == 69);
    CHECK_THAT(r.err, ContainsSubstring("connection_refused"));  // the table on stderr, as before
    const auto doc = nlohmann::json::parse(r.out, nullptr, false);
    REQUIRE(doc.is_object());
    CHECK(doc["schema_version"] == 1);
    CHECK(doc["ok"] == false);
    CHECK(doc["exit_code"] == 69);
    CHECK(doc["launcher"] == (mpi ? "mpirun" : "native"));
    CHECK(doc["first_failure"].is_null());
    CHECK(doc["np"] == 1);  // the plan's rank, never started
    REQUIRE(doc["ranks"].size() == 1);
    CHECK(doc["ranks"][0]["host"] == address);
    CHECK(doc["ranks"][0]["pid"].is_null());
    CHECK(doc["ranks"][0]["exit_code"].is_null());
    REQUIRE(doc["error"].is_object());
    CHECK(doc["error"]["kind"] == "ssh");
    CHECK_THAT(doc["error"]["message"].get<std::string>(),
               ContainsSubstring(address + " (connection_refused)"));
    CHECK_THAT(doc["error"]["hint"].get<std::string>(), ContainsSubstring("check_ssh"));
    REQUIRE(doc["check_ssh"].is_object());
    CHECK(doc["check_ssh"]["ok"] == false);
    REQUIRE(doc["check_ssh"]["hosts"].size() == 1);
    CHECK(doc["check_ssh"]["hosts"][0]["host"] == address);
    CHECK(doc["check_ssh"]["hosts"][0]["code"] == "connection_refused");
    CHECK(doc.count("hosts") == 0);  // not --check-ssh's document
  }
}

TEST_CASE("wait for hosts: a name that never resolves is tried until the deadline, then named",
          "[wait-for-hosts]") {
  const Clock::time_point start = Clock::now();
  const RunResult r =
      hvd::test::run_hvdrun(ssh_args(hvd::test::unresolvable_host(), 22, "dns",
                                     {"--check-ssh", "--json", "--wait-for-hosts", "1.5"}));
  const double took = seconds_since(start);
  INFO(show(r));
  CHECK(r.exit_code == 69);
  const auto doc = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE(doc.is_object());
  const auto& row = doc["hosts"][0];
  CHECK(row["code"] == "dns_failure");
  // Tried again after 0.25 s and 0.5 s (when the resolver answers at once: three tries).
  CHECK_THAT(row["message"].get<std::string>(), ContainsSubstring(" tries in "));
  CHECK_THAT(row["message"].get<std::string>(), ContainsSubstring("--wait-for-hosts"));
  CHECK(took >= 0.75);
  CHECK(took < 5);
}

TEST_CASE("wait for hosts: a bad value is a usage error naming the range", "[wait-for-hosts]") {
  for (const std::string value : {"-1", "3601", "soon"}) {
    const RunResult r = hvd::test::run_hvdrun({"--wait-for-hosts", value, "--dry-run", "true"});
    INFO(show(r));
    CHECK(r.exit_code == 64);
    CHECK_THAT(r.err, ContainsSubstring("--wait-for-hosts " + value));
    CHECK_THAT(r.err, ContainsSubstring("from 0 to 3600"));
  }
}
