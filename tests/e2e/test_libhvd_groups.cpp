// Grouped collectives as one unit across real processes (tests/libhvd/libhvd_check_groups.cpp),
// natively (Gloo) and under hvdrun --mpi, at 2 and 3 ranks, with fusion off
// (HOROVOD_FUSION_THRESHOLD=0): each group is one response of the engine (EngineStats::responses)
// where its tensors submitted one by one are one each, on a process set too; the mismatches fail
// the whole group on every rank and the job goes on.
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_ssh_helpers.h"

using Catch::Matchers::ContainsSubstring;
using hvd::test::launch_ssh::show;

namespace {

std::string tag(int rank) { return "[1," + std::to_string(rank) + "]<stdout>:"; }

}  // namespace

TEST_CASE("grouped collectives: one response per group, native and --mpi, 2 and 3 ranks",
          "[groups]") {
  const bool mpi = GENERATE(false, true);
  const int np = GENERATE(2, 3);
  std::vector<std::string> argv{"-np", std::to_string(np), LIBHVD_CHECK, "groups"};
  if (mpi) argv.insert(argv.begin(), "--mpi");
  const auto r = hvd::test::run_hvdrun(
      argv, {{"HOROVOD_FUSION_THRESHOLD", "0"}, {"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}},
      std::chrono::seconds(90));
  INFO((mpi ? "--mpi" : "native") << ", " << np << " ranks\n" << show(r));
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < np; ++rank) {
    const std::string me = tag(rank) + "rank " + std::to_string(rank) + ": ";
    CHECK_THAT(r.out, ContainsSubstring(me + "groups: all checks passed"));
    CHECK_THAT(r.out, ContainsSubstring(me + "grouped allreduce of 3 tensors: 1 response(s)"));
    CHECK_THAT(r.out,
               ContainsSubstring(me + "the same 3 tensors submitted one by one: 3 response(s)"));
  }
  // Every rank of a mismatched group was told, with the reason.
  CHECK_THAT(r.out,
             ContainsSubstring(tag(0) + "rank 0: grouped on some ranks, alone on rank 1: "
                                        "HVD_ERR_INVALID_ARGUMENT: tensor 'mixed_1of2': group "
                                        "mismatch: rank 0 submitted it in a group of 2 tensors"));
  CHECK_THAT(r.out, ContainsSubstring(tag(1) + "rank 1: grouped on some ranks, alone on rank 1: "
                                               "HVD_ERR_INVALID_ARGUMENT"));
  for (int rank = 0; rank < np; ++rank) {
    CHECK_THAT(r.out,
               ContainsSubstring(tag(rank) + "rank " + std::to_string(rank) +
                                 ": another count of tensors on rank 1: HVD_ERR_INVALID_ARGUMENT: "
                                 "grouped allreduce 'count': rank "));
  }
  CHECK_THAT(r.out,
             ContainsSubstring("submitted 3: every rank must pass the same tensors to a grouped "
                               "call") ||
                 ContainsSubstring("submitted 3 tensors, rank "));
}
