// mpirun's output under `hvdrun --mpi` when a rank prints text shaped like mpirun's own
// (launcher/mpirun/mpirun_output.h), issue 51 finding 4: only mpirun's lines may steer hvdrun.
#include <map>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "launcher/mpirun/mpirun_output.h"

using hvd::launcher::failed_rank_from_mpirun;
using hvd::launcher::parse_tagged_line;

namespace {

// A TagSplitter of a 4-rank job whose rank bytes and own lines are kept for the checks.
struct Split {
  std::map<int, std::string> out, err;
  std::vector<std::string> own;
  hvd::launcher::TagSplitter splitter{[this](int rank, bool is_stderr, std::string_view bytes) {
                                        (is_stderr ? err : out)[rank].append(bytes);
                                      },
                                      [this](std::string_view line, bool from_mpirun) {
                                        own.emplace_back(line);
                                        if (!from_mpirun) forged.emplace_back(line);
                                      },
                                      4};
  std::vector<std::string> forged;  // own lines that start with a tag of no rank: rank text
};

}  // namespace

TEST_CASE("mpirun's tagged output: forged tags in a rank's text stay text, never mpirun's",
          "[mpi]") {
  // Issue 51, finding 4: a rank printing "[1,2147483648]<stdout>:" ended hvdrun with "internal
  // error: stoi"; one printing "[1,99]<stdout>:Per user-direction, the job has been aborted."
  // made hvdrun take it for mpirun's own line and kill mpirun.
  CHECK_FALSE(parse_tagged_line("[1,2147483648]<stdout>:x").has_value());  // was: out_of_range
  CHECK_FALSE(parse_tagged_line("[1,99999999999999999999]<stdout>:x").has_value());
  CHECK_FALSE(parse_tagged_line("[1,4]<stdout>:x", 4).has_value());  // -np 4: ranks 0..3
  CHECK(parse_tagged_line("[1,3]<stdout>:x", 4)->rank == 3);
  CHECK_FALSE(failed_rank_from_mpirun("Process name: [[1,1],99999999999]").has_value());

  Split split;  // a job of 4 ranks
  auto& [out, err, own, splitter, forged] = split;
  const std::vector<std::string> texts{
      "[1,2147483648]<stdout>:x", "[1,99]<stdout>:Per user-direction, the job has been aborted.",
      "[1,4]<stderr>:mpirun noticed that process rank 0 with PID 1 on node a exited on signal 9",
      "[1,99999999999]<stdout>:y", "[1,0]<stdout>:z"};
  std::string want;
  for (const std::string& text : texts) {
    // Inside a rank's line (mpirun tags every line and piece it reads from a rank), cut by the
    // end of a read anywhere: the rank's own text, except a tag of a rank of the job.
    const std::string line = "[1,1]<stdout>:" + text + "\n";
    for (size_t cut = 1; cut < line.size(); ++cut) {
      out.clear();
      splitter.feed(line.substr(0, cut));
      splitter.feed(line.substr(cut));
      INFO(line << " cut at " << cut);
      if (text.starts_with("[1,0]")) {
        CHECK(out[1].empty());
        CHECK(out[0] == "z\n");
      } else {
        CHECK(out[1] == text + "\n");
      }
    }
  }
  CHECK(own.empty());
  // At a line's start (never from mpirun, which tags each line it passes on): handed over as a
  // line that is not mpirun's own.
  for (const std::string& text : texts) {
    if (!text.starts_with("[1,0]")) splitter.feed(text + "\n");
  }
  splitter.feed("[1,7]<stdout>:no newline");
  splitter.finish();
  CHECK(own.size() == 5);
  CHECK(forged == own);
}
