// What Horovod's own runner tests pin about horovodrun, replayed against hvdrun's plan: each case
// is one of Horovod's (named in a comment by its test) as input, and the plan horovodrun would
// make as the expected result. Our own code and cases; Horovod's tests were read, not copied.
// Where hvdrun differs on purpose, docs/cli.md's horovodrun section says so.
#include <filesystem>
#include <fstream>

#include "tests/cli/cli_helpers.h"
#include "tests/support/open_mpi.h"

using namespace hvd::test;  // NOLINT: test helpers
namespace fs = std::filesystem;

namespace {

json plan_of(std::vector<std::string> args, const Env& env = {}) {
  args.emplace_back("./train");
  return dry_run_json(args, env);
}

fs::path scratch(const std::string& name) { return fresh_dir("horovodrun_fidelity_" + name); }

fs::path write_file(const fs::path& path, const std::string& text, bool executable = false) {
  return write_test_file(path, text, executable);
}

std::vector<std::string> host_names(const json& plan) {
  std::vector<std::string> out;
  for (const json& h : plan["hosts"]) out.push_back(h["host"].get<std::string>());
  return out;
}

std::string notices_of(const json& plan) {
  std::string all;
  for (const json& n : plan["notices"]) all += n.get<std::string>() + "\n";
  return all;
}

}  // namespace

// test_run.py's host parsing takes any name a resolver or ssh_config knows, '_' included
// (docker-compose's project_worker_1). hvdrun used to exit 70 (internal error) on it.
TEST_CASE("horovodrun fidelity: a host name with '_' from every host source", "[horovodrun]") {
  const json from_list = plan_of({"-np", "3", "-H", "worker_0:2,project_worker_1:1"});
  CHECK(host_names(from_list) == std::vector<std::string>{"worker_0", "project_worker_1"});
  CHECK(from_list["np"] == 3);

  const fs::path dir = scratch("underscore");
  const fs::path hostfile = write_file(dir / "hosts", "worker_0 slots=2\nworker_1 slots=2\n");
  CHECK(host_names(plan_of({"--hostfile", hostfile.string()})) ==
        std::vector<std::string>{"worker_0", "worker_1"});

  const fs::path script =
      write_file(dir / "discover.sh", "#!/bin/sh\necho worker_0:2\necho worker_1:2\n", true);
  const json discovered = plan_of({"-np", "4", "--host-discovery-script", script.string()});
  CHECK(host_names(discovered) == std::vector<std::string>{"worker_0", "worker_1"});

  // Slurm's node list (a scheduler's host source) goes through the same host check.
  const json slurm = dry_run_json({"./train"}, {{"SLURM_JOB_ID", "1"},
                                                {"SLURM_JOB_NODELIST", "node_a,node_b"},
                                                {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                                {"SLURM_NTASKS", "4"}});
  CHECK(host_names(slurm) == std::vector<std::string>{"node_a", "node_b"});

  // --check-ssh: a name nobody resolves is the SSH check's "does not resolve", not exit 70.
  const fs::path empty_config = write_file(dir / "ssh_config", "");
  const RunResult check = run_hvdrun({"--check-ssh", "--json", "-H", "no_such_host_1",
                                      "--ssh-config", empty_config.string(), "--ssh-known-hosts",
                                      (dir / "known_hosts").string(), "--ssh-timeout", "3"});
  INFO(show(check));
  CHECK(check.exit_code != kInternal);
  const json doc = parse_stdout(check);
  REQUIRE(doc["hosts"].size() == 1);
  CHECK(doc["hosts"][0]["host"] == "no_such_host_1");
  CHECK(doc["hosts"][0]["code"] == "dns_failure");
}

// Hostile names are usage errors naming the entry, never a crash or an internal error.
TEST_CASE("horovodrun fidelity: hostile host names are usage errors naming the entry",
          "[horovodrun]") {
  expect_usage_error({"--dry-run", "-H", "-oProxyCommand=x", "./train"},
                     {"-H entry 1", "starts with '-'"});
  expect_usage_error({"--dry-run", "-H", "a;b", "./train"}, {"-H entry 1 'a;b'", "contains ';'"});
  const std::string long_name(300, 'a');
  expect_usage_error({"--dry-run", "-H", long_name + ":2", "./train"},
                     {"-H entry 1", "300 characters long", "at most 253"});
  expect_usage_error({"--dry-run", "-H", "h\xc3\xb6st:2", "./train"}, {"-H entry 1", "contains"});
  const fs::path dir = scratch("hostile");
  expect_usage_error({"--dry-run", "--hostfile",
                      write_file(dir / "hosts", "a$(id) slots=1\n").string(), "./train"},
                     {"hosts:1:1", "contains '$'"});
}

// test_elastic_driver.py, test_wait_for_available_slots: the discovery script lists 0, then 4,
// 12 and 16 slots; with -np 16 --min-np 8 --max-np 20 the job waits for 16, then starts.
TEST_CASE("horovodrun fidelity: elastic waits for -np slots from the discovery script",
          "[horovodrun]") {
  const fs::path dir = scratch("wait_slots");
  const fs::path count = dir / "count";
  // Run k (1-based) prints hosts h1..h(k-1) except that run 3 prints three and run 4 four:
  // 0, 4, 12, 16 slots.
  const fs::path script = write_file(dir / "discover.sh",
                                     "#!/bin/sh\n"
                                     "n=$(cat '" +
                                         count.string() +
                                         "' 2>/dev/null || echo 0)\n"
                                         "n=$((n + 1)); echo $n > '" +
                                         count.string() +
                                         "'\n"
                                         "case $n in\n"
                                         "  1) ;;\n"
                                         "  2) echo h1:4 ;;\n"
                                         "  3) printf 'h1:4\\nh2:4\\nh3:4\\n' ;;\n"
                                         "  *) printf 'h1:4\\nh2:4\\nh3:4\\nh4:4\\n' ;;\n"
                                         "esac\n",
                                     true);
  const json plan =
      plan_of({"-np", "16", "--min-np", "8", "--max-np", "20", "--host-discovery-script",
               script.string(), "--discovery-interval", "0.1"});
  CHECK(plan["np"] == 16);
  CHECK(host_names(plan) == std::vector<std::string>{"h1", "h2", "h3", "h4"});
  CHECK(plan["elastic"]["max_np"] == 20);
  std::ifstream runs(count);
  int n = 0;
  runs >> n;
  CHECK(n == 4);

  // Never enough: --elastic-timeout passes first; the usage code, the slots seen and -np.
  const fs::path twelve =
      write_file(dir / "twelve.sh", "#!/bin/sh\nprintf 'h1:4\\nh2:4\\nh3:4\\n'\n", true);
  const RunResult never = run_hvdrun(
      {"--dry-run", "-np", "16", "--min-np", "8", "--host-discovery-script", twelve.string(),
       "--discovery-interval", "0.2", "--elastic-timeout", "1", "./train"});
  INFO(show(never));
  CHECK(never.exit_code == kUsage);
  CHECK(never.out.empty());
  CHECK_THAT(never.err, ContainsSubstring("waiting up to 1 s (--elastic-timeout) for -np 16"));
  CHECK_THAT(never.err, ContainsSubstring("hvdrun: error: the host discovery script"));
  CHECK_THAT(never.err, ContainsSubstring("listed 12 slots for 1 s, fewer than -np 16"));
}

// horovodrun's --max-np has no default limit: with -np 2 --min-np 1 -H a:2,b:2 every slot
// trains (test_elastic_run.py's settings; its driver assigns every available slot up to max_np).
// hvdrun starts -np ranks and grows onto the free slots at once.
TEST_CASE("horovodrun fidelity: --max-np is unlimited by default", "[horovodrun]") {
  const json plan = plan_of({"-np", "2", "--min-np", "1", "-H", "a:2,b:2"});
  CHECK(plan["np"] == 2);
  CHECK(plan["elastic"]["max_np"].is_null());
  const RunResult text =
      run_hvdrun({"--dry-run", "-np", "2", "--min-np", "1", "-H", "a:2,b:2", "./train"});
  INFO(show(text));
  CHECK(text.exit_code == kSuccess);
  CHECK_THAT(text.out,
             ContainsSubstring("grows onto the hosts' 2 free slots at once (--max-np: no limit"));
  CHECK(plan_of({"-np", "2", "--min-np", "1", "--max-np", "3", "-H",
                 "a:2,b:2"})["elastic"]["max_np"] == 3);
}

// Horovod's elastic launch sets HOROVOD_ELASTIC=1 for every rank (its gloo_run's elastic env).
TEST_CASE("horovodrun fidelity: HOROVOD_ELASTIC=1 in every elastic rank", "[horovodrun]") {
  const json elastic = plan_of({"-np", "2", "--min-np", "1", "-H", "localhost:2"});
  for (const json& rank : elastic["ranks"]) CHECK(rank["env"]["HOROVOD_ELASTIC"] == "1");
  // Not elastic: unset, even when the launcher's environment has it.
  const json plain = plan_of({"-np", "2", "-H", "localhost:2"}, {{"HOROVOD_ELASTIC", "1"}});
  for (const json& rank : plain["ranks"]) CHECK_FALSE(rank["env"].contains("HOROVOD_ELASTIC"));
}

// horovodrun forwards its whole environment (test_run.py's env checks); hvdrun forwards an
// allow-list, says how many variables it left out, and -x '*' forwards all but the session's.
TEST_CASE("horovodrun fidelity: -x '*' forwards the launcher's environment", "[horovodrun]") {
  const Env env{{"MY_DATA_DIR", "/data"}, {"BASH_FUNC_f%%", "() {  echo hi\n}"}};
  const json allow = plan_of({"-np", "1", "-H", "localhost:1"}, env);
  CHECK_FALSE(allow["ranks"][0]["env"].contains("MY_DATA_DIR"));
  CHECK_THAT(notices_of(allow), ContainsSubstring("of hvdrun's environment are not forwarded"));
  CHECK_THAT(notices_of(allow), ContainsSubstring("-x '*'"));

  const json all = plan_of({"-np", "1", "-H", "localhost:1", "-x", "*"}, env);
  const json& rank_env = all["ranks"][0]["env"];
  CHECK(rank_env.contains("MY_DATA_DIR"));
  CHECK_FALSE(rank_env.contains("BASH_FUNC_f%%"));
  CHECK_FALSE(rank_env.contains("SSH_AUTH_SOCK"));
  CHECK(rank_env["HOROVOD_RANK"] == "0");  // per-rank values win
  CHECK_THAT(notices_of(all), ContainsSubstring("-x '*': 1 entry of hvdrun's environment skipped"));

  // Under --mpi the names travel as -x NAME; no value on mpirun's command line.
  const json mpi = plan_of({"--mpi", "-np", "1", "-H", "localhost:1", "-x", "*"},
                           {{"MY_DATA_DIR", "/secret-value-xyz"}});
  const json argv = mpi["launcher_commands"].back()["argv"];
  CHECK(has_words(argv, {"-x", "MY_DATA_DIR"}));
  CHECK(argv.dump().find("secret-value-xyz") == std::string::npos);
}

// The smaller alignments (docs/cli.md's horovodrun section, one line each).
TEST_CASE(
    "horovodrun fidelity: spaces in -H, controller case, discovery duplicates, mpirun's "
    "concurrent ssh",
    "[horovodrun]") {
  // test_run.py parses "a:2, b:2" as two hosts: horovodrun strips the space.
  CHECK(host_names(plan_of({"-H", "a:2, b:2"})) == std::vector<std::string>{"a", "b"});

  // horovodrun lower-cases the config file's controller.
  const fs::path dir = scratch("align");
  const json mpi =
      plan_of({"--config-file", write_file(dir / "c.yaml", "controller: MPI\n").string()});
  CHECK(mpi["mode"] == "mpirun");
  const json gloo =
      plan_of({"--config-file", write_file(dir / "g.yaml", "controller: Gloo\n").string()});
  CHECK(gloo["mode"] == "native");

  // A discovery script's output is a set of lines in horovodrun: the same line twice is one.
  const fs::path twice =
      write_file(dir / "twice.sh", "#!/bin/sh\necho a:2\necho a:2\necho b:2\n", true);
  const json once = plan_of({"-np", "4", "--host-discovery-script", twice.string()});
  CHECK(host_names(once) == std::vector<std::string>{"a", "b"});

  // From 64 hosts on, horovodrun passes -mca plm_rsh_num_concurrent <hosts> to mpirun (Open
  // MPI 5: --prtemca plm_ssh_num_concurrent).
  auto hosts = [](int n) {
    std::string list;
    for (int i = 1; i <= n; ++i) list += (i > 1 ? "," : "") + ("h" + std::to_string(i));
    return list;
  };
  const bool five = hvd::test::installed_open_mpi_major() >= 5;
  const std::string concurrent = five ? "plm_ssh_num_concurrent" : "plm_rsh_num_concurrent";
  const json many = plan_of({"--mpi", "-H", hosts(64)});
  CHECK(has_words(many["launcher_commands"].back()["argv"],
                  {five ? "--prtemca" : "-mca", concurrent, "64"}));
  const json fewer = plan_of({"--mpi", "-H", hosts(63)});
  CHECK(fewer["launcher_commands"].back()["argv"].dump().find("num_concurrent") ==
        std::string::npos);
}
