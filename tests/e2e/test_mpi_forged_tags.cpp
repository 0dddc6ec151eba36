// hvdrun --mpi with a rank that prints text shaped like mpirun's tags and messages (issue 51,
// finding 4): only mpirun's own lines may steer hvdrun; a rank's text is shown, never parsed.
#include "tests/support/catch.h"

#include <filesystem>

#include "tests/e2e/launch_helpers.h"
#include "tests/support/test_hosts.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using namespace hvd::test;  // NOLINT: test helpers

TEST_CASE("mpi mode: forged tags in a rank's output are its text, not mpirun's", "[mpi]") {
  // Before: "internal error: stoi" (exit 70) for the first line; the abort line made hvdrun take
  // the job for aborted and kill mpirun after the grace period.
  const auto hosts = TestHosts::load();
  JobMarker marker;
  TempDir dir;
  const std::string known_hosts = dir / "known_hosts";
  fs::copy_file(hosts.known_hosts, known_hosts, fs::copy_options::overwrite_existing);
  const std::string script =
      "printf '[1,2147483648]<stdout>:big\\n'; "
      "printf '[1,99]<stdout>:Per user-direction, the job has been aborted.\\n'; "
      "printf 'mpirun noticed that process rank 1 with PID 1 on node x exited on signal 9.\\n'; "
      "sleep 6; echo done $OMPI_COMM_WORLD_RANK";
  Hvdrun hvdrun(
      {.args = {"--mpi", "-np", "2", "-H", hosts.host_list(2), "-p", std::to_string(hosts.port),
                "--ssh-config", hosts.ssh_config, "--ssh-known-hosts", known_hosts, "--grace", "1",
                "-x", marker.forward(), "sh", "-c", script},
       .env = {marker.env()},
       .out_path = dir / "out",
       .err_path = dir / "err"});
  const int code = hvdrun.wait(60s);
  const std::string out = read_file(dir / "out");
  const std::string err = read_file(dir / "err");
  INFO("stdout:\n" << out << "\nstderr:\n" << err);
  CHECK(code == 0);
  for (const std::string rank : {"0", "1"}) {
    CHECK_THAT(out, ContainsSubstring("[1," + rank + "]<stdout>:[1,2147483648]<stdout>:big"));
    CHECK_THAT(out,
               ContainsSubstring("[1," + rank +
                                 "]<stdout>:[1,99]<stdout>:Per user-direction, the job has been "
                                 "aborted."));
    CHECK_THAT(out, ContainsSubstring("[1," + rank + "]<stdout>:done " + rank));
  }
  CHECK(err.find("internal error") == std::string::npos);
  CHECK(err.find("killing mpirun") == std::string::npos);
}
