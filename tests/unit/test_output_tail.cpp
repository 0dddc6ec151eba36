// The stderr tails the output router keeps for the failure report (launcher/core/output_router.h),
// issue 51 finding 11: bounded in bytes for the whole job.
#include <cstdio>
#include <string>
#include "tests/support/catch.h"

#include "launcher/core/output_router.h"

using hvd::agent::Stream;
using hvd::launcher::OutputRouter;

namespace {

struct Sink {  // a file the router may write to (nothing is read back here)
  std::FILE* file = std::tmpfile();
  int fd = fileno(file);
  ~Sink() { std::fclose(file); }
};

}  // namespace

TEST_CASE("router: the stderr tails are bounded in bytes for the whole job", "[router]") {
  // Issue 51, finding 11: 2 ranks x 25 stderr lines of 1 MiB were kept whole (49 MB, outside
  // the console queue's 8 MiB cap). The console's own queue is abandoned here, as nobody reads.
  Sink out, err;
  OutputRouter router(out.fd, err.fd, std::nullopt);
  router.abandon_console();
  const std::string mib((1 << 20) - 8, 'y');  // a line just under kMaxLineBytes
  for (int i = 1; i <= 25; ++i) {
    for (int rank : {0, 1}) router.write(rank, Stream::kStderr, std::to_string(i) + mib + "\n");
  }
  size_t bytes = 0;
  for (int rank : {0, 1}) {
    for (const std::string& line : router.last_stderr(rank)) bytes += line.size();
  }
  CHECK(bytes <= hvd::launcher::kKeptStderrBytes);
  // The newest lines are the ones kept, each cut and marked.
  REQUIRE_FALSE(router.last_stderr(1).empty());
  const std::string& last = router.last_stderr(1).back();
  CHECK(last.starts_with("25yyy"));
  CHECK(last.ends_with(" [...]"));
  CHECK(last.size() == hvd::launcher::kKeptStderrLineBytes + 6);
  // Short lines: the last 20 per rank, as before.
  for (int i = 1; i <= 25; ++i) router.write(2, Stream::kStderr, std::to_string(i) + "\n");
  CHECK(router.last_stderr(2).size() == 20);
  CHECK(router.last_stderr(2).back() == "25");
}
