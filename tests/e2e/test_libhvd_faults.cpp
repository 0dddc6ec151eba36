// libhvd's failures across real processes, with the launcher's part played by the test: a real
// rendezvous server (launcher/native/rendezvous_server.h) in this process and rank processes
// started with the env contract hvdrun would give them. This way the test can hand a rank a wrong
// token, leave a rank out, or watch the survivors after one rank is SIGKILLed (hvdrun itself would
// stop them at once, which is right for users but hides what libhvd says).
#include "tests/support/catch.h"

#include <chrono>
#include <future>
#include <regex>

#include "launcher/native/rendezvous_server.h"
#include "tests/cli/process.h"
#include "tests/e2e/rank_env.h"

using Catch::Matchers::ContainsSubstring;
using hvd::test::RunResult;

namespace {

using hvd::test::Env;

Env rank_env(int rank, int size, int port, const std::string& token) {
  return hvd::test::one_host_rank_env(rank, size, port, token, "faults" + std::to_string(port), 5);
}

// Starts the given ranks of a `size`-rank job at once and waits for all of them.
std::vector<RunResult> run_ranks(const std::vector<int>& ranks, int size, int port,
                                 const std::string& token, const std::vector<std::string>& args,
                                 const Env& extra = {}) {
  std::vector<std::future<RunResult>> running;
  for (int rank : ranks) {
    Env env = rank_env(rank, size, port, rank == -1 ? token : token);
    env.insert(env.end(), extra.begin(), extra.end());
    std::vector<std::string> argv{LIBHVD_CHECK};
    argv.insert(argv.end(), args.begin(), args.end());
    running.push_back(std::async(std::launch::async, [argv, env] {
      return hvd::test::run_program(argv, env, std::chrono::seconds(60));
    }));
  }
  std::vector<RunResult> out;
  for (auto& f : running) out.push_back(f.get());
  return out;
}

std::string show(const std::vector<RunResult>& results) {
  std::string text;
  for (size_t i = 0; i < results.size(); ++i) {
    text += "--- process " + std::to_string(i) + ": exit " + std::to_string(results[i].exit_code) +
            "\n" + results[i].out + results[i].err;
  }
  return text;
}

}  // namespace

TEST_CASE("libhvd: a rank with a wrong rendezvous token fails naming the store", "[libhvd]") {
  hvd::launcher::RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const auto results = run_ranks({0}, 2, port, "not-the-token", {"info"});
  INFO(show(results));
  CHECK(results[0].exit_code == 3);
  CHECK_THAT(results[0].err, ContainsSubstring("HVD_ERR_CONFIG"));
  CHECK_THAT(results[0].err,
             ContainsSubstring("rendezvous store http://127.0.0.1:" + std::to_string(port) +
                               "/faults" + std::to_string(port) + ".global"));
  CHECK_THAT(results[0].err, ContainsSubstring("refused this rank's token (401)"));
  CHECK(server.stats().rejected >= 1);
  CHECK(server.stats().ranks_seen.empty());
}

TEST_CASE("libhvd: every rank checks in with the rendezvous, authenticated", "[libhvd]") {
  hvd::launcher::RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const auto results = run_ranks({0, 1, 2}, 3, port, server.token(), {"info"});
  INFO(show(results));
  for (const RunResult& r : results) CHECK(r.exit_code == 0);
  CHECK(server.stats().ranks_seen == std::set<int>{0, 1, 2});
  CHECK(server.stats().rejected == 0);
}

TEST_CASE("libhvd: a rank that never joins is named within the Gloo timeout", "[libhvd]") {
  hvd::launcher::RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const auto start = std::chrono::steady_clock::now();
  const auto results =
      run_ranks({0}, 2, port, server.token(), {"info"}, {{"HOROVOD_GLOO_TIMEOUT_SECONDS", "2"}});
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(show(results));
  CHECK(results[0].exit_code == 3);
  CHECK_THAT(results[0].err, ContainsSubstring("HVD_ERR_TIMEOUT"));
  CHECK_THAT(results[0].err, ContainsSubstring("rank 1 never joined"));
  CHECK(took < 2 + 5);
}

TEST_CASE("libhvd: after SIGKILL of one rank mid-allreduce the others fail in time, naming the op",
          "[libhvd]") {
  const int victim = GENERATE(0, 2);
  // The TCP engine, and the cycles over TCP (HOROVOD_GLOO_CYCLES=1), whose own connections may
  // notice first: they say it in the same words.
  const std::string cycles = GENERATE("0", "1");
  hvd::launcher::RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const auto results =
      run_ranks({0, 1, 2}, 3, port, server.token(), {"die", std::to_string(victim)},
                {{"HOROVOD_GLOO_CYCLES", cycles}});
  INFO("HOROVOD_GLOO_CYCLES=" << cycles << "\n" << show(results));
  for (int rank = 0; rank < 3; ++rank) {
    const RunResult& r = results[static_cast<size_t>(rank)];
    if (rank == victim) {
      CHECK(r.exit_code == 128 + 9);
      continue;
    }
    CHECK(r.exit_code == 3);
    // The engine's control connection notices first: the op and the dead rank are named, with
    // the status that says a peer is gone.
    CHECK_THAT(r.out, ContainsSubstring("(status HVD_ERR_PEER_LOST)"));
    CHECK_THAT(r.out, ContainsSubstring("allreduce 'hvd.allreduce."));
    CHECK_THAT(r.out, ContainsSubstring(
                          victim == 0 ? "rank 0 (the coordinator) is gone"
                                      : "rank 2 left the job without calling hvd::shutdown()"));
    // "error after S s": within HOROVOD_GLOO_TIMEOUT_SECONDS (5) plus 5 s.
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex(R"(error after ([0-9.]+) s)")));
    CHECK(std::stod(m[1]) < 5 + 5);
  }
}

TEST_CASE("libhvd: Gloo under mpirun's environment is a clear error", "[libhvd]") {
  const auto r = hvd::test::run_program(
      {LIBHVD_CHECK, "info"}, {{"OMPI_COMM_WORLD_SIZE", "2"}, {"HOROVOD_CPU_OPERATIONS", "gloo"}},
      std::chrono::seconds(30));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, ContainsSubstring("Gloo needs hvdrun's rendezvous"));
}

TEST_CASE("libhvd: a bad knob value names the variable", "[libhvd]") {
  const auto r = hvd::test::run_program(
      {LIBHVD_CHECK, "info"}, {{"HOROVOD_GLOO_TIMEOUT_SECONDS", "soon"}}, std::chrono::seconds(30));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, ContainsSubstring("HOROVOD_GLOO_TIMEOUT_SECONDS=\"soon\" is not valid"));
}
