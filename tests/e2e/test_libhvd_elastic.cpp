// libhvd's elastic API (hvd/elastic.hpp) across real processes, with the launcher's part played
// by the test, as in test_libhvd_faults.cpp: a real rendezvous server in this process, rank
// processes with the environment an elastic hvdrun gives them, and each rank's channel (a
// socketpair whose end the rank inherits as HVD_ELASTIC_FD). When a rank dies, the test does
// what the launcher will: it publishes the next generation's world document and announces it on
// the survivors' channels.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
#include "tests/support/catch.h"

#include <array>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "contract/elastic.h"
#include "launcher/native/rendezvous_server.h"
#include "tests/cli/process.h"
#include "tests/e2e/rank_env.h"

using Catch::Matchers::ContainsSubstring;
using hvd::test::RunResult;

namespace {

using hvd::test::Env;
constexpr int kSteps = 20;  // weights end at 20 * 21 / 2 = 210

// Generation 0's environment for worker `w` of `size`, all on one host at 127.0.0.1.
Env worker_env(int w, int size, int port, const std::string& token, const std::string& job,
               int channel_fd) {
  Env env = hvd::test::one_host_rank_env(w, size, port, token, job, 10);
  const std::string r = std::to_string(w);
  if (channel_fd >= 0) {
    env.insert(env.end(), {{"HVD_ELASTIC_FD", std::to_string(channel_fd)},
                           {"HVD_ELASTIC_WORKER", r},
                           {"HVD_ELASTIC_GENERATION", "0"}});
  }
  return env;
}

struct Channel {
  hvd::UniqueFd ours;    // the launcher's (agent's) end
  hvd::UniqueFd theirs;  // inherited by the rank (not close-on-exec)
};

Channel make_channel() {
  std::array<int, 2> fds{};
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds.data()) == 0);
  ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  return {hvd::UniqueFd(fds[0]), hvd::UniqueFd(fds[1])};
}

std::future<RunResult> start(const std::vector<std::string>& args, const Env& env) {
  std::vector<std::string> argv{ELASTIC_CHECK};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::async(std::launch::async, [argv, env] {
    return hvd::test::run_program(argv, env, std::chrono::seconds(90));
  });
}

std::string read_available(int fd) {
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0;) {
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace

TEST_CASE("elastic: a rank dies, the survivors go on at a smaller size from the last commit",
          "[elastic]") {
  hvd::launcher::RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const std::string job = "elastic" + std::to_string(port);
  std::vector<Channel> channels;
  for (int w = 0; w < 3; ++w) channels.push_back(make_channel());
  std::vector<std::future<RunResult>> ranks;
  for (int w = 0; w < 3; ++w) {
    ranks.push_back(start({std::to_string(kSteps), "2", "7"},
                          worker_env(w, 3, port, server.token(), job, channels[w].theirs.get())));
  }

  // Worker 2 kills itself after step 7's allreduce; the launcher sees its exit.
  const RunResult victim = ranks[2].get();
  INFO("worker 2:\n" << victim.out << victim.err);
  REQUIRE(victim.exit_code == 128 + 9);
  // Every rank was spawned long ago (worker 2 ran 7 steps with them): their ends are theirs.
  for (Channel& c : channels) c.theirs.reset();

  // Generation 1: workers 0 and 1 as ranks 0 and 1 of 2.
  hvd::contract::WorldDoc doc;
  doc.generation = 1;
  doc.reason = "worker 2 was killed by signal 9";
  doc.master_addr = "127.0.0.1";
  doc.workers = {{0, {0, 2, 0, 2, 0, 1}, "127.0.0.1"}, {1, {1, 2, 1, 2, 0, 1}, "127.0.0.1"}};
  server.put(hvd::contract::elastic_scope(job), hvd::contract::world_key(1),
             hvd::contract::encode_world(doc));
  for (int w : {0, 1}) REQUIRE(::write(channels[w].ours.get(), "gen 1\n", 6) == 6);

  for (int w : {0, 1}) {
    const RunResult r = ranks[w].get();
    INFO("worker " << w << ": exit " << r.exit_code << "\n" << r.out << r.err);
    CHECK(r.exit_code == 0);
    // Generation 0 at size 3, then generation 1 at size 2 from the step the survivors had
    // committed, and every step counted exactly once: 210 = 1 + 2 + ... + 20.
    CHECK_THAT(r.out,
               ContainsSubstring("generation 0 rank " + std::to_string(w) + " size 3 from step 0"));
    CHECK_THAT(r.out,
               ContainsSubstring("generation 1 rank " + std::to_string(w) + " size 2 from step 7"));
    CHECK_THAT(r.out,
               ContainsSubstring("worker " + std::to_string(w) + " done: generation 1 rank " +
                                 std::to_string(w) + " size 2 resets 1 steps 20 weights 210.0"));
    CHECK_THAT(r.err, ContainsSubstring("HVD_ERR_PEER_LOST"));  // what run() recovered from, logged
    CHECK(read_available(channels[w].ours.get()) == "joined 1\n");
  }
}

TEST_CASE("elastic: a rank that dies inside sync() costs one more generation, not a hang",
          "[elastic]") {
  hvd::launcher::RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const std::string job = "elastic" + std::to_string(port);
  std::vector<Channel> channels;
  for (int w = 0; w < 4; ++w) channels.push_back(make_channel());
  std::vector<std::future<RunResult>> ranks;
  for (int w = 0; w < 4; ++w) {
    // Worker 3 dies after step 5; worker 2 dies in generation 1's sync().
    ranks.push_back(start({std::to_string(kSteps), "3", "5", "2"},
                          worker_env(w, 4, port, server.token(), job, channels[w].theirs.get())));
  }
  const RunResult first = ranks[3].get();
  INFO("worker 3:\n" << first.out << first.err);
  REQUIRE(first.exit_code == 128 + 9);
  for (Channel& c : channels) c.theirs.reset();
  auto publish = [&](int generation, const std::vector<int>& workers) {
    hvd::contract::WorldDoc doc;
    doc.generation = generation;
    doc.reason = "test";
    doc.master_addr = "127.0.0.1";
    const int size = static_cast<int>(workers.size());
    for (int r = 0; r < size; ++r) {
      doc.workers.push_back(
          {workers[static_cast<std::size_t>(r)], {r, size, r, size, 0, 1}, "127.0.0.1"});
    }
    server.put(hvd::contract::elastic_scope(job), hvd::contract::world_key(generation),
               hvd::contract::encode_world(doc));
    const std::string line = "gen " + std::to_string(generation) + "\n";
    for (int w : workers) {
      REQUIRE(::write(channels[static_cast<std::size_t>(w)].ours.get(), line.data(), line.size()) ==
              static_cast<ssize_t>(line.size()));
    }
  };
  publish(1, {0, 1, 2});
  const RunResult second = ranks[2].get();
  INFO("worker 2:\n" << second.out << second.err);
  REQUIRE(second.exit_code == 128 + 9);
  publish(2, {0, 1});
  for (int w : {0, 1}) {
    const RunResult r = ranks[static_cast<std::size_t>(w)].get();
    INFO("worker " << w << ": exit " << r.exit_code << "\n" << r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out,
               ContainsSubstring("worker " + std::to_string(w) + " done: generation 2 rank " +
                                 std::to_string(w) + " size 2 resets 2 steps 20 weights 210.0"));
    CHECK(read_available(channels[static_cast<std::size_t>(w)].ours.get()) ==
          "joined 1\njoined 2\n");
  }
}

TEST_CASE("elastic: without an elastic launch run() calls the loop once", "[elastic]") {
  hvd::launcher::RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const std::string job = "plain" + std::to_string(port);
  std::vector<std::future<RunResult>> ranks;
  for (int w = 0; w < 2; ++w) {
    ranks.push_back(
        start({std::to_string(kSteps)}, worker_env(w, 2, port, server.token(), job, -1)));
  }
  for (int w = 0; w < 2; ++w) {
    const RunResult r = ranks[w].get();
    INFO("rank " << w << ": exit " << r.exit_code << "\n" << r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, ContainsSubstring("done: generation 0 rank " + std::to_string(w) +
                                        " size 2 resets 0 steps 20 weights 210.0"));
  }
}
