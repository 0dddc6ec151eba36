// horovodrun's engine flags become HOROVOD_* knobs on every rank (cli/engine_flags.h): seen here
// in the dry-run plan; tests/e2e/test_libhvd_engine.cpp checks that real ranks get them.
#include "tests/cli/cli_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers

TEST_CASE("engine flags set the knobs on every rank, shown with their values", "[cli]") {
  const RunResult r =
      run_hvdrun({"--dry-run", "--json", "--fusion-threshold-mb", "1.5", "--cycle-time-ms", "0.5",
                  "--stall-check-warning-time-seconds", "30", "--stall-check-shutdown-time-seconds",
                  "90", "--no-stall-check", "--timeline-filename", "/tmp/tl.json", "--log-level",
                  "warn", "-np", "2", "./train"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json plan = parse_stdout(r);
  for (const json& rank : plan["ranks"]) {
    const json& env = rank["env"];
    CHECK(env["HOROVOD_FUSION_THRESHOLD"] == "1572864");  // 1.5 MiB in bytes
    CHECK(env["HOROVOD_CYCLE_TIME"] == "0.5");
    CHECK(env["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "30");
    CHECK(env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "90");
    CHECK(env["HOROVOD_STALL_CHECK_DISABLE"] == "1");
    CHECK(env["HOROVOD_TIMELINE"] == "/tmp/tl.json");
    CHECK(env["HOROVOD_LOG_LEVEL"] == "warning");  // hvdrun's "warn" in libhvd's words
  }
}

TEST_CASE("an engine flag wins over -x and the inherited value of its variable", "[cli]") {
  const RunResult r = run_hvdrun(
      {"--dry-run", "--json", "-x", "HOROVOD_CYCLE_TIME=7", "--cycle-time-ms", "2", "./train"},
      {{"HOROVOD_FUSION_THRESHOLD", "123"}});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json env = parse_stdout(r)["ranks"][0]["env"];
  CHECK(env["HOROVOD_CYCLE_TIME"] == "2");
  CHECK(env["HOROVOD_FUSION_THRESHOLD"] == "123");  // no flag: the allow-list forwards it
}

TEST_CASE("without engine flags no knob is set", "[cli]") {
  const RunResult r = run_hvdrun({"--dry-run", "--json", "./train"});
  REQUIRE(r.exit_code == kSuccess);
  const json env = parse_stdout(r)["ranks"][0]["env"];
  CHECK_FALSE(env.contains("HOROVOD_CYCLE_TIME"));
  CHECK_FALSE(env.contains("HOROVOD_LOG_LEVEL"));
}

TEST_CASE("a bad engine flag value is a usage error naming the flag and its variable", "[cli]") {
  const auto [flag, value, variable] = GENERATE(
      std::tuple<std::string, std::string, std::string>{"--fusion-threshold-mb", "-1",
                                                        "HOROVOD_FUSION_THRESHOLD"},
      std::tuple<std::string, std::string, std::string>{"--fusion-threshold-mb", "lots",
                                                        "HOROVOD_FUSION_THRESHOLD"},
      std::tuple<std::string, std::string, std::string>{"--cycle-time-ms", "5000",
                                                        "HOROVOD_CYCLE_TIME"},
      std::tuple<std::string, std::string, std::string>{"--stall-check-warning-time-seconds", "0",
                                                        "HOROVOD_STALL_CHECK_TIME_SECONDS"},
      std::tuple<std::string, std::string, std::string>{
          "--stall-check-shutdown-time-seconds", "1.5", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"});
  const RunResult r = run_hvdrun({"--dry-run", flag, value, "./train"});
  INFO(show(r));
  CHECK(r.exit_code == kUsage);
  CHECK_THAT(r.err, ContainsSubstring(flag + " " + value + ": must be"));
  CHECK_THAT(r.err, ContainsSubstring("(it sets " + variable + ")"));
  CHECK(r.out.empty());
}
