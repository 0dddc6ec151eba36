// Every horovodrun 0.28.1 flag, from a list taken from the reference file
// (tests/cli/horovodrun_flags.txt), not from hvdrun's own option table: each one is run and its
// effect, its warning or its refusal checked. A flag of the list without a check here fails the
// first test, so the list and the checks cannot drift apart.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>

#include "tests/cli/cli_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers
namespace fs = std::filesystem;

namespace {

std::vector<std::string> horovodrun_flags() {
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/tests/cli/horovodrun_flags.txt");
  std::vector<std::string> flags;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '-') flags.push_back(line);
  }
  return flags;
}

// The plan of `hvdrun --dry-run --json ARGS ./train`.
json plan_of(std::vector<std::string> args) {
  args.emplace_back("./train");
  return dry_run_json(args);
}

json env_of(const std::vector<std::string>& args) { return plan_of(args)["ranks"][0]["env"]; }

std::string warnings_of(const json& plan) {
  std::string all;
  for (const json& w : plan["warnings"]) all += w.get<std::string>() + "\n";
  return all;
}

// The knob is set to `value`; with `warning`, the plan warns naming the flag and the words;
// without, it warns of nothing.
void knob(const std::vector<std::string>& args, const std::string& name, const std::string& value,
          const std::string& warning = "") {
  const json plan = plan_of(args);
  INFO(plan.dump(1));
  CHECK(plan["ranks"][0]["env"].value(name, "(unset)") == value);
  if (warning.empty()) {
    CHECK(plan["warnings"].empty());
  } else {
    CHECK_THAT(warnings_of(plan), ContainsSubstring(args.front() + ": " + warning));
  }
}

json mpirun_argv(const json& plan) { return plan["launcher_commands"].back()["argv"]; }

fs::path scratch(const std::string& name) { return fresh_dir("horovodrun_flags_" + name); }

fs::path write_file(const fs::path& path, const std::string& text, bool executable = false) {
  return write_test_file(path, text, executable);
}

void host_list(const std::string& flag) {
  const json plan = plan_of({flag, "localhost:3", "-np", "2"});
  CHECK(plan["total_slots"] == 3);
  CHECK(plan["np"] == 2);
}

void hostfile(const std::string& flag) {
  const fs::path file = write_file(scratch("hostfile") / "hosts", "localhost slots=3\n");
  const json plan = plan_of({flag, file.string()});
  CHECK(plan["hosts"][0]["slots"] == 3);
  CHECK(plan["np"] == 3);
}

void num_proc(const std::string& flag) {
  CHECK(plan_of({flag, "3", "-H", "localhost:4"})["np"] == 3);
}

void min_np(const std::string& flag) {
  const json plan = plan_of({"-np", "2", flag, "1", "-H", "localhost:3"});
  CHECK(plan["elastic"]["min_np"] == 1);
}

void max_np(const std::string& flag) {
  const json plan = plan_of({"-np", "2", "--min-np", "1", flag, "3", "-H", "localhost:3"});
  CHECK(plan["elastic"]["max_np"] == 3);
}

void identity(const std::string& flag) {
  const fs::path key = write_file(scratch("identity") / "key", "not a key\n");
  const json plan = plan_of({"--mpi", "-H", "a:1,b:1", flag, key.string()});
  CHECK_THAT(mpirun_argv(plan).dump(), ContainsSubstring("-i " + key.string()));
}

void ssh_port(const std::string& flag) {
  CHECK(plan_of({"-H", "a:1", flag, "2222"})["hosts"][0]["ssh"]["port"] == 2222);
}

void check_build(const std::string& flag) {
  const RunResult r = run_hvdrun({flag, "--json"});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  CHECK(parse_stdout(r).contains("hvdrun_version"));
}

// A real one-rank job: its line carries the time in front of its tag, as horovodrun writes it.
void timestamp(const std::string& flag) {
  const RunResult r = run_hvdrun({flag, "-np", "1", "echo", "stamped"});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  static const std::regex kLine(
      R"([A-Z][a-z]{2} [A-Z][a-z]{2} [0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}\[1,0\]<stdout>:stamped\n)");
  CHECK(std::regex_search(r.out, kLine));
}

void network_interfaces(const std::string& flag) {
  const json env = env_of({flag, "eth9", "--network-interface", "ens5"});
  CHECK_THAT(env["HVD_ADVERTISE_ADDR"].get<std::string>(), ContainsSubstring("eth9"));
  CHECK_THAT(env["HVD_ADVERTISE_ADDR"].get<std::string>(), ContainsSubstring("ens5"));
}

void autotune_value(const std::string& flag, const std::string& name, const std::string& value) {
  const json plan = plan_of({"--autotune", flag, value});
  CHECK(plan["ranks"][0]["env"].value(name, "(unset)") == value);
  CHECK_THAT(warnings_of(plan), ContainsSubstring("--autotune: libhvd has no autotuner"));
  const json without = plan_of({flag, value});  // horovodrun exports it only with --autotune
  CHECK_FALSE(without["ranks"][0]["env"].contains(name));
  CHECK_THAT(warnings_of(without), ContainsSubstring(flag + ": has no effect without --autotune"));
}

void on_off(const std::string& on, const std::string& name, const std::string& lacks) {
  knob({on}, name, "1", lacks);
  knob({"--no-" + on.substr(2)}, name, "0");
  knob({on, "--no-" + on.substr(2)}, name, "0");  // the last one wins, warning and all
}

void usage_error(const std::vector<std::string>& args, const std::string& words) {
  expect_usage_error(args, {words});
}

using Check = std::function<void(const std::string& flag)>;

const std::map<std::string, Check>& checks() {
  static const std::map<std::string, Check> table{
      {"--autotune",
       [](const std::string&) {
         knob({"--autotune"}, "HOROVOD_AUTOTUNE", "1", "libhvd has no autotuner");
       }},
      {"--no-autotune",
       [](const std::string& f) {
         const json plan = plan_of({"--autotune", f, "--autotune-warmup-samples", "5"});
         CHECK_FALSE(plan["ranks"][0]["env"].contains("HOROVOD_AUTOTUNE"));
         CHECK_FALSE(plan["ranks"][0]["env"].contains("HOROVOD_AUTOTUNE_WARMUP_SAMPLES"));
       }},
      {"--autotune-bayes-opt-max-samples",
       [](const std::string& f) {
         autotune_value(f, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "7");
       }},
      {"--autotune-gaussian-process-noise",
       [](const std::string& f) {
         autotune_value(f, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.3");
         usage_error({f, "1.5", "./train"}, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE");
       }},
      {"--autotune-log-file",
       [](const std::string& f) { autotune_value(f, "HOROVOD_AUTOTUNE_LOG", "/tmp/at.csv"); }},
      {"--autotune-steps-per-sample",
       [](const std::string& f) { autotune_value(f, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "4"); }},
      {"--autotune-warmup-samples",
       [](const std::string& f) { autotune_value(f, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5"); }},
      {"--binding-args",
       [](const std::string& f) {
         const json plan = plan_of({"--mpi", "-H", "a:1,b:1", f, "-bind-to core"});
         CHECK(has_words(mpirun_argv(plan), {"-H", "a:1,b:1", "-bind-to", "core", "--tag-output"}));
         CHECK_THAT(warnings_of(plan_of({f, "-bind-to core"})),
                    ContainsSubstring("--binding-args: only mpirun binds ranks"));
       }},
      {"--blacklist-cooldown-range",
       [](const std::string& f) {
         const json plan = plan_of({"--max-restarts", "1", f, "1", "2"});
         CHECK(plan["restarts"]["blacklist_cooldown_seconds"] == json::array({1.0, 2.0}));
       }},
      {"--cache-capacity",
       [](const std::string& f) {
         knob({f, "2048"}, "HOROVOD_CACHE_CAPACITY", "2048");
         knob({f, "0"}, "HOROVOD_CACHE_CAPACITY", "0");
         usage_error({f, "-1", "./train"}, "HOROVOD_CACHE_CAPACITY");
       }},
      {"--check-build", check_build},
      {"-cb", check_build},
      {"--config-file",
       [](const std::string& f) {
         const fs::path file = write_file(scratch("config") / "c.yaml",
                                          "params:\n  cycle_time_ms: 3\n"
                                          "library_options:\n  gloo_timeout_seconds: 45\n");
         const json env = env_of({f, file.string()});
         CHECK(env["HOROVOD_CYCLE_TIME"] == "3");
         CHECK(env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "45");
       }},
      {"--cycle-time-ms",
       [](const std::string& f) {
         knob({f, "2.5"}, "HOROVOD_CYCLE_TIME", "2.5");
       }},
      {"--disable-cache",
       [](const std::string& f) {
         const json plan = plan_of({f});  // hvdrun keeps no cache: nothing to turn off
         CHECK(plan["warnings"].empty());
       }},
      {"--elastic-timeout",
       [](const std::string& f) {
         const json plan = plan_of({"-np", "2", "--min-np", "1", f, "9"});
         CHECK(plan["elastic"]["elastic_timeout_seconds"] == 9.0);
       }},
      {"--fusion-threshold-mb",
       [](const std::string& f) {
         knob({f, "1"}, "HOROVOD_FUSION_THRESHOLD", "1048576");
       }},
      {"--gloo",
       [](const std::string& f) {
         CHECK(plan_of({f})["mode"] == "native");
         usage_error({f, "--mpi", "./train"}, "--gloo");
       }},
      {"--gloo-timeout-seconds",
       [](const std::string& f) {
         knob({f, "40"}, "HOROVOD_GLOO_TIMEOUT_SECONDS", "40");
       }},
      {"--hierarchical-allgather",
       [](const std::string& f) {
         on_off(f, "HOROVOD_HIERARCHICAL_ALLGATHER", "libhvd runs one flat allgather");
       }},
      {"--no-hierarchical-allgather",
       [](const std::string& f) { knob({f}, "HOROVOD_HIERARCHICAL_ALLGATHER", "0"); }},
      {"--hierarchical-allreduce",
       [](const std::string& f) {
         on_off(f, "HOROVOD_HIERARCHICAL_ALLREDUCE", "libhvd runs one flat allreduce");
       }},
      {"--no-hierarchical-allreduce",
       [](const std::string& f) { knob({f}, "HOROVOD_HIERARCHICAL_ALLREDUCE", "0"); }},
      {"--torus-allreduce",
       [](const std::string& f) {
         on_off(f, "HOROVOD_TORUS_ALLREDUCE", "libhvd runs one flat allreduce");
       }},
      {"--no-torus-allreduce",
       [](const std::string& f) { knob({f}, "HOROVOD_TORUS_ALLREDUCE", "0"); }},
      {"--host-discovery-script",
       [](const std::string& f) {
         const fs::path script = write_file(scratch("discovery") / "discover.sh",
                                            "#!/bin/sh\necho localhost:2\n", true);
         const json plan = plan_of({f, script.string(), "-np", "2"});
         CHECK(plan["elastic"]["discovery_script"] == script.string());
         CHECK(plan["hosts"][0]["slots"] == 2);
       }},
      {"--slots-per-host",
       [](const std::string& f) {
         const fs::path script =
             write_file(scratch("slots") / "discover.sh", "#!/bin/sh\necho localhost\n", true);
         const json plan =
             plan_of({"--host-discovery-script", script.string(), f, "3", "-np", "2"});
         CHECK(plan["hosts"][0]["slots"] == 3);
       }},
      {"--hostfile", hostfile},
      {"-hostfile", hostfile},
      {"--hosts", host_list},
      {"-H", host_list},
      {"--jsrun",
       [](const std::string& f) {
         usage_error({f, "./train"}, "jsrun");
       }},
      {"--log-hide-timestamp",
       [](const std::string& f) { knob({f}, "HOROVOD_LOG_HIDE_TIME", "1"); }},
      {"--log-without-timestamp",
       [](const std::string& f) { knob({f}, "HOROVOD_LOG_HIDE_TIME", "1"); }},
      {"--log-with-timestamp",
       [](const std::string& f) {
         knob({f}, "HOROVOD_LOG_HIDE_TIME", "0", "libhvd's log lines carry no time");
       }},
      {"--no-log-hide-timestamp",
       [](const std::string& f) {
         knob({f}, "HOROVOD_LOG_HIDE_TIME", "0", "libhvd's log lines carry no time");
       }},
      {"--log-level",
       [](const std::string& f) {
         knob({f, "WARNING"}, "HOROVOD_LOG_LEVEL", "warning");
         knob({f, "FATAL"}, "HOROVOD_LOG_LEVEL", "fatal");
         knob({f, "Debug"}, "HOROVOD_LOG_LEVEL", "debug");
         usage_error({f, "LOUD", "./train"}, "--log-level LOUD");
       }},
      {"--max-np", max_np},
      {"--max-num-proc", max_np},
      {"--min-np", min_np},
      {"--min-num-proc", min_np},
      {"--mpi", [](const std::string& f) { CHECK(plan_of({f})["mode"] == "mpirun"); }},
      {"--mpi-args",
       [](const std::string& f) {
         CHECK(has_words(mpirun_argv(plan_of({"--mpi", f, "-mca x y"})), {"-mca", "x", "y"}));
         usage_error({f, "-mca x y", "./train"}, "--mpi-args was given without --mpi");
       }},
      {"--mpi-threads-disable",
       [](const std::string& f) {
         knob({f}, "HOROVOD_MPI_THREADS_DISABLE", "1", "libhvd's engine thread calls MPI");
       }},
      {"--network-interface", network_interfaces},
      {"--network-interfaces", network_interfaces},
      {"--no-stall-check",
       [](const std::string& f) { knob({f}, "HOROVOD_STALL_CHECK_DISABLE", "1"); }},
      {"--stall-check",
       [](const std::string& f) {
         knob({"--no-stall-check", f}, "HOROVOD_STALL_CHECK_DISABLE", "0");
       }},
      {"--num-nccl-streams",
       [](const std::string& f) {
         knob({f, "2"}, "HOROVOD_NUM_NCCL_STREAMS", "2", "libhvd runs NCCL on one stream");
         knob({f, "1"}, "HOROVOD_NUM_NCCL_STREAMS", "1");
       }},
      {"--num-proc", num_proc},
      {"-np", num_proc},
      {"--output-filename",
       [](const std::string& f) {
         const fs::path dir = scratch("output");
         const RunResult r = run_hvdrun({f, dir.string(), "-np", "1", "echo", "kept"});
         INFO(show(r));
         CHECK(r.exit_code == kSuccess);
         std::ifstream in(dir / "rank.0" / "stdout");
         std::string line;
         std::getline(in, line);
         CHECK(line == "kept");
       }},
      {"--prefix-output-with-timestamp", timestamp},
      {"-prefix-timestamp", timestamp},
      {"--reset-limit",
       [](const std::string& f) {
         CHECK(plan_of({"-np", "2", "--min-np", "1", f, "2"})["elastic"]["reset_limit"] == 2);
       }},
      {"--ssh-identity-file", identity},
      {"-i", identity},
      {"--ssh-port", ssh_port},
      {"-p", ssh_port},
      {"--stall-check-shutdown-time-seconds",
       [](const std::string& f) {
         knob({f, "90"}, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90");
       }},
      {"--stall-check-warning-time-seconds",
       [](const std::string& f) {
         knob({f, "30"}, "HOROVOD_STALL_CHECK_TIME_SECONDS", "30");
       }},
      {"--start-timeout",
       [](const std::string& f) {
         // Its effect (a start-up past it exits 75 naming the phase) is tested over the sshd
         // hosts (tests/e2e/test_launch_ssh.cpp); here: it is taken, and checked.
         CHECK(plan_of({f, "12"})["np"] == 1);
         usage_error({f, "0", "./train"}, "--start-timeout 0");
       }},
      {"--tcp", [](const std::string& f) { knob({f}, "NCCL_IB_DISABLE", "1"); }},
      {"--thread-affinity",
       [](const std::string& f) {
         knob({f, "0,1"}, "HOROVOD_THREAD_AFFINITY", "0,1", "libhvd does not pin");
         usage_error({f, "a,b", "./train"}, "--thread-affinity a,b");
       }},
      {"--timeline-filename",
       [](const std::string& f) {
         knob({f, "/tmp/tl.json"}, "HOROVOD_TIMELINE", "/tmp/tl.json");
       }},
      {"--timeline-mark-cycles",
       [](const std::string& f) {
         knob({f, "--timeline-filename", "/tmp/tl.json"}, "HOROVOD_TIMELINE_MARK_CYCLES", "1");
         const json without = plan_of({f});
         CHECK_FALSE(without["ranks"][0]["env"].contains("HOROVOD_TIMELINE_MARK_CYCLES"));
         CHECK_THAT(warnings_of(without),
                    ContainsSubstring("has no effect without --timeline-filename"));
       }},
      {"--verbose",
       [](const std::string& f) {
         const RunResult r = run_hvdrun({"--dry-run", f, "./train"});
         INFO(show(r));
         CHECK(r.exit_code == kSuccess);
         CHECK_THAT(r.out, ContainsSubstring("rank 0 environment:"));
       }},
      {"--version",
       [](const std::string& f) {
         const RunResult r = run_hvdrun({f});
         CHECK(r.exit_code == kSuccess);
         CHECK_THAT(r.out, StartsWith("hvdrun "));
       }},
      {"-v",
       [](const std::string& f) {
         const RunResult r = run_hvdrun({f});
         CHECK(r.exit_code == kSuccess);
         CHECK_THAT(r.out, StartsWith("hvdrun "));
         // An old `hvdrun -v -np 4 ./train` must not print a version and exit 0.
         usage_error({f, "-np", "2", "./train"}, "use --verbose");
       }},
  };
  return table;
}

}  // namespace

TEST_CASE("horovodrun flags: the list from the reference file is read whole", "[cli]") {
  const auto flags = horovodrun_flags();
  CHECK(flags.size() >= 60);
  for (const std::string& flag : flags) {
    INFO(flag << " is in tests/cli/horovodrun_flags.txt but has no check here");
    CHECK(checks().count(flag) == 1);
  }
}

TEST_CASE("horovodrun flags: every one has its effect, its warning or its refusal", "[cli]") {
  for (const std::string& flag : horovodrun_flags()) {
    const auto check = checks().find(flag);
    if (check == checks().end()) continue;  // the test above fails for it
    INFO("flag " << flag);
    check->second(flag);
  }
}
