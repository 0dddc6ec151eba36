#include <pwd.h>
#include <unistd.h>

#include "tests/support/catch.h"

#include "cli/options.h"
#include "common/error.h"
#include "common/user_account.h"
#include "launcher/core/output_router.h"
#include "test_helpers.h"

using hvd::cli::EarlyExit;
using hvd::cli::parse_options;
using hvd::cli::split_command_line;
using hvd::test::require_usage_error;
using Args = std::vector<std::string>;

TEST_CASE("split: the command starts at the first positional and is untouched", "[cli]") {
  auto s = split_command_line({"-np", "2", "./x", "-np", "5"});
  CHECK(s.own == Args{"--num-proc", "2"});
  CHECK(s.command == Args{"./x", "-np", "5"});

  s = split_command_line(
      {"--dry-run", "--json", "-H", "a:1", "-x", "A", "-x", "B=1", "py", "-x", "--dry-run"});
  CHECK(s.own == Args{"--dry-run", "--json", "-H", "a:1", "-x", "A", "-x", "B=1"});
  CHECK(s.command == Args{"py", "-x", "--dry-run"});
}

TEST_CASE("split: -- ends hvdrun's options and is dropped", "[cli]") {
  auto s = split_command_line({"-np", "1", "--", "--weird-program", "--"});
  CHECK(s.own == Args{"--num-proc", "1"});
  CHECK(s.command == Args{"--weird-program", "--"});
}

TEST_CASE("split: attached values and single-dash long forms", "[cli]") {
  auto s = split_command_line({"-Ha:1", "--hosts=b:1", "-np=3", "-hostfile", "f", "cmd"});
  CHECK(s.own == Args{"-Ha:1", "--hosts=b:1", "--num-proc=3", "--hostfile", "f"});
  CHECK(s.command == Args{"cmd"});
}

TEST_CASE("split: a short option takes the next word, or its value attached", "[cli]") {
  auto s = split_command_line({"-x", "FOO=bar", "-xBAZ", "./x"});
  CHECK(s.own == Args{"-x", "FOO=bar", "-xBAZ"});
  CHECK(s.command == Args{"./x"});
  const auto o = parse_options({"-x", "FOO=bar", "-xBAZ", "./x"});
  CHECK(o.forward == Args{"FOO=bar", "BAZ"});
  CHECK(o.command == Args{"./x"});
}

TEST_CASE("version: -v alone prints it, -v with anything else is refused", "[cli]") {
  try {
    parse_options({"-v"});
    FAIL("-v alone should print the version");
  } catch (const hvd::cli::EarlyExit& e) {
    CHECK_THAT(e.text, Catch::Matchers::StartsWith("hvdrun "));
  }
  // hvdrun's -v once meant --verbose: an old command line must not print a version and exit 0.
  for (const Args& args :
       {Args{"-v", "-np", "2", "./x"}, Args{"-vx", "FOO", "./x"}, Args{"-v", "./x"}}) {
    CHECK_THROWS_WITH(parse_options(args), Catch::Matchers::ContainsSubstring("-v is --version"));
  }
  // An option's value that starts with -v is the value, not -v.
  const auto o = parse_options({"--mpi", "--mpi-args", "-v", "-x", "-vX", "./x"});
  CHECK(o.mpi_args == "-v");
  CHECK(o.forward == Args{"-vX"});
}

TEST_CASE("split: flags take no value", "[cli]") {
  auto s = split_command_line({"--dry-run", "./x"});
  CHECK(s.own == Args{"--dry-run"});
  CHECK(s.command == Args{"./x"});
}

TEST_CASE("parse: horovodrun spellings", "[cli]") {
  const auto o = parse_options({"-np",
                                "4",
                                "-H",
                                "a:2,b:2",
                                "-p",
                                "12345",
                                "-i",
                                "/k",
                                "--ssh-config",
                                "/c",
                                "--ssh-known-hosts",
                                "/kh",
                                "-x",
                                "A",
                                "-x",
                                "B=1",
                                "--dry-run",
                                "--json",
                                "--oversubscribe",
                                "--log-level",
                                "warn",
                                "./train",
                                "--epochs",
                                "3"});
  CHECK(o.num_proc == 4);
  CHECK(o.hosts == "a:2,b:2");
  CHECK(o.ssh_port == 12345);
  CHECK(o.ssh_identity_file == "/k");
  CHECK(o.ssh_config == "/c");
  CHECK(o.ssh_known_hosts == "/kh");
  CHECK(o.forward == Args{"A", "B=1"});
  CHECK(o.dry_run);
  CHECK(o.json);
  CHECK(o.oversubscribe);
  CHECK(o.log_level == "warn");
  CHECK(o.command == Args{"./train", "--epochs", "3"});
  CHECK(parse_options({"--hostfile", "f", "x"}).hostfile == "f");
  CHECK(parse_options({"-hostfile", "f", "x"}).hostfile == "f");
  CHECK(parse_options({"--num-proc", "2", "x"}).num_proc == 2);
}

TEST_CASE("parse: bad options are usage errors", "[cli]") {
  require_usage_error(
      [] {
        parse_options({"-H", "a", "--hostfile", "f", "x"});
      },
      "-H and --hostfile were both given");
  require_usage_error([] { parse_options({"-p", "0", "x"}); }, "-p 0: not a port number");
  require_usage_error([] { parse_options({"-p", "65536", "x"}); }, "-p 65536");
  require_usage_error(
      [] {
        parse_options({"--log-level", "loud", "x"});
      },
      "--log-level loud: unknown level", "trace, debug");
  require_usage_error(
      [] {
        parse_options({"--frobnicate", "x"});
      },
      "--frobnicate", "hvdrun --help");
  require_usage_error(
      [] {
        parse_options({"-np", "two", "x"});
      },
      "-np two: not a whole number", "-np 4");
  require_usage_error([] { parse_options({"-np", "2x", "x"}); }, "-np 2x: not a whole number");
  require_usage_error([] { parse_options({"-p", "ssh", "x"}); }, "-p ssh: not a whole number");
  require_usage_error([] { parse_options({"-np"}); }, "-np/--num-proc");
  require_usage_error(
      [] {
        parse_options({"--mpi-args", "-mca x y", "cmd"});
      },
      "--mpi-args was given without --mpi", "add --mpi");
  require_usage_error([] { parse_options({"--mpi", "--native", "cmd"}); }, "--native");
  require_usage_error(
      [] {
        parse_options({"-H", "a", "-H", "b", "x"});
      },
      "--hosts was given more than once");
}

TEST_CASE("parse: --help and --version exit early", "[cli]") {
  try {
    parse_options({"--help"});
    FAIL("no EarlyExit");
  } catch (const EarlyExit& e) {
    CHECK_THAT(e.text, Catch::Matchers::ContainsSubstring("-np"));
    CHECK_THAT(e.text, Catch::Matchers::ContainsSubstring("--hostfile"));
  }
  try {
    parse_options({"--version"});
    FAIL("no EarlyExit");
  } catch (const EarlyExit& e) {
    CHECK_THAT(e.text, Catch::Matchers::StartsWith("hvdrun "));
  }
}

TEST_CASE("parse: --port-range LOW-HIGH, and the network check flags", "[cli]") {
  const auto o = parse_options({"--port-range", "29500-29599", "--check-net-full", "./x"});
  REQUIRE_FALSE(o.port_range.any());
  CHECK(o.port_range.low == 29500);
  CHECK(o.port_range.high == 29599);
  CHECK(o.check_net_full);
  CHECK_FALSE(o.check_net);
  CHECK(parse_options({"--check-net"}).check_net);
  for (const char* bad : {"29599-29500", "29500", "0-10", "10-70000", "a-b", "10-", "-10", ""}) {
    INFO(bad);
    require_usage_error(
        [&] {
          parse_options({"--port-range", bad, "x"});
        },
        std::string("--port-range ") + bad + ": not a port range", "29500-29599");
  }
  require_usage_error(
      [] {
        parse_options({"--mpi", "--port-range", "1000-1010", "x"});
      },
      "--port-range works in native mode only", "btl_tcp_port_min_v4");
}

TEST_CASE("parse: seconds flags take 0 where it means something, else say the range", "[cli]") {
  CHECK(parse_options({"--grace", "0", "x"}).grace_s == 0.0);
  CHECK(parse_options({"--grace", "0.5", "x"}).grace_s == 0.5);
  CHECK(parse_options({"--keepalive", "0.0", "x"}).keepalive_s == 0.0);
  CHECK(parse_options({"--restart-backoff", "0", "x"}).restarts.backoff_seconds == 0.0);
  for (const char* flag : {"--start-timeout", "--ssh-timeout"}) {
    INFO(flag);
    require_usage_error(
        [&] {
          parse_options({flag, "0", "x"});
        },
        std::string(flag) + " 0: not a number of seconds above 0 and at most 3600",
        "0 is not allowed");
    CHECK(parse_options({flag, "3600", "x"}).command == Args{"x"});
  }
  require_usage_error(
      [] {
        parse_options({"--grace", "-1", "x"});
      },
      "--grace -1: not a number of seconds from 0 to 3600", "0: SIGKILL right after SIGTERM");
  require_usage_error([] { parse_options({"--grace", "3601", "x"}); }, "from 0 to 3600");
  require_usage_error(
      [] {
        parse_options({"--keepalive", "soon", "x"});
      },
      "from 0 to 3600", "0: never");
}

TEST_CASE("output-ranks lists: ranks and ranges, sorted, each once, or a usage error", "[cli]") {
  using hvd::launcher::parse_rank_list;
  CHECK(parse_rank_list("0") == std::vector<int>{0});
  CHECK(parse_rank_list("5,0,3-4,4") == std::vector<int>{0, 3, 4, 5});
  CHECK(parse_rank_list("2-2") == std::vector<int>{2});
  for (const char* bad :
       {"", ",", "0,", "a", "-1", "3-1", "1-", "-", "0x1", " 1", "1048576", "0-1048576", "1,,2"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(parse_rank_list(bad), hvd::UsageError);
  }
}

TEST_CASE("current_account: this process's user and home, as the password database has them",
          "[cli]") {
  // Through getpwuid_r (getpwuid's static buffer raced between concurrent SSH logins).
  const auto account = hvd::current_account();
  REQUIRE(account.has_value());
  const passwd* pw = ::getpwuid(::geteuid());  // one thread here: the static buffer is fine
  REQUIRE(pw != nullptr);
  CHECK(account->name == pw->pw_name);
  CHECK(account->home == pw->pw_dir);
}
