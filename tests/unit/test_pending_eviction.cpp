// Which pending connection goes under a flood (common/pending_eviction.h), issue 51 finding 10:
// the oldest without a whole preamble, never one that sent its preamble while a silent one is
// left. First the choice itself, then the srun agents' real listener (start_srun_agents, with a
// stand-in `srun` that only tells the test where to connect): its table filled with silent
// connections, an agent that sends its hello and holds back its proof, then more silent
// connections than the table holds; the agent must still be admitted when its proof comes.
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include "tests/support/catch.h"

#include "agent/sealed_link.h"
#include "common/pending_eviction.h"
#include "launcher/native/srun_agents.h"

namespace {

struct Conn {
  int id = 0;
  bool whole = false;
};
bool whole(const Conn& c) { return c.whole; }

int victim_id(std::vector<Conn> v) {
  const auto it = hvd::eviction_victim(v.begin(), v.end(), whole);
  return it == v.end() ? -1 : it->id;
}

}  // namespace

TEST_CASE("pending eviction: the oldest without a whole preamble goes, else the oldest",
          "[toolkit]") {
  CHECK(victim_id({}) == -1);
  CHECK(victim_id({{0, false}, {1, false}}) == 0);
  CHECK(victim_id({{0, true}, {1, false}, {2, false}}) == 1);
  CHECK(victim_id({{0, true}, {1, true}, {2, false}}) == 2);
  CHECK(victim_id({{0, true}, {1, true}}) == 0);  // every one whole: the oldest
  CHECK(victim_id({{0, false}, {1, true}}) == 0);
}

TEST_CASE("pending eviction: a flood of silent connections never evicts one with a preamble",
          "[toolkit]") {
  constexpr size_t kTable = 16;
  std::deque<Conn> table;
  int next = 0;
  const auto arrive = [&](bool is_whole) {
    if (table.size() >= kTable)
      table.erase(hvd::eviction_victim(table.begin(), table.end(), whole));
    table.push_back({next++, is_whole});
  };
  for (size_t i = 0; i < kTable; ++i) arrive(false);
  arrive(true);  // id kTable: the legitimate one, its preamble whole
  for (int i = 0; i < 1000; ++i) arrive(false);
  CHECK(table.size() == kTable);
  CHECK(std::count_if(table.begin(), table.end(), whole) == 1);
  CHECK(table.front().id == static_cast<int>(kTable));  // now the oldest, and kept
}

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hvd-evict-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

void write_script(const std::filesystem::path& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// How many of `fds` the other side closed (EOF).
size_t closed_count(const std::vector<int>& fds) {
  std::vector<pollfd> p;
  for (int fd : fds) p.push_back({fd, POLLIN, 0});
  ::poll(p.data(), p.size(), 0);
  size_t n = 0;
  for (const pollfd& q : p) n += (q.revents & (POLLIN | POLLHUP)) != 0 ? 1 : 0;
  return n;
}

// What the flooding thread saw (Catch2 asserts on the main thread only).
struct FloodReport {
  std::string failure;  // set-up went wrong: why
  bool got_reply = false;
  size_t evicted_silent = 0;
  bool proof_sent = false;
};

FloodReport flood_and_agent(const std::filesystem::path& env_file, const std::string& node) {
  FloodReport r;
  const auto deadline = Clock::now() + 10s;
  while (!std::filesystem::exists(env_file) && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  std::ifstream in(env_file);
  std::string where, port_text, token;
  if (!(in >> where >> port_text >> token)) {
    r.failure = "the stand-in srun wrote no HVD_AGENT_CONNECT and HVD_AGENT_TOKEN";
    return r;
  }
  const int port = std::atoi(port_text.c_str());
  constexpr size_t kTable = hvd::launcher::kSrunMaxPending;
  std::vector<int> silent;
  const auto close_all = [&] {
    for (int fd : silent) ::close(fd);
  };
  for (size_t i = 0; i < kTable; ++i) silent.push_back(connect_to(port));
  const int agent = connect_to(port);
  hvd::agent::AgentHandshake hs(token, node);
  std::string reply(hvd::agent::kSealReplyBytes, '\0');
  const timeval wait{5, 0};
  ::setsockopt(agent, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  if (agent < 0 || ::send(agent, hs.hello().data(), hs.hello().size(), MSG_NOSIGNAL) !=
                       static_cast<ssize_t>(hs.hello().size())) {
    r.failure = "the agent's connection or hello failed";
    close_all();
    return r;
  }
  r.got_reply =
      ::recv(agent, reply.data(), reply.size(), MSG_WAITALL) == static_cast<ssize_t>(reply.size());
  // More silent connections than the table holds: every connection older than them must go,
  // the agent's included unless its whole hello keeps it.
  constexpr size_t kMore = kTable + 76;
  for (size_t i = 0; i < kMore; ++i) silent.push_back(connect_to(port));
  if (std::count(silent.begin(), silent.end(), -1) != 0) {
    r.failure = "a silent connection failed";
    close_all();
    ::close(agent);
    return r;
  }
  // Until the listener accepted them all: kMore evictions, of which at most one is the agent.
  while (Clock::now() < deadline && (r.evicted_silent = closed_count(silent)) < kMore - 1) {
    std::this_thread::sleep_for(10ms);
  }
  if (r.got_reply) {
    try {
      const std::string proof = hs.on_reply(reply);
      r.proof_sent = ::send(agent, proof.data(), proof.size(), MSG_NOSIGNAL) ==
                     static_cast<ssize_t>(proof.size());
    } catch (const std::exception& e) {
      r.failure = std::string("the launcher's reply: ") + e.what();
    }
  }
  std::this_thread::sleep_for(300ms);  // the launcher reads the proof before the sockets close
  close_all();
  ::close(agent);
  return r;
}

}  // namespace

TEST_CASE(
    "srun listener: a flood of silent connections does not evict an agent that sent its "
    "hello",
    "[toolkit][srun]") {
  // The test holds about 2 x the table's connections and the listener one table's: beyond the
  // usual soft limit of 1024 descriptors.
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  REQUIRE(lim.rlim_max >= 8192);
  const rlimit raised{8192, lim.rlim_max};
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &raised) == 0);

  ScratchDir dir;
  const std::filesystem::path env_file = dir.path / "env";
  write_script(dir.path / "srun",
               "printf '%s %s\\n' \"$HVD_AGENT_CONNECT\" \"$HVD_AGENT_TOKEN\" > '" +
                   (dir.path / "env.tmp").string() + "' && mv '" + (dir.path / "env.tmp").string() +
                   "' '" + env_file.string() + "'\nexec sleep 60\n");
  write_script(dir.path / "scontrol", "exit 1\n");  // no NodeAddr: the peer's address is used
  const char* old_path = std::getenv("PATH");
  const std::string saved_path = old_path != nullptr ? old_path : "/usr/bin:/bin";
  ::setenv("PATH", (dir.path.string() + ":/usr/bin:/bin").c_str(), 1);

  hvd::launcher::Plan plan;
  plan.hosts.resize(1);
  plan.hosts[0].spec.host = "n1";
  hvd::launcher::LaunchOptions options;
  options.hvdrun_path = "/nonexistent/hvdrun";
  options.start_timeout = 8s;

  FloodReport report;
  std::thread flooder([&] { report = flood_and_agent(env_file, "n1"); });
  std::string error;
  size_t agents = 0;
  try {
    hvd::launcher::SrunAgents started = hvd::launcher::start_srun_agents(plan, options);
    agents = started.agents.size();
  } catch (const std::exception& e) {
    error = e.what();
  }
  flooder.join();
  ::setenv("PATH", saved_path.c_str(), 1);
  ::setrlimit(RLIMIT_NOFILE, &lim);

  INFO("start_srun_agents: " << (error.empty() ? "returned" : error));
  REQUIRE(report.failure.empty());
  CHECK(report.got_reply);
  // The flood was accepted: the listener made room kTable + 76 times.
  CHECK(report.evicted_silent >= hvd::launcher::kSrunMaxPending + 75);
  CHECK(report.proof_sent);
  CHECK(error.empty());
  CHECK(agents == 1);
}
