// The host agent on its own (`hvdrun --agent`, `hvdrun-agent`), with the test as its launcher:
// frames on its stdin and stdout (agent/protocol.h). A terminate frame that arrives with the job,
// a ping before the job, and a SIGKILLed agent whose guard ends as it did and whose ranks' every
// process ends with it. The job's processes are found by a random marker in /proc/*/environ
// (launch_helpers.h).
#include <poll.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers
using nlohmann::json;

namespace {

struct AgentFrame {
  int type = 0;
  std::string payload;
};

std::string encode(int type, const std::string& payload) {
  std::string out;
  for (int shift : {24, 16, 8, 0}) out += static_cast<char>((payload.size() >> shift) & 0xff);
  out += static_cast<char>(type);
  return out + payload;
}

// Frames from `fd` until one of type `last`, end of file, or `limit`.
std::vector<AgentFrame> read_frames(int fd, std::string& buffer, int last,
                                    std::chrono::milliseconds limit) {
  std::vector<AgentFrame> frames;
  const auto deadline = Clock::now() + limit;
  while (true) {
    while (buffer.size() >= 5) {
      size_t length = 0;
      for (int i = 0; i < 4; ++i) length = length << 8 | static_cast<unsigned char>(buffer[i]);
      if (buffer.size() < 5 + length) break;
      frames.push_back({static_cast<unsigned char>(buffer[4]), buffer.substr(5, length)});
      buffer.erase(0, 5 + length);
      if (frames.back().type == last) return frames;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return frames;
    char chunk[4096];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) return frames;
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

// `hvdrun --agent` on pipes, talking to the test as to its launcher; its stderr in dir/err.
Hvdrun::Setup lone_agent(const TempDir& dir) {
  return {
      .args = {"--agent"}, .env = {}, .out_path = "", .err_path = dir / "err", .stdin_pipe = true};
}

bool write_bytes(int fd, const std::string& bytes) {
  return ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
}

uint32_t u32_at(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

}  // namespace

TEST_CASE("the agent obeys a terminate frame that arrives together with its job", "[launch]") {
  // What the launcher sends when Ctrl-C comes right after the job: both frames in one read.
  ::signal(SIGPIPE, SIG_IGN);  // the agent may be gone when we write
  JobMarker marker;
  TempDir dir;
  Hvdrun agent(lone_agent(dir));
  std::string buffer;
  const auto hello = read_frames(agent.stdout_fd(), buffer, 1, 5s);
  json spec = {{"protocol", 1},
               {"host", "localhost"},
               {"argv", {"sleep", "30"}},
               {"cwd", "/"},
               {"grace_seconds", 1},
               {"ranks", json::array({{{"rank", 0},
                                       {"env", json::array({json::array({"PATH", "/usr/bin:/bin"}),
                                                            json::array({"HVDTEST_RANK_MARKER",
                                                                         marker.value()})})}}})}};
  if (!hello.empty()) spec["protocol"] = json::parse(hello.back().payload).value("protocol", 1);
  const std::string bytes = encode(16, spec.dump()) + encode(17, "");
  const bool written = write_bytes(agent.stdin_fd(), bytes);
  const auto frames = read_frames(agent.stdout_fd(), buffer, 6, 5s);
  const size_t ranks_left = marker.ranks().size();
  agent.close_stdin();  // if it is still running: the dead-man switch ends it
  const int code = agent.wait(5s);
  INFO(read_file(dir / "err"));
  REQUIRE(hello.size() == 1);
  REQUIRE(hello[0].type == 1);
  REQUIRE(written);
  std::vector<int> types;
  for (const AgentFrame& f : frames) types.push_back(f.type);
  INFO("frame types after the job: " << Catch::Detail::stringify(types));
  CHECK(types == std::vector<int>{2, 4, 6});  // started, exited, done
  if (types == std::vector<int>{2, 4, 6}) {
    const std::string& exited = frames[1].payload;
    REQUIRE(exited.size() == 9);
    CHECK(u32_at(exited, 0) == 0);   // rank 0
    CHECK(exited[4] == 3);           // by a signal (1), which the stop sent (2)
    CHECK(u32_at(exited, 5) == 15);  // SIGTERM
  }
  CHECK(ranks_left == 0);
  CHECK(code == 0);
}

TEST_CASE("an agent pinged before its job leaves a launcher silent past the ping's limit",
          "[launch]") {
  // A link cut without a reset before the job spec arrives: the agent's input stays open. It
  // used to wait for its spec until TCP gave up; the launcher's pings now carry the limit.
  ::signal(SIGPIPE, SIG_IGN);
  TempDir dir;
  Hvdrun agent(lone_agent(dir));
  std::string buffer;
  const auto hello = read_frames(agent.stdout_fd(), buffer, 1, 5s);
  const std::string ping = encode(22, std::string("\0\0\x01\xf4", 4));  // 500 ms
  const bool written = write_bytes(agent.stdin_fd(), ping);
  const auto pong = read_frames(agent.stdout_fd(), buffer, 1, 5s);
  const auto start = Clock::now();
  const int code = agent.wait(5s);  // no close of its input: silence only
  const auto waited = Clock::now() - start;
  INFO(read_file(dir / "err"));
  REQUIRE(hello.size() == 1);
  REQUIRE(written);
  REQUIRE(pong.size() == 1);
  CHECK(pong[0].type == 10);  // kPong
  CHECK(code == 2);           // no job: it had nothing to stop
  CHECK(waited < 3s);
}

TEST_CASE(
    "a lone agent SIGKILLed, as hvdrun --agent and as hvdrun-agent: what its rank started "
    "ends, and its guard dies of the same signal",
    "[launch]") {
  // Every way an agent starts runs it under its guard (agent/agent_guard.h): hvdrun --agent
  // (local and over SSH: the other tests) and hvdrun-agent (srun's; --agent-connect runs the
  // same guard). The guard ends as its agent did, so the launcher reads the agent's own end.
  ::signal(SIGPIPE, SIG_IGN);
  const std::string agent_binary =
      (std::filesystem::path(HVDRUN_BINARY).parent_path() / "hvdrun-agent").string();
  for (const std::string& program : {std::string(HVDRUN_BINARY), agent_binary}) {
    INFO(program);
    JobMarker marker;
    TempDir dir;
    Hvdrun::Setup setup = lone_agent(dir);
    setup.program = program;
    Hvdrun agent(setup);
    std::string buffer;
    const auto hello = read_frames(agent.stdout_fd(), buffer, 1, 5s);
    REQUIRE(hello.size() == 1);
    json spec = {
        {"protocol", json::parse(hello.back().payload).value("protocol", 1)},
        {"host", "localhost"},
        {"argv", {"sh", "-c", kRanksWithChildren}},
        {"cwd", "/"},
        {"grace_seconds", 1},
        {"ranks",
         json::array(
             {{{"rank", 0},
               {"env", json::array({json::array({"PATH", "/usr/bin:/bin"}),
                                    json::array({"HVDTEST_RANK_MARKER", marker.value()})})}}})}};
    REQUIRE(write_bytes(agent.stdin_fd(), encode(16, spec.dump())));
    const bool up = wait_until([&] { return sleeping(marker) == 3; }, 10s);
    pid_t agent_pid = 0;
    for (pid_t pid : marker.ranks()) {
      if (comm_of(pid) == "sh" && comm_of(parent_of(pid)) != "sh") agent_pid = parent_of(pid);
    }
    REQUIRE(up);
    REQUIRE(agent_pid > 0);
    CHECK(parent_of(agent_pid) == agent.pid());
    CHECK(comm_of(agent.pid()) == "hvdrun-guard");
    ::kill(agent_pid, SIGKILL);
    const bool gone = wait_until([&] { return marker.ranks().empty(); }, 2s);
    const int code = agent.wait(5s);
    INFO(read_file(dir / "err"));
    CHECK(gone);
    CHECK(code == 137);
    CHECK(agent.signaled());  // killed by SIGKILL, as its agent was: not an exit with 137
  }
}
