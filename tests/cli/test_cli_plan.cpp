// End-to-end tests of hvdrun's command line: the real binary, its exit code, stdout and stderr.
//
// These pin what users and CI scripts see (docs/cli.md, docs/exit-codes.md): 0 success, 64 usage
// error, 70 internal error or missing feature; `--json` is the only thing on stdout and parses;
// human messages go to stderr and say what, where and what to do. Only --dry-run and the
// early-exit flags are exercised: they touch no network, so these tests need no sshd fixture.
#include <sys/stat.h>

#include "tests/cli/cli_helpers.h"
#include "tests/support/open_mpi.h"

using namespace hvd::test;  // NOLINT: test helpers
// ---------------------------------------------------------------------------------------------
// The plan: topology, command, hosts.

TEST_CASE("json plan topology and rank env", "[cli]") {
  const RunResult r = run_hvdrun({"--dry-run", "--json", "-np", "3", "-H", "w0:1,w1:2", "./train"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK(r.err.empty());
  const json plan = parse_stdout(r);

  CHECK(plan["schema_version"] == 1);
  CHECK(plan["np"] == 3);
  CHECK(plan["command"] == json::array({"./train"}));
  REQUIRE(plan["ranks"].size() == 3);
  REQUIRE(plan["hosts"].size() == 2);
  CHECK(plan["hosts"][0]["host"] == "w0");
  CHECK(plan["hosts"][0]["slots"] == 1);
  CHECK(plan["hosts"][1]["host"] == "w1");
  CHECK(plan["hosts"][1]["slots"] == 2);

  const json& rank2 = plan["ranks"][2];
  CHECK(rank2["rank"] == 2);
  CHECK(rank2["host"] == "w1");
  CHECK(rank2["local_rank"] == 1);
  CHECK(rank2["local_size"] == 2);
  CHECK(rank2["cross_rank"] == 0);
  CHECK(rank2["cross_size"] == 1);
  const json& env = rank2["env"];
  CHECK(env["HOROVOD_RANK"] == "2");
  CHECK(env["HOROVOD_SIZE"] == "3");
  CHECK(env["HOROVOD_LOCAL_RANK"] == "1");
  CHECK(env["HOROVOD_LOCAL_SIZE"] == "2");
  CHECK(env["HOROVOD_CROSS_RANK"] == "0");
  CHECK(env["HOROVOD_CROSS_SIZE"] == "1");
  CHECK(env["HOROVOD_HOSTNAME"] == "w1");
  CHECK(env["RANK"] == "2");
  CHECK(env["WORLD_SIZE"] == "3");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["LOCAL_WORLD_SIZE"] == "2");
  CHECK(env["GROUP_RANK"] == "1");
  // Rank 0's host is written as a name: its address is the one its SSH connection arrives at,
  // known only at launch (a name need not resolve on every host, nor to a reachable address).
  CHECK(env["MASTER_ADDR"] == "<set at launch: the address rank 0's host was reached at over SSH>");
  CHECK(env["HVD_JOB_ID"] == plan["job_id"]);

  // Rank 1 is local rank 0 on the second host: cross rank 1 of the two hosts with a local rank 0.
  const json& rank1 = plan["ranks"][1];
  CHECK(rank1["host"] == "w1");
  CHECK(rank1["local_rank"] == 0);
  CHECK(rank1["cross_rank"] == 1);
  CHECK(rank1["cross_size"] == 2);
}

TEST_CASE("command args that look like options stay", "[cli]") {
  const json plan = dry_run_json({"-np", "2", "./x", "-np", "5"});
  CHECK(plan["command"] == json::array({"./x", "-np", "5"}));
  CHECK(plan["ranks"].size() == 2);
}

TEST_CASE("double dash ends the options and is dropped", "[cli]") {
  json plan = dry_run_json({"-np", "1", "--", "./x", "--json"});
  CHECK(plan["command"] == json::array({"./x", "--json"}));

  // After `--` even a word starting with '-' is the command.
  plan = dry_run_json({"-np", "1", "--", "-weird", "--", "-H"});
  CHECK(plan["command"] == json::array({"-weird", "--", "-H"}));
}

TEST_CASE("hostile command bytes survive", "[cli]") {
  const std::vector<std::string> command{
      "./train",      "a b",       "it's \"quoted\"", "$HOME `id` $(id)",
      "line1\nline2", "tab\there", "bad\xff-byte",    ""};
  const RunResult r = run_hvdrun(with_prefix({"--dry-run", "--json", "-np", "1"}, command));
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json plan = parse_stdout(r);
  REQUIRE(plan["command"].size() == command.size());
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i].find('\xff') != std::string::npos) continue;  // not representable in JSON
    CHECK(plan["command"][i] == command[i]);
  }
  // JSON strings are UTF-8: the invalid byte must not vanish silently nor break the document.
  CHECK(plan["command"][6].get<std::string>().starts_with("bad"));
  CHECK(plan["command"][6].get<std::string>().ends_with("-byte"));
  CHECK(plan["command"][6] != "bad-byte");

  // The human table shows the command quoted for a POSIX shell.
  const RunResult table = run_hvdrun(with_prefix({"--dry-run", "-np", "1"}, command));
  INFO(show(table));
  REQUIRE(table.exit_code == kSuccess);
  CHECK_THAT(table.out, ContainsSubstring("'a b'"));
  CHECK_THAT(table.out, ContainsSubstring("'$HOME `id` $(id)'"));
  CHECK_THAT(table.out, ContainsSubstring("'it'\\''s \"quoted\"'"));
  CHECK_THAT(table.out, ContainsSubstring("'line1\nline2'"));
  CHECK_THAT(table.out, ContainsSubstring(" ''\n"));  // the empty argument is kept
}

TEST_CASE("np below the slots uses np ranks", "[cli]") {
  const RunResult r = run_hvdrun({"--dry-run", "--json", "-np", "2", "-H", "localhost:4", "./x"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json plan = parse_stdout(r);
  CHECK(plan["np"] == 2);
  CHECK(plan["total_slots"] == 4);
  REQUIRE(plan["ranks"].size() == 2);
  CHECK(plan["ranks"][1]["local_size"] == 2);
  CHECK(plan["ranks"][1]["env"]["WORLD_SIZE"] == "2");
  CHECK(plan["hosts"][0]["num_ranks"] == 2);
}

TEST_CASE("np defaults to all slots or 1", "[cli]") {
  CHECK(dry_run_json({"-H", "a:2,b:3", "./x"})["ranks"].size() == 5);
  const json plan = dry_run_json({"./x"});
  REQUIRE(plan["ranks"].size() == 1);
  CHECK(plan["hosts"][0]["host"] == "localhost");
  CHECK(plan["hosts"][0]["local"] == true);
}

TEST_CASE("np above the slots is a usage error", "[cli]") {
  expect_usage_error({"--dry-run", "-np", "5", "-H", "a:2,b:2", "./x"},
                     {"-np 5", "4 slots", "a:2, b:2", "--oversubscribe"});
}

TEST_CASE("np zero or not a number is a usage error", "[cli]") {
  expect_usage_error({"--dry-run", "-np", "0", "./x"}, {"-np 0", "at least 1"});
  expect_usage_error({"--dry-run", "-np", "two", "./x"}, {"two"});
}

TEST_CASE("oversubscribe allows more ranks than slots", "[cli]") {
  const RunResult r =
      run_hvdrun({"--dry-run", "--json", "--oversubscribe", "-np", "5", "-H", "a:2,b:2", "./x"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK_THAT(r.err, ContainsSubstring("--oversubscribe: 5 ranks on 4 slots"));
  const json plan = parse_stdout(r);
  REQUIRE(plan["ranks"].size() == 5);
  CHECK(plan["ranks"][4]["env"]["WORLD_SIZE"] == "5");
  CHECK(plan["hosts"][0]["num_ranks"].get<int>() + plan["hosts"][1]["num_ranks"].get<int>() == 5);
  CHECK(plan["warnings"].dump().find("oversubscribe") != std::string::npos);
}

TEST_CASE("unused hosts are a warning on stderr", "[cli]") {
  const RunResult r = run_hvdrun({"--dry-run", "--json", "-np", "1", "-H", "a:1,b:1", "./x"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK_THAT(r.err, StartsWith("hvdrun: warn"));
  CHECK_THAT(r.err, ContainsSubstring("no rank on: b"));
  const json plan = parse_stdout(r);  // the warning did not leak into stdout
  CHECK(plan["hosts"].size() == 1);
  CHECK(plan["warnings"].size() == 1);
}

TEST_CASE("loopback names are local and 127.0.0.2 is remote", "[cli]") {
  const json plan =
      dry_run_json({"-p", "2222", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1", "./x"});
  REQUIRE(plan["hosts"].size() == 3);
  CHECK(plan["hosts"][0]["local"] == true);
  CHECK(plan["hosts"][0]["ssh"].is_null());
  CHECK(plan["hosts"][1]["local"] == true);
  CHECK(plan["hosts"][2]["local"] == false);
  CHECK(plan["hosts"][2]["ssh"]["port"] == 2222);
  CHECK(plan["hosts"][2]["ssh"]["user"] == current_user());
  REQUIRE(plan["ranks"].size() == 3);
  CHECK(plan["ranks"][0]["local"] == true);
  CHECK(plan["ranks"][1]["local"] == true);
  CHECK(plan["ranks"][2]["local"] == false);
  CHECK(plan["ranks"][2]["env"]["HVD_ADVERTISE_ADDR"] == "127.0.0.2");
}

TEST_CASE("user at host in the host list", "[cli]") {
  const json plan = dry_run_json({"-H", "alice@127.0.0.3:2", "./x"});
  CHECK(plan["hosts"][0]["host"] == "127.0.0.3");
  CHECK(plan["hosts"][0]["ssh"]["user"] == "alice");
  CHECK(plan["hosts"][0]["ssh"]["port"] == 22);
}

// ---------------------------------------------------------------------------------------------
// Hostfiles.

TEST_CASE("hostfile with comments and settings", "[cli]") {
  const TempFile hostfile(
      "# training cluster\n"
      "\n"
      "10.0.0.5 slots=2 port=2222   # sshd in a container\n"
      "   \n"
      "alice@10.0.0.6 slots=1\n"
      "10.0.0.7 slots=3 user=bob max_slots=8\n");
  for (const std::string flag : {"-hostfile", "--hostfile"}) {
    CAPTURE(flag);
    const json plan = dry_run_json({flag, hostfile.path(), "-p", "2200", "./x"});
    REQUIRE(plan["hosts"].size() == 3);
    const json& h = plan["hosts"];
    CHECK(h[0]["host"] == "10.0.0.5");
    CHECK(h[0]["slots"] == 2);
    CHECK(h[0]["ssh"]["port"] == 2222);  // port= wins over -p
    CHECK(h[0]["ssh"]["user"] == current_user());
    CHECK(h[0]["origin"] == hostfile.path() + ":3");
    CHECK(h[1]["host"] == "10.0.0.6");
    CHECK(h[1]["slots"] == 1);
    CHECK(h[1]["ssh"]["user"] == "alice");
    CHECK(h[1]["ssh"]["port"] == 2200);
    CHECK(h[2]["host"] == "10.0.0.7");
    CHECK(h[2]["slots"] == 3);
    CHECK(h[2]["ssh"]["user"] == "bob");
    CHECK(plan["ranks"].size() == 6);
    CHECK(plan["ranks"][3]["host"] == "10.0.0.7");
  }
}

TEST_CASE("bad hostfile line names file line and column", "[cli]") {
  const TempFile bad_slots("a slots=1\n  b  slots=x\n");
  expect_usage_error({"--dry-run", "--hostfile", bad_slots.path(), "./x"},
                     {bad_slots.path() + ":2:6", "slots 'x' is not a number"});

  const TempFile bad_key("# hosts\na slots=1 colour=blue\n");
  expect_usage_error({"--dry-run", "-hostfile", bad_key.path(), "./x"},
                     {bad_key.path() + ":2:11", "unknown setting 'colour=blue'"});

  const TempFile host_colon("a:2\n");
  expect_usage_error({"--dry-run", "--hostfile", host_colon.path(), "./x"},
                     {host_colon.path() + ":1:1", "a slots=2"});
}

TEST_CASE("empty hostfile is a usage error", "[cli]") {
  const TempFile empty("# nothing here\n\n");
  expect_usage_error({"--dry-run", "--hostfile", empty.path(), "./x"}, {empty.path(), "no hosts"});
}

TEST_CASE("missing hostfile names the path", "[cli]") {
  const std::string path = "/nonexistent/hvd-cli-test/hosts.txt";
  expect_usage_error({"--dry-run", "--hostfile", path, "./x"}, {path, "No such file or directory"});
}

TEST_CASE("hosts and hostfile together are refused", "[cli]") {
  const TempFile hostfile("a slots=1\n");
  expect_usage_error({"--dry-run", "-H", "a:1", "--hostfile", hostfile.path(), "./x"},
                     {"-H and --hostfile", "use one of them"});
}

// ---------------------------------------------------------------------------------------------
// -H mistakes: each is exit 64 with a pointed message and nothing on stdout.

TEST_CASE("host list with a space", "[cli]") {
  expect_usage_error({"--dry-run", "-H", "a:2 b:2", "./x"}, {"contains a space", "-H a:2,b:2"});
}

TEST_CASE("host list split by the shell warns", "[cli]") {
  // `-H a:2 b:2 ./x` unquoted: b:2 becomes the command; the dry run says so on stderr.
  const RunResult r = run_hvdrun({"--dry-run", "--json", "-H", "a:2", "b:2", "./x"});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  CHECK_THAT(r.err, ContainsSubstring("'b:2' looks like a host entry"));
  CHECK(parse_stdout(r)["command"] == json::array({"b:2", "./x"}));
}

TEST_CASE("host with zero slots", "[cli]") {
  expect_usage_error({"--dry-run", "-H", "a:0", "./x"}, {"-H entry 1 'a:0'", "at least 1 slot"});
}

TEST_CASE("host with non-numeric slots", "[cli]") {
  expect_usage_error({"--dry-run", "-H", "a:1,b:x", "./x"},
                     {"-H entry 2 'b:x'", "slots 'x' is not a number"});
}

TEST_CASE("host with a port where slots go", "[cli]") {
  expect_usage_error({"--dry-run", "-H", "h:2222", "./x"}, {"2222 slots", "port", "-p 2222"});
}

TEST_CASE("duplicate host", "[cli]") {
  expect_usage_error({"--dry-run", "-H", "a:1,b:1,a:2", "./x"},
                     {"'a' is listed again", "-H entry 1", "a:3"});
}

TEST_CASE("host list with an empty entry", "[cli]") {
  expect_usage_error({"--dry-run", "-H", ",a", "./x"}, {"-H entry 1 is empty", "comma"});
  expect_usage_error({"--dry-run", "-H", "a,", "./x"}, {"-H entry 2 is empty"});
  expect_usage_error({"--dry-run", "-H", "", "./x"}, {"empty"});
}

TEST_CASE("IPv6 host without brackets", "[cli]") {
  expect_usage_error({"--dry-run", "-H", "::1:2", "./x"}, {"needs brackets", "["});
  // With brackets it is fine, and ::1 is this machine.
  const json plan = dry_run_json({"-H", "[::1]:2", "./x"});
  CHECK(plan["hosts"][0]["host"] == "::1");
  CHECK(plan["hosts"][0]["local"] == true);
  CHECK(plan["ranks"].size() == 2);
}

TEST_CASE("host name with a shell character", "[cli]") {
  expect_usage_error({"--dry-run", "-H", "a;rm:1", "./x"}, {"contains ';'"});
  expect_usage_error({"--dry-run", "-H", "-oProxyCommand=x", "./x"}, {"starts with '-'"});
}

// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// What the launcher would run.

TEST_CASE("dry run: --mpi shows the exact mpirun command, placeholders for launch-time values",
          "[cli]") {
  const RunResult r =
      run_hvdrun({"--mpi", "--dry-run", "-np", "2", "-H", "10.0.0.2,10.0.0.3", "./train", "-x"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK_THAT(r.out, ContainsSubstring("launcher: mpirun; it would run:"));
  // Open MPI 5 spells the binding with two dashes (MpirunDialect).
  const std::string binding = hvd::test::installed_open_mpi_major() >= 5
                                  ? "--bind-to none --map-by slot"
                                  : "-bind-to none -map-by slot";
  CHECK_THAT(r.out, ContainsSubstring("-H 10.0.0.2:1,10.0.0.3:1 " + binding + " --tag-output"));
  CHECK_THAT(r.out, ContainsSubstring("btl_tcp_if_include <set at launch:"));
  CHECK_THAT(r.out, ContainsSubstring(" ./train -x\n"));

  const RunResult j = run_hvdrun({"--mpi", "--dry-run", "--json", "-np", "2", "./train"});
  INFO(show(j));
  REQUIRE(j.exit_code == kSuccess);
  const json plan = parse_stdout(j);
  CHECK(plan["mode"] == "mpirun");
  REQUIRE(plan["launcher_commands"].size() == 1);
  const json& argv = plan["launcher_commands"][0]["argv"];
  CHECK(argv[0] == "mpirun");
  CHECK(argv.back() == "./train");
}

TEST_CASE("dry run: native mode shows each host's agent command", "[cli]") {
  const RunResult r = run_hvdrun(
      {"--dry-run", "--json", "--agent-path", "/opt/hvdrun", "-H", "localhost,10.0.0.2", "true"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json plan = parse_stdout(r);
  CHECK(plan["mode"] == "native");
  REQUIRE(plan["launcher_commands"].size() == 2);
  CHECK(plan["launcher_commands"][0]["argv"][1] == "--agent");
  CHECK(plan["launcher_commands"][1]["argv"] == json::array({"exec", "/opt/hvdrun", "--agent"}));
}

// ---------------------------------------------------------------------------------------------
// Hosts from a scheduler (launcher/plan/scheduler_hosts.h): inside a Slurm allocation, with no -H.

TEST_CASE("inside a Slurm allocation the plan takes its nodes, tasks and -np from it", "[cli]") {
  const std::vector<std::pair<std::string, std::string>> slurm{{"SLURM_JOB_ID", "1234"},
                                                               {"SLURM_JOB_NODELIST", "n[1-3]"},
                                                               {"SLURM_TASKS_PER_NODE", "2(x3)"},
                                                               {"SLURM_NTASKS", "6"}};
  const RunResult r = run_hvdrun({"--dry-run", "--json", "./train"}, slurm);
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json plan = parse_stdout(r);
  CHECK(plan["np"] == 6);
  CHECK(plan["hosts_source"]["kind"] == "slurm");
  CHECK(plan["hosts_source"]["description"] == "the Slurm allocation 1234: 3 nodes, 6 tasks");
  REQUIRE(plan["hosts"].size() == 3);
  CHECK(plan["hosts"][2]["host"] == "n3");
  CHECK(plan["ranks"][5]["host"] == "n3");
  CHECK(plan["ranks"][5]["local_rank"] == 1);

  const RunResult table = run_hvdrun({"--dry-run", "./train"}, slurm);
  CHECK_THAT(table.out + table.err,
             ContainsSubstring("hosts from: the Slurm allocation 1234: 3 nodes, 6 tasks"));
  // More ranks than the allocation holds: a usage error naming both numbers and the allocation.
  const RunResult over = run_hvdrun({"--dry-run", "-np", "8", "./train"}, slurm);
  CHECK(over.exit_code == kUsage);
  CHECK_THAT(over.err,
             ContainsSubstring("-np 8 is more than the 6 slots of the Slurm allocation 1234"));
  // An explicit -H still wins.
  const RunResult explicit_hosts =
      run_hvdrun({"--dry-run", "--json", "-H", "a:2", "./train"}, slurm);
  REQUIRE(explicit_hosts.exit_code == kSuccess);
  CHECK(parse_stdout(explicit_hosts)["hosts_source"]["kind"] == "host_list");
  CHECK(parse_stdout(explicit_hosts)["np"] == 2);
  // A malformed node list names the variable.
  const RunResult bad =
      run_hvdrun({"--dry-run", "./train"}, {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-"}});
  CHECK(bad.exit_code == kUsage);
  CHECK_THAT(bad.err, ContainsSubstring("SLURM_JOB_NODELIST='n[1-'"));
}

TEST_CASE("without -H or a scheduler the dry run says the hosts are localhost", "[cli]") {
  const RunResult r = run_hvdrun({"--dry-run", "--json", "-np", "2", "./train"});
  REQUIRE(r.exit_code == kSuccess);
  CHECK(parse_stdout(r)["hosts_source"]["kind"] == "localhost");
}

TEST_CASE("agents launcher choice: srun needs an allocation and is not for --mpi", "[cli]") {
  const RunResult outside = run_hvdrun({"--dry-run", "--launcher", "srun", "-np", "2", "true"});
  CHECK(outside.exit_code == kUsage);
  CHECK_THAT(outside.err, ContainsSubstring("--launcher srun: not inside a Slurm allocation"));
  const RunResult mpi = run_hvdrun({"--dry-run", "--mpi", "--launcher", "ssh", "-np", "2", "true"});
  CHECK(mpi.exit_code == kUsage);
  const RunResult bad = run_hvdrun({"--dry-run", "--launcher", "pbs", "-np", "2", "true"});
  CHECK(bad.exit_code == kUsage);
  // Inside an allocation whose hosts came from Slurm, auto picks srun when srun is on PATH;
  // --launcher ssh keeps SSH.
  const std::vector<std::pair<std::string, std::string>> slurm{
      {"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "1(x2)"}};
  const RunResult ssh = run_hvdrun({"--dry-run", "--launcher", "ssh", "true"}, slurm);
  REQUIRE(ssh.exit_code == kSuccess);
  CHECK_THAT(ssh.out, ContainsSubstring("over SSH"));
  CHECK_THAT(ssh.out, !ContainsSubstring("srun --nodes"));
}

TEST_CASE("the dry run shows the port and user the ssh config gives a host", "[cli]") {
  const TempFile config("Host h1 h3\n  Port 2222\n  User alice\nHost h2\n  HostName 127.0.9.9\n");
  const json plan = dry_run_json({"--ssh-config", config.path(), "-H", "h1,h2,bob@h3", "./x"});
  // A hostfile or user@host entry still wins over the config, as in a launch; h2 keeps 22.
  CHECK(plan["hosts"][0]["ssh"] == json{{"user", "alice"}, {"port", 2222}});
  CHECK(plan["hosts"][1]["ssh"] == json{{"user", current_user()}, {"port", 22}});
  const json& ssh_h3_bob = plan["hosts"][2]["ssh"];
  CHECK(ssh_h3_bob["user"] == "bob");
  CHECK(ssh_h3_bob["port"] == 2222);
  // -p beats the config.
  const json with_p =
      dry_run_json({"--ssh-config", config.path(), "-p", "3333", "-H", "h1", "./x"});
  CHECK(with_p["hosts"][0]["ssh"]["port"] == 3333);
  const RunResult table =
      run_hvdrun({"--dry-run", "--ssh-config", config.path(), "-H", "h1", "./x"});
  INFO(show(table));
  CHECK_THAT(table.out, ContainsSubstring("alice@h1:2222"));
  CHECK_THAT(table.out, !ContainsSubstring("@h1:22\n"));
}

TEST_CASE("elastic training through srun is refused, also when auto chose srun", "[cli]") {
  // A stand-in srun on PATH: auto's choice only looks for it (nothing runs in a dry run).
  std::string bin = "/tmp/hvd-cli-srun-XXXXXX";
  REQUIRE(::mkdtemp(bin.data()) != nullptr);
  const TempFile srun("#!/bin/sh\nexit 0\n");
  REQUIRE(std::rename(srun.path().c_str(), (bin + "/srun").c_str()) == 0);
  REQUIRE(::chmod((bin + "/srun").c_str(), 0755) == 0);
  const char* path = std::getenv("PATH");
  const std::vector<std::pair<std::string, std::string>> slurm{
      {"SLURM_JOB_ID", "5"},
      {"SLURM_JOB_NODELIST", "n[1-2]"},
      {"SLURM_TASKS_PER_NODE", "1(x2)"},
      {"PATH", bin + ":" + (path != nullptr ? path : "/usr/bin:/bin")}};
  const RunResult chosen = run_hvdrun({"--dry-run", "--min-np", "1", "true"}, slurm);
  INFO(show(chosen));
  CHECK(chosen.exit_code == kUsage);
  CHECK_THAT(chosen.err,
             ContainsSubstring("elastic training (--min-np) through srun is not built yet "
                               "(chosen because the hosts came from Slurm)"));
  CHECK_THAT(chosen.err, ContainsSubstring("--launcher ssh"));
  const RunResult typed =
      run_hvdrun({"--dry-run", "--launcher", "srun", "--min-np", "1", "true"}, slurm);
  CHECK(typed.exit_code == kUsage);
  CHECK_THAT(typed.err,
             ContainsSubstring("elastic training (--min-np) through srun is not built yet"));
  // The same job over SSH is planned.
  const RunResult ssh =
      run_hvdrun({"--dry-run", "--launcher", "ssh", "--min-np", "1", "true"}, slurm);
  INFO(show(ssh));
  CHECK(ssh.exit_code == kSuccess);
  std::filesystem::remove_all(bin);
}
