// Process sets across real processes (tests/libhvd/libhvd_check_sets.cpp): sets added and removed
// at run time, static sets from hvd::init, every collective on a set against exact values, the
// bad inputs (each an error on the ranks concerned while the job goes on) and a stall inside a
// set, natively (a Gloo context per set) and under hvdrun --mpi (a communicator per set); and
// hvd::join with uneven steps (the same program, tests/libhvd/libhvd_check_sets.cpp).
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_ssh_helpers.h"

using Catch::Matchers::ContainsSubstring;
using hvd::test::launch_ssh::Hosts;
using hvd::test::launch_ssh::show;

namespace {

std::string tag(int rank) { return "[1," + std::to_string(rank) + "]<stdout>:"; }

hvd::test::RunResult run_sets(bool mpi, int np, const std::string& kind,
                              std::vector<std::pair<std::string, std::string>> env = {}) {
  std::vector<std::string> argv{"-np", std::to_string(np), LIBHVD_CHECK, "sets", kind};
  if (mpi) argv.insert(argv.begin(), "--mpi");
  return hvd::test::run_hvdrun(argv, env, std::chrono::seconds(90));
}

void check_passed(const hvd::test::RunResult& r, int np, const std::string& kind) {
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < np; ++rank) {
    CHECK_THAT(r.out, ContainsSubstring(tag(rank) + "rank " + std::to_string(rank) + ": sets " +
                                        kind + ": all checks passed"));
  }
}

}  // namespace

TEST_CASE("process sets: added and removed at run time, native and --mpi, 2 to 4 ranks", "[sets]") {
  const bool mpi = GENERATE(false, true);
  const int np = GENERATE(2, 3, 4);
  const auto r = run_sets(mpi, np, "dynamic", {{"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}});
  INFO((mpi ? "--mpi" : "native") << ", " << np << " ranks\n" << show(r));
  check_passed(r, np, "dynamic");
  // The bad inputs were errors on every rank concerned, and the job went on.
  CHECK_THAT(r.out,
             ContainsSubstring(tag(0) + "rank 0: different lists: HVD_ERR_INVALID_ARGUMENT: "
                                        "hvd::add_process_set(): the ranks disagree: rank 0 "
                                        "called add_process_set([0]), rank 1 add_process_set([0, "
                                        "1])"));
  CHECK_THAT(r.out,
             ContainsSubstring(tag(1) + "rank 1: allreduce outside the set: "
                                        "HVD_ERR_INVALID_ARGUMENT: hvd::allreduce(): rank 1 is not "
                                        "in process set 1 (ranks 0"));
}

TEST_CASE("process sets: static sets from hvd::init, without dynamic mode, native and --mpi",
          "[sets]") {
  const bool mpi = GENERATE(false, true);
  const auto r = run_sets(mpi, 3, "static");
  INFO((mpi ? "--mpi" : "native") << "\n" << show(r));
  check_passed(r, 3, "static");
  CHECK_THAT(r.out, ContainsSubstring("add without dynamic mode: HVD_ERR_INVALID_ARGUMENT: "
                                      "hvd::add_process_set() needs dynamic process sets"));
}

TEST_CASE("process sets: a stalled op names the set and its missing rank", "[sets]") {
  const bool mpi = GENERATE(false, true);
  const auto r =
      run_sets(mpi, 3, "stall",
               {{"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}, {"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}});
  INFO((mpi ? "--mpi" : "native") << "\n" << show(r));
  check_passed(r, 3, "stall");
  CHECK_THAT(r.out + r.err, ContainsSubstring("stall in process set 1 (ranks 0, 2): rank 2 has not "
                                              "submitted tensor 'late'"));
}

TEST_CASE("process sets: over sshd hosts, 4 ranks on 2 hosts", "[sets]") {
  Hosts h;
  const auto r =
      hvd::test::run_hvdrun(h.args({"-np", "4", "-H", h.addr(26) + ":2," + h.addr(27) + ":2",
                                    LIBHVD_CHECK, "sets", "dynamic"}),
                            {{"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}}, std::chrono::seconds(90));
  INFO(show(r));
  check_passed(r, 4, "dynamic");
}

TEST_CASE("join: uneven steps, zeros from joined ranks, the last rank everywhere, native and --mpi",
          "[join]") {
  const bool mpi = GENERATE(false, true);
  const std::string cache = GENERATE("1024", "0");
  const auto r = run_sets(mpi, 3, "join", {{"HOROVOD_CACHE_CAPACITY", cache}});
  INFO((mpi ? "--mpi" : "native") << ", HOROVOD_CACHE_CAPACITY=" << cache << "\n" << show(r));
  check_passed(r, 3, "join");
  CHECK_THAT(r.out, ContainsSubstring(tag(0) + "rank 0: joined after 2 steps, last to join: 2"));
  CHECK_THAT(r.out,
             ContainsSubstring(tag(2) + "rank 2: allgather while rank 0 has joined: "
                                        "HVD_ERR_INVALID_ARGUMENT: allgather 'hvd.allgather."));
}
