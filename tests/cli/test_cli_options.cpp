// End-to-end tests of hvdrun's other options and of -x forwarding: the real binary, its exit
// code, stdout and stderr (docs/cli.md, docs/environment.md).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/cli/cli_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers
// ---------------------------------------------------------------------------------------------
// Other options.

TEST_CASE("ssh port out of range", "[cli]") {
  expect_usage_error({"--dry-run", "-p", "0", "./x"}, {"-p 0", "1-65535"});
  expect_usage_error({"--dry-run", "-p", "70000", "./x"}, {"-p 70000", "1-65535"});
}

TEST_CASE("unknown log level", "[cli]") {
  expect_usage_error({"--dry-run", "--log-level", "loud", "./x"},
                     {"--log-level loud", "trace, debug, info, warn, error or off"});
}

TEST_CASE("unknown option points at help", "[cli]") {
  expect_usage_error({"--dry-run", "--frobnicate", "./x"}, {"--frobnicate", "--help"});
}

TEST_CASE("missing command", "[cli]") {
  expect_usage_error({"--dry-run", "-np", "2"}, {"no command to run", "hvdrun -np 2 ./train"});
  expect_usage_error({}, {"no command to run"});
}

TEST_CASE("a refused command prints nothing but its error", "[cli]") {
  // Issue 55: the OMP_NUM_THREADS notice (2 local ranks) came before the usage error that then
  // refused the command. The same commands with a valid value do print it: the notice is real.
  const std::vector<std::vector<std::string>> refused{
      {"-np", "2", "--output-ranks", "5", "true"},
      {"-np", "2", "--min-np", "3", "true"},
      {"-np", "2", "--blacklist-cooldown-range", "10", "5", "true"},
      {"-np", "2", "-i", "/nonexistent/key", "true"}};
  for (const auto& args : refused) {
    const RunResult r = run_hvdrun(args);
    INFO(show(r));
    CHECK(r.exit_code == kUsage);
    CHECK_THAT(r.err, StartsWith("hvdrun: error: "));
    CHECK_THAT(r.err, !ContainsSubstring("OMP_NUM_THREADS"));
    CHECK_THAT(r.err, !ContainsSubstring("info:"));
  }
  const RunResult ok = run_hvdrun({"-np", "2", "--output-ranks", "1", "true"});
  INFO(show(ok));
  CHECK(ok.exit_code == kSuccess);
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {  // set, it is forwarded and says nothing
    CHECK_THAT(ok.err, ContainsSubstring("hvdrun: info: OMP_NUM_THREADS=1"));
  }
}

TEST_CASE("version", "[cli]") {
  const RunResult r = run_hvdrun({"--version"});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  CHECK_THAT(r.out, StartsWith("hvdrun "));
  CHECK(r.out.size() > std::string("hvdrun \n").size());
  CHECK(r.err.empty());
}

TEST_CASE("help", "[cli]") {
  const RunResult r = run_hvdrun({"--help"});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  CHECK_THAT(r.out, ContainsSubstring("-np"));
  CHECK_THAT(r.out, ContainsSubstring("--hostfile"));
  CHECK_THAT(r.out, ContainsSubstring("--dry-run"));
  CHECK_THAT(r.out, ContainsSubstring("-x"));
  CHECK(r.err.empty());
}

TEST_CASE("a launch on an unreachable host starts nothing and exits 69", "[cli]") {
  // 127.0.1.250 port 1: nothing listens there (loopback only).
  const RunResult r = run_hvdrun({"-np", "2", "-H", "localhost,127.0.1.250", "-p", "1",
                                  "--ssh-known-hosts", "/dev/null", "true"});
  INFO(show(r));
  CHECK(r.exit_code == 69);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, ContainsSubstring("nothing was started"));
  CHECK_THAT(r.err, ContainsSubstring("connection_refused"));
}

TEST_CASE("a local launch runs the command on every rank", "[cli]") {
  const RunResult r = run_hvdrun({"-np", "2", "sh", "-c", "echo rank=$RANK"});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  CHECK_THAT(r.out, ContainsSubstring("[1,0]<stdout>:rank=0\n"));
  CHECK_THAT(r.out, ContainsSubstring("[1,1]<stdout>:rank=1\n"));
}

TEST_CASE("human table has a header and one row per rank", "[cli]") {
  const RunResult r = run_hvdrun(
      {"--dry-run", "-np", "3", "-H", "localhost:1,127.0.0.2:2", "./train", "--epochs", "3"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK(r.err.empty());
  CHECK_THAT(r.out, ContainsSubstring("command: ./train --epochs 3"));

  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line) && line.find("local_rank") == std::string::npos) {
  }
  INFO("header: " << line);
  for (const char* column : {"rank", "host", "local_rank", "cross_rank"}) {
    CHECK_THAT(line, ContainsSubstring(column));
  }
  std::vector<std::string> rows;
  while (std::getline(lines, line) && !line.empty()) rows.push_back(line);
  REQUIRE(rows.size() == 3);
  const std::vector<std::string> hosts{"localhost", "127.0.0.2", "127.0.0.2"};
  for (size_t i = 0; i < rows.size(); ++i) {
    std::istringstream words(rows[i]);
    std::string rank;
    std::string host;
    words >> rank >> host;
    CHECK(rank == std::to_string(i));
    CHECK(host == hosts[i]);
  }
  CHECK_THAT(rows[0], ContainsSubstring("local"));
  CHECK_THAT(rows[2], ContainsSubstring("remote"));
}

// ---------------------------------------------------------------------------------------------
// Environment forwarding (-x) and secrets.

TEST_CASE("x value is redacted unless asked", "[cli]") {
  const RunResult r = run_hvdrun({"--dry-run", "--json", "-x", "FOO=secret", "./x"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK(r.out.find("secret") == std::string::npos);
  CHECK(parse_stdout(r)["ranks"][0]["env"]["FOO"] == "<redacted>");

  // The verbose human table lists the environment: redacted there too.
  const RunResult table = run_hvdrun({"--dry-run", "--verbose", "-x", "FOO=secret", "./x"});
  INFO(show(table));
  REQUIRE(table.exit_code == kSuccess);
  CHECK_THAT(table.out, ContainsSubstring("FOO=<redacted>"));
  CHECK(table.out.find("secret") == std::string::npos);
  CHECK(table.err.find("secret") == std::string::npos);

  const json shown = dry_run_json({"--show-env-values", "-x", "FOO=secret", "./x"});
  CHECK(shown["ranks"][0]["env"]["FOO"] == "secret");
}

TEST_CASE("x refuses reserved and invalid names", "[cli]") {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"HVD_TOKEN", "reserved for hvdrun"},
      {"RANK", "RANK is set by hvdrun for each rank"},
      {"HOROVOD_RANK=3", "HOROVOD_RANK is set by hvdrun for each rank"},
      {"TERM", "TERM belongs to this terminal"},
      {"1BAD", "'1BAD' is not a valid environment variable name"},
      {"HVD_*", "reserved for hvdrun"},
  };
  for (const auto& [spec, message] : cases) {
    CAPTURE(spec);
    expect_usage_error({"--dry-run", "-x", spec, "./x"}, {"-x", message});
  }
}

TEST_CASE("inherited HOROVOD_RANK does not override", "[cli]") {
  const Env env{{"HOROVOD_RANK", "7"}, {"RANK", "7"}, {"HOROVOD_FUSION_THRESHOLD", "1234"}};
  json plan = dry_run_json({"-np", "2", "./x"}, env);
  CHECK(plan["ranks"][0]["env"]["HOROVOD_RANK"] == "0");
  CHECK(plan["ranks"][0]["env"]["RANK"] == "0");
  CHECK(plan["ranks"][1]["env"]["HOROVOD_RANK"] == "1");
  CHECK(plan["ranks"][0]["env"]["HOROVOD_FUSION_THRESHOLD"] == "1234");  // allow-listed knob

  // Not through a prefix pattern either.
  plan = dry_run_json({"-np", "2", "-x", "HOROVOD_*", "./x"}, env);
  CHECK(plan["ranks"][0]["env"]["HOROVOD_RANK"] == "0");
  CHECK(plan["ranks"][1]["env"]["HOROVOD_RANK"] == "1");
}

TEST_CASE("only allow-listed variables are forwarded by default", "[cli]") {
  const Env env{{"MY_SECRET", "hunter2"}, {"OMP_NUM_THREADS", "3"}};
  json plan = dry_run_json({"./x"}, env);
  CHECK_FALSE(plan["ranks"][0]["env"].contains("MY_SECRET"));
  CHECK(plan["ranks"][0]["env"]["OMP_NUM_THREADS"] == "3");
  CHECK(plan.dump().find("hunter2") == std::string::npos);

  plan = dry_run_json({"-x", "MY_SECRET", "./x"}, env);
  CHECK(plan["ranks"][0]["env"]["MY_SECRET"] == "<redacted>");
  CHECK(plan.dump().find("hunter2") == std::string::npos);

  plan = dry_run_json({"--show-env-values", "-x", "MY_SECRET", "./x"}, env);
  CHECK(plan["ranks"][0]["env"]["MY_SECRET"] == "hunter2");
}

TEST_CASE("x prefix pattern forwards matching variables", "[cli]") {
  const Env env{{"MYAPP_A", "1"}, {"MYAPP_B", "2"}, {"MYAPPX", "3"}};
  const json plan = dry_run_json({"--show-env-values", "-np", "2", "-x", "MYAPP_*", "./x"}, env);
  for (const json& rank : plan["ranks"]) {
    CHECK(rank["env"]["MYAPP_A"] == "1");
    CHECK(rank["env"]["MYAPP_B"] == "2");
    CHECK_FALSE(rank["env"].contains("MYAPPX"));
  }
}

TEST_CASE("x name that is not set warns", "[cli]") {
  const RunResult r = run_hvdrun({"--dry-run", "--json", "-x", "HVDTEST_UNSET_VAR", "./x"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK_THAT(r.err, ContainsSubstring("HVDTEST_UNSET_VAR: not set"));
  CHECK_FALSE(parse_stdout(r)["ranks"][0]["env"].contains("HVDTEST_UNSET_VAR"));
}

TEST_CASE("SSH session variables are never forwarded", "[cli]") {
  const Env env{{"SSH_AUTH_SOCK", "/tmp/agent.sock"},
                {"SSH_CONNECTION", "1.2.3.4 5 6.7.8.9 22"},
                {"SOMEVAR", "ok"}};
  json plan = dry_run_json({"./x"}, env);
  CHECK_FALSE(plan["ranks"][0]["env"].contains("SSH_AUTH_SOCK"));

  expect_usage_error({"--dry-run", "-x", "SSH_AUTH_SOCK", "./x"},
                     {"SSH_AUTH_SOCK", "never forwarded"}, env);
  // A pattern inside the session prefix is refused outright rather than matching nothing.
  expect_usage_error({"--dry-run", "-x", "SSH_*", "./x"}, {"SSH_", "never forwarded"}, env);

  // A broader pattern forwards what it matches, but still never a session variable.
  plan = dry_run_json({"--show-env-values", "-x", "S*", "./x"}, env);
  CHECK(plan["ranks"][0]["env"]["SOMEVAR"] == "ok");
  CHECK_FALSE(plan["ranks"][0]["env"].contains("SSH_AUTH_SOCK"));
  CHECK_FALSE(plan["ranks"][0]["env"].contains("SSH_CONNECTION"));
  CHECK(plan.dump().find("agent.sock") == std::string::npos);
}

TEST_CASE("rendezvous token is always redacted", "[cli]") {
  const Env env{{"HVD_RENDEZVOUS_TOKEN", "tok-123-real"}};
  const RunResult r = run_hvdrun(
      {"--dry-run", "--json", "--show-env-values", "-np", "2", "-H", "127.0.0.2:2", "./x"}, env);
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK(r.out.find("tok-123-real") == std::string::npos);
  const json plan = parse_stdout(r);
  for (const json& rank : plan["ranks"]) {
    CHECK(rank["env"]["HVD_RENDEZVOUS_TOKEN"] == "<redacted>");
  }

  const RunResult table = run_hvdrun({"--dry-run", "--verbose", "--show-env-values", "./x"}, env);
  INFO(show(table));
  REQUIRE(table.exit_code == kSuccess);
  CHECK_THAT(table.out, ContainsSubstring("HVD_RENDEZVOUS_TOKEN=<redacted>"));
  CHECK(table.out.find("tok-123-real") == std::string::npos);
}

TEST_CASE("help: -x says a NAME=value value is readable on hvdrun's command line", "[cli]") {
  const RunResult r = run_hvdrun({"--help"});
  REQUIRE(r.exit_code == kSuccess);
  CHECK_THAT(r.out, ContainsSubstring("/proc"));
  CHECK_THAT(r.out, ContainsSubstring("pass -x NAME"));
}

TEST_CASE("the checks take no command and no --dry-run: a usage error, not ignored", "[cli]") {
  // 127.0.1.250 port 1: nothing listens there; a check that ran would exit 69 or 68.
  const std::vector<std::string> host{"-H", "127.0.1.250", "-p", "1"};
  for (const char* check : {"--check-ssh", "--check-net", "--check-build"}) {
    INFO(check);
    expect_usage_error(
        with_prefix({check}, with_prefix(host, {"./t"})),
        {check, "runs no command", "'./t'", "drop the command", "drop " + std::string(check)});
    expect_usage_error(with_prefix({check, "--dry-run"}, host),
                       {std::string(check) + " and --dry-run were both given", "use one"});
  }
  expect_usage_error(with_prefix({"--check-ssh", "--check-net"}, with_prefix(host, {"./t"})),
                     {"runs no command"});
}

TEST_CASE("with --json a usage error is a JSON document on stdout too", "[cli]") {
  // A bad option (CLI parsing), a bad value found later (the plan): both give the document.
  for (const auto& [args, what] : {std::pair<std::vector<std::string>, std::string>{
                                       {"--json", "-np", "two", "./x"}, "-np two"},
                                   {{"--dry-run", "--json", "-H", "a:0", "./x"}, "'a:0'"},
                                   {{"--json", "--frobnicate", "./x"}, "--frobnicate"}}) {
    const RunResult r = run_hvdrun(args);
    INFO(show(r));
    CHECK(r.exit_code == kUsage);
    CHECK_THAT(r.err, StartsWith("hvdrun: error: "));
    const json doc = parse_stdout(r);
    CHECK(doc["schema_version"] == 1);
    CHECK(doc["ok"] == false);
    CHECK(doc["exit_code"] == kUsage);
    CHECK(doc["error"]["kind"] == "usage");
    CHECK_THAT(doc["error"]["message"].get<std::string>(), ContainsSubstring(what));
    CHECK_THAT(doc["error"]["hint"].get<std::string>(), !Catch::Matchers::Equals(""));
  }
  // The command's own --json is not hvdrun's.
  const RunResult command_json = run_hvdrun({"-np", "two", "./x", "--json"});
  CHECK(command_json.exit_code == kUsage);
  CHECK(command_json.out.empty());
}

TEST_CASE("verbose (-v) names an ssh_config option libssh ignores once, not once per host",
          "[cli]") {
  const TempFile config("Host *\n  BatchMode yes\n  VisualHostKey yes\n");
  // 127.0.1.250-251 port 1: refused, after the config stage has read the file for each host.
  const RunResult r =
      run_hvdrun({"--check-ssh", "--verbose", "-H", "127.0.1.250,127.0.1.251", "-p", "1",
                  "--ssh-config", config.path(), "--ssh-known-hosts", "/dev/null"});
  INFO(show(r));
  CHECK(r.exit_code == 69);
  const std::string line = "ssh config: 'BatchMode' has no effect on hvdrun's SSH client";
  const auto first = r.err.find(line);
  CHECK(first != std::string::npos);
  CHECK(r.err.find(line, first + 1) == std::string::npos);
  CHECK_THAT(r.err, ContainsSubstring("'VisualHostKey'"));  // libssh 0.11 honours IdentitiesOnly
  CHECK_THAT(r.err, !ContainsSubstring("Unsupported option"));
}

TEST_CASE("output-ranks: other ranks' lines stay off the console, in their files and report",
          "[cli]") {
  const std::string dir = "/tmp/hvd_cli_output_ranks";
  std::filesystem::remove_all(dir);
  const RunResult r =
      run_hvdrun({"-np", "3", "--output-ranks", "0,2", "--output-filename", dir, "sh", "-c",
                  "echo line$HOROVOD_RANK; echo why$HOROVOD_RANK >&2; "
                  "if [ $HOROVOD_RANK = 1 ]; then exit 3; fi; sleep 0.3"});
  INFO(show(r));
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.out, ContainsSubstring("[1,0]<stdout>:line0"));
  CHECK(r.out.find("line1") == std::string::npos);  // rank 1 is not listed
  CHECK(r.err.find("<stderr>:why1") == std::string::npos);
  CHECK_THAT(r.err, ContainsSubstring("rank 1 (host localhost, local rank 1) exited with code 3"));
  CHECK_THAT(r.err, ContainsSubstring("    why1"));  // its root cause is still reported
  std::ifstream file(dir + "/rank.1/stdout");
  std::string line;
  std::getline(file, line);
  CHECK(line == "line1");  // and its file has everything
}

TEST_CASE("timeout: the job is stopped, exit 124, the ranks still running named", "[cli]") {
  const bool mpi = GENERATE(false, true);
  if (mpi && !HVD_TEST_HAS_MPI) {
    WARN("skipped: --mpi needs Open MPI, which this build has not");
    return;
  }
  std::vector<std::string> args{"--timeout",
                                "1.5",
                                "-np",
                                "2",
                                "sh",
                                "-c",
                                "echo at step $HOROVOD_RANK; "
                                "if [ $HOROVOD_RANK = 1 ]; then sleep 60; fi"};
  if (mpi) args.insert(args.begin(), "--mpi");
  const auto started = std::chrono::steady_clock::now();
  const RunResult r = run_hvdrun(args);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(show(r));
  CHECK(r.exit_code == 124);
  CHECK(took < 15);  // 1.5 s, then the stop's grace at most
  CHECK_THAT(r.err, ContainsSubstring("the job ran past --timeout 1.5 s and was stopped"));
  CHECK_THAT(r.err, ContainsSubstring("rank 1 (host localhost): last line: at step 1"));
  if (!mpi) CHECK(r.err.find("rank 0 (host") == std::string::npos);  // it had finished
}
