// The network probes (agent/probe.h) on real loopback sockets in this process, and the
// launcher's probe plan and reports (launcher/core/net_check.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include "tests/support/catch.h"

#include "agent/probe.h"
#include "common/error.h"
#include "common/unique_fd.h"
#include "launcher/core/net_check.h"

using namespace hvd;
using namespace hvd::agent;
using namespace hvd::launcher;
using Catch::Matchers::ContainsSubstring;
using namespace std::chrono_literals;

namespace {

// A plain TCP listener on 127.0.0.1 (not an agent): optionally says `banner` to whoever connects.
class PlainServer {
 public:
  explicit PlainServer(std::string banner = "") : banner_(std::move(banner)) {
    fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    REQUIRE(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(fd_.get(), 16) == 0);
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    if (!banner_.empty()) {
      thread_ = std::thread([this] {
        UniqueFd c(::accept(fd_.get(), nullptr, nullptr));
        if (c.valid()) {
          (void)!::write(c.get(), banner_.data(), banner_.size());
          std::array<char, 16> buf{};
          (void)!::read(c.get(), buf.data(), buf.size());  // until the prober closes
        }
      });
    }
  }
  ~PlainServer() {
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }

 private:
  UniqueFd fd_;
  std::string banner_;
  int port_ = 0;
  std::thread thread_;
};

// A port nothing listens on (bound, then closed).
int closed_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

ProbeOutcome probe_one(const ProbeTarget& target, ProbeListener* listener = nullptr) {
  const auto out = run_probes({target}, 3000ms, listener);
  REQUIRE(out.size() == 1);
  INFO("status " << probe_status_name(out[0].status) << ": " << out[0].detail);
  CHECK(out[0].id == target.id);
  return out[0];
}

ProbeEndpoints endpoints(int n) {
  ProbeEndpoints e;
  for (int h = 0; h < n; ++h) {
    e.host.push_back("h" + std::to_string(h));
    e.address.push_back("10.0.0." + std::to_string(h + 1));
    e.interface.push_back("");
    e.probe_port.push_back(4000 + h);
    e.token.push_back("t" + std::to_string(h));
    e.rendezvous_address.push_back("10.0.0.100");
  }
  e.rendezvous_port = 5000;
  return e;
}

}  // namespace

TEST_CASE("a probe greeted by the expected agent is ok", "[probe]") {
  ProbeListener listener({}, "tok-a");
  REQUIRE(listener.port() > 0);
  // The listener is served by the prober's own loop, as an agent probing itself would.
  const ProbeOutcome o = probe_one({7, "127.0.0.1", listener.port(), "tok-a"}, &listener);
  CHECK(o.status == ProbeStatus::kOk);
  CHECK(o.ms >= 0);
}

TEST_CASE("an agent with another token is a wrong peer", "[probe]") {
  ProbeListener listener({}, "tok-b");
  const ProbeOutcome o = probe_one({1, "127.0.0.1", listener.port(), "tok-a"}, &listener);
  CHECK(o.status == ProbeStatus::kWrongPeer);
  CHECK_THAT(o.detail, ContainsSubstring("another host's hvdrun agent"));
}

TEST_CASE("a service that is not an agent is a wrong peer, quoted", "[probe]") {
  PlainServer ssh("SSH-2.0-OpenSSH_9.2\r\n");
  const ProbeOutcome o = probe_one({1, "127.0.0.1", ssh.port(), "tok"});
  CHECK(o.status == ProbeStatus::kWrongPeer);
  CHECK_THAT(o.detail, ContainsSubstring("SSH-2.0-OpenSSH_9.2"));
}

TEST_CASE("a closed port is refused", "[probe]") {
  const ProbeOutcome o = probe_one({1, "127.0.0.1", closed_port(), "tok"});
  CHECK(o.status == ProbeStatus::kRefused);
}

TEST_CASE("a target without a token only has to accept", "[probe]") {
  PlainServer http;
  CHECK(probe_one({1, "127.0.0.1", http.port(), ""}).status == ProbeStatus::kOk);
}

TEST_CASE("a silent service that accepts is a wrong peer after the timeout", "[probe]") {
  PlainServer silent;  // the kernel completes the connect; nobody ever writes
  const auto out = run_probes({{1, "127.0.0.1", silent.port(), "tok"}}, 200ms, nullptr);
  REQUIRE(out.size() == 1);
  CHECK(out[0].status == ProbeStatus::kWrongPeer);
  CHECK_THAT(out[0].detail, ContainsSubstring("no hvdrun agent greeted within 0.2 s"));
}

TEST_CASE("an unresolvable name is an error naming it", "[probe]") {
  const ProbeOutcome o = probe_one({1, "no-such-host.invalid", 80, "tok"});
  CHECK(o.status == ProbeStatus::kError);
  CHECK_THAT(o.detail, ContainsSubstring("cannot resolve no-such-host.invalid"));
}

TEST_CASE("many probes run at once and each keeps its id", "[probe]") {
  ProbeListener a({}, "A");
  const int refused = closed_port();
  std::vector<ProbeTarget> targets;
  for (int i = 0; i < 20; ++i) {
    targets.push_back({i, "127.0.0.1", i % 2 == 0 ? a.port() : refused, "A"});
  }
  const auto out = run_probes(targets, 3000ms, &a);
  REQUIRE(out.size() == targets.size());
  for (int i = 0; i < 20; ++i) {
    CHECK(out[i].id == i);
    CHECK(out[i].status == (i % 2 == 0 ? ProbeStatus::kOk : ProbeStatus::kRefused));
  }
}

TEST_CASE("the probe listener takes the first free port of its range", "[probe]") {
  // A port the kernel picked, and the one above it free: another test's socket may hold that one
  // (CI once had it taken), so pick again until the pair fits.
  std::optional<ProbeListener> first, second;
  int taken = 0;
  for (int attempt = 0; attempt < 50 && !second; ++attempt) {
    first.emplace(PortRange{}, "x");
    taken = first->port();
    if (taken >= 65535) continue;  // no room for a range above it
    try {
      second.emplace(PortRange{taken, taken + 1}, "y");
    } catch (const Error&) {
      first.reset();  // taken + 1 is someone else's: try another pair
    }
  }
  REQUIRE(second);
  CHECK(second->port() == taken + 1);
  try {
    ProbeListener third({taken, taken + 1}, "z");
    FAIL("a full range must be an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(),
               ContainsSubstring(std::to_string(taken) + "-" + std::to_string(taken + 1)));
    CHECK_THAT(e.hint(), ContainsSubstring("widen the range"));
  }
}

TEST_CASE("probe payloads round-trip", "[probe]") {
  const auto listen = decode_probe_listen(encode_probe_listen({{100, 200}, "tok"}));
  CHECK(listen.range.low == 100);
  CHECK(listen.range.high == 200);
  CHECK(listen.token == "tok");
  CHECK(decode_listening(encode_listening(4242)) == 4242);
  const auto request =
      decode_probe_request(encode_probe_request({{{3, "10.0.0.1", 99, "t"}}, 5000}));
  REQUIRE(request.targets.size() == 1);
  CHECK(request.targets[0].id == 3);
  CHECK(request.targets[0].address == "10.0.0.1");
  CHECK(request.timeout_ms == 5000);
  const auto results =
      decode_probe_results(encode_probe_results({{3, ProbeStatus::kTimeout, 12.5, "no answer"}}));
  REQUIRE(results.size() == 1);
  CHECK(results[0].status == ProbeStatus::kTimeout);
  CHECK(results[0].ms == 12.5);
  CHECK(results[0].detail == "no answer");
}

TEST_CASE("malformed probe payloads are protocol errors", "[probe]") {
  const auto refused = [](auto fn) {
    try {
      fn();
      FAIL("expected a protocol error");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), ContainsSubstring("protocol error"));
    }
  };
  refused([] { decode_probe_listen("[]"); });
  refused([] { decode_probe_listen(R"({"port_low": 9, "port_high": 3, "token": "t"})"); });
  refused([] { decode_probe_listen(R"({"port_low": 0, "port_high": 3, "token": "t"})"); });
  refused([] { decode_listening(R"({"port": 70000})"); });
  refused([] { decode_probe_request(R"({"targets": 5, "timeout_ms": 10})"); });
  refused([] { decode_probe_request(R"({"targets": [], "timeout_ms": 0})"); });
  refused([] {
    decode_probe_results(R"({"results": [{"id": 1, "status": "fine", "ms": 1,
                                        "detail": ""}]})");
  });
  refused([] { decode_probe_results("not json"); });
}

// Found by tests/fuzz/probe (regressions/probe/port-float-out-of-int-range): an integer field
// holding a float out of int's range was converted anyway (undefined behaviour, UBSan).
TEST_CASE("probe payloads: integer fields take JSON integers that fit, nothing else", "[probe]") {
  const auto refused = [](auto fn) {
    try {
      fn();
      FAIL("expected a protocol error");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), ContainsSubstring("has no valid"));
    }
  };
  refused([] { decode_listening(R"({"port": 1e123})"); });
  refused([] { decode_listening(R"({"port": 41234.0})"); });
  refused([] { decode_listening(R"({"port": true})"); });
  refused([] { decode_listening(R"({"port": 18446744073709551615})"); });
  refused([] { decode_probe_listen(R"({"port_low": -1e300, "port_high": 3, "token": "t"})"); });
  refused([] {
    decode_probe_request(
        R"({"targets": [{"id": 4294967296, "address": "a", "port": 1, "token": ""}],
            "timeout_ms": 10})");
  });
  CHECK(decode_listening(R"({"port": 41234})") == 41234);
}

TEST_CASE("probe plan: a ring plus rank 0's host plus the rendezvous", "[probe]") {
  SECTION("one host probes only the rendezvous server") {
    const auto p = plan_probes(endpoints(1), false);
    REQUIRE(p.size() == 1);
    CHECK(p[0].to == ProbeRecord::kRendezvous);
    CHECK(p[0].address == "10.0.0.100");
    CHECK(p[0].port == 5000);
  }
  SECTION("two hosts probe each other once") {
    const auto p = plan_probes(endpoints(2), false);
    REQUIRE(p.size() == 4);
    CHECK(p[0].from == 0);
    CHECK(p[0].to == 1);
    CHECK(p[0].purpose == "ring");
    CHECK(p[2].from == 1);
    CHECK(p[2].to == 0);
    CHECK(p[2].purpose == "ring+rank0");
    CHECK(p[2].address == "10.0.0.1");
    CHECK(p[2].port == 4000);
  }
  SECTION("five hosts: O(n) probes, every host reaches host 0 and its successor") {
    const auto p = plan_probes(endpoints(5), false);
    // h0: ring; h1..h3: ring + rank0; h4: ring+rank0; plus 5 rendezvous probes.
    CHECK(p.size() == 1 + 3 * 2 + 1 + 5);
    for (int from = 1; from < 5; ++from) {
      const bool reaches0 = std::any_of(
          p.begin(), p.end(), [&](const ProbeRecord& r) { return r.from == from && r.to == 0; });
      const bool reaches_next = std::any_of(p.begin(), p.end(), [&](const ProbeRecord& r) {
        return r.from == from && r.to == (from + 1) % 5;
      });
      CHECK(reaches0);
      CHECK(reaches_next);
    }
  }
  SECTION("full: every ordered pair") {
    const auto p = plan_probes(endpoints(4), true);
    CHECK(p.size() == 4 * 3 + 4);
  }
}

TEST_CASE("net check: results are filed by id, and only the prober's own", "[probe]") {
  NetCheck check;
  check.endpoints = endpoints(3);
  check.probes = plan_probes(check.endpoints, false);
  const auto targets = check.targets_of(1);
  REQUIRE(targets.size() == 3);  // h2 (ring), h0 (rank0), rendezvous
  CHECK(targets[0].token == "t2");
  CHECK(targets[2].token.empty());
  CHECK_FALSE(check.ok());  // nothing ran yet
  for (int h = 0; h < 3; ++h) {
    std::vector<ProbeOutcome> outcomes;
    for (const ProbeTarget& t : check.targets_of(h)) {
      const bool dropped = h == 1 && t.address == "10.0.0.3";
      outcomes.push_back({t.id, dropped ? ProbeStatus::kTimeout : ProbeStatus::kOk, 1.0,
                          dropped ? "no answer within 5.0 s" : ""});
    }
    check.record(h, outcomes);
  }
  CHECK(check.failed() == 1);
  const std::string message = net_failure_message(check);
  CHECK_THAT(message, ContainsSubstring("host h1 cannot reach host h2 at 10.0.0.3:4002 (timeout"));
  const std::string table = format_net_failures(check);
  CHECK_THAT(table, ContainsSubstring("h1"));
  CHECK_THAT(table, ContainsSubstring("a firewall drops TCP from h1 to h2"));
  const std::string matrix = format_net_matrix(check);
  CHECK_THAT(matrix, ContainsSubstring("3 hosts, 7 probes, 1 failed"));
  const nlohmann::json doc = net_json(check);
  CHECK(doc["ok"] == false);
  CHECK(doc["failed"] == 1);
  CHECK(doc["probes"].size() == 7);
  int timeouts = 0;
  for (const auto& p : doc["probes"]) {
    if (p["result"] == "timeout") {
      ++timeouts;
      CHECK(p["from"] == "h1");
      CHECK(p["to"] == "h2");
      CHECK(p["hint"].is_string());
    }
  }
  CHECK(timeouts == 1);
  try {
    check.record(0, {{check.targets_of(1)[0].id, ProbeStatus::kOk, 1, ""}});
    FAIL("a result for another host's probe must be refused");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), ContainsSubstring("protocol error"));
  }
}

TEST_CASE("the probe listener answers over IPv4 and IPv6 alike", "[probe]") {
  ProbeListener listener({}, "tok-6");
  CHECK(probe_one({1, "127.0.0.1", listener.port(), "tok-6"}, &listener).status ==
        ProbeStatus::kOk);
  UniqueFd v6(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  if (!v6.valid() || ::bind(v6.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    WARN("skipped the IPv6 half: this host has no ::1");
    return;
  }
  CHECK(probe_one({2, "::1", listener.port(), "tok-6"}, &listener).status == ProbeStatus::kOk);
}

TEST_CASE("a flood of 2000 connections neither spins the listener nor stops a real probe",
          "[probe]") {
  // The usual soft descriptor limit, as an agent has it; the flood comes from 4 other processes.
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  const rlimit old = limit;
  limit.rlim_cur = std::min<rlim_t>(1024, limit.rlim_max);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  ProbeListener listener({}, "tok-flood");
  CHECK(listener.max_connections() <= 256);
  std::vector<pid_t> flooders;
  for (int c = 0; c < 4; ++c) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // 500 connections that never close, then wait to be killed
      std::vector<int> held;
      for (int i = 0; i < 500; ++i) {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = htons(static_cast<uint16_t>(listener.port()));
        if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
          held.push_back(fd);
        }
      }
      ::pause();
      ::_exit(0);
    }
    flooders.push_back(pid);
  }
  // Serve as an agent does, for 2 s of the flood, counting this thread's CPU time.
  auto thread_cpu = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  };
  const auto cpu_start = thread_cpu();
  const auto until = std::chrono::steady_clock::now() + 2s;
  size_t most = 0;
  while (std::chrono::steady_clock::now() < until) {
    std::vector<pollfd> fds;
    listener.add_pollfds(fds);
    if (::poll(fds.data(), fds.size(), 100) > 0) listener.serve();
    most = std::max(most, listener.connections());
  }
  const double cpu_share = std::chrono::duration<double>(thread_cpu() - cpu_start).count() / 2.0;
  // A real probe still gets its greeting.
  const ProbeOutcome o = probe_one({9, "127.0.0.1", listener.port(), "tok-flood"}, &listener);
  for (pid_t pid : flooders) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ::setrlimit(RLIMIT_NOFILE, &old);
  INFO("CPU share " << cpu_share << ", most connections kept " << most << ", probe: " << o.detail);
  CHECK(cpu_share < 0.05);
  CHECK(most <= listener.max_connections());
  CHECK(o.status == ProbeStatus::kOk);
}
