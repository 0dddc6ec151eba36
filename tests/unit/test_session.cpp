// The run session's checks and dry run (launcher/core/session.h) over the real registry's
// launchers, and the registry's flags and refusals, which the CLI's option checks read.
#include <set>
#include <string>
#include "tests/support/catch.h"

#include "common/error.h"
#include "launcher/core/session.h"
#include "launcher/registry.h"

using Catch::Matchers::ContainsSubstring;
using namespace hvd::launcher;

namespace {

SessionOptions session_on(const std::string& hosts, int np, const std::string& launcher) {
  SessionOptions s;
  s.request.hosts = parse_host_list(hosts);
  s.request.num_proc = np;
  s.request.default_user = "me";
  s.request.command = {"./train"};
  s.request.job_id = "first";
  s.launch.cwd = "/work";
  s.launch.hvdrun_path = "/opt/hvd/bin/hvdrun";
  s.launch.ssh.agent_path = "/opt/hvd/bin/hvdrun";
  s.launch.agent_launch = "ssh";
  s.make_launcher = [launcher](LaunchOptions o) { return make_launcher(launcher, std::move(o)); };
  s.new_job_id = [] { return std::string("next"); };
  return s;
}

std::string usage_error_of(SessionOptions s) {
  try {
    Session session(std::move(s));
  } catch (const hvd::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("session: elastic sizes and --output-ranks are checked against the first plan",
          "[session]") {
  SessionOptions min_above = session_on("localhost:4", 2, "native");
  min_above.launch.elastic = ElasticOptions{.min_np = 3};
  CHECK_THAT(usage_error_of(min_above), ContainsSubstring("--min-np 3 is more than the 2 ranks"));

  SessionOptions max_below = session_on("localhost:4", 3, "native");
  max_below.launch.elastic = ElasticOptions{.min_np = 1, .max_np = 2};
  CHECK_THAT(usage_error_of(max_below), ContainsSubstring("--max-np 2 is less than the 3 ranks"));

  SessionOptions shown = session_on("localhost:4", 2, "native");
  shown.launch.line_format.ranks = std::vector<int>{0, 2};
  CHECK_THAT(usage_error_of(shown),
             ContainsSubstring("the job has no rank 2 (its ranks are 0 to 1)"));

  // An elastic job may grow into more ranks: the same list is accepted.
  SessionOptions growing = session_on("localhost:4", 2, "native");
  growing.launch.elastic = ElasticOptions{.min_np = 1};
  growing.launch.line_format.ranks = std::vector<int>{0, 2};
  CHECK(usage_error_of(growing).empty());
}

TEST_CASE("session: the launcher's own check runs before anything is said", "[session]") {
  // srun outside an allocation: the native launcher refuses it in check().
  SessionOptions s = session_on("localhost:2", 2, "native");
  s.launch.agent_launch = "srun";
  CHECK_FALSE(usage_error_of(s).empty());
}

TEST_CASE("session: the first attempt's plan and the dry run's rules", "[session]") {
  SessionOptions s = session_on("localhost:4", 2, "native");
  s.restarts = {.max_restarts = 2, .backoff_seconds = 45};
  s.warnings = {"from the CLI"};
  Session session(std::move(s));
  const Plan& plan = session.plan();
  CHECK(plan.job_id == "first");
  REQUIRE(plan.warnings.size() >= 2);
  CHECK(plan.warnings.front() == "from the CLI");
  CHECK_THAT(plan.warnings.back(),
             ContainsSubstring("--restart-backoff 45: a wait is at most 30 s"));
  // Restarts on: torchrun's variables on every rank, the run id the first job id.
  bool run_id = false;
  for (const EnvEntry& e : plan.ranks.front().env) {
    if (e.name == "TORCHELASTIC_RUN_ID") run_id = e.value == "first";
  }
  CHECK(run_id);
  const auto doc = session.describe_json({});
  CHECK(doc["mode"] == "native");
  CHECK(doc["restarts"]["max_restarts"] == 2);
  CHECK(doc["restarts"]["backoff_seconds"] == 30.0);  // capped
  CHECK_FALSE(doc.contains("elastic"));
  CHECK_THAT(session.describe_text({}), ContainsSubstring("restarts: up to 2"));
}

TEST_CASE("session: the elastic rules as the flags gave them", "[session]") {
  SessionOptions s = session_on("localhost:4", 2, "native");
  s.launch.elastic = ElasticOptions{.min_np = 1, .reset_limit = 3};
  Session session(std::move(s));
  const auto doc = session.describe_json({});
  CHECK(doc["elastic"]["min_np"] == 1);
  CHECK(doc["elastic"]["max_np"].is_null());  // no limit, as horovodrun
  CHECK(doc["elastic"]["reset_limit"] == 3);
  CHECK(doc["elastic"]["elastic_timeout_seconds"] == kDefaultElasticTimeoutSeconds);
  CHECK_THAT(session.describe_text({}),
             ContainsSubstring("grows onto the hosts' 2 free slots at once") &&
                 ContainsSubstring("at most 3 such changes (--reset-limit)"));
}

TEST_CASE("registry: each launcher's flags and what it refuses", "[launcher]") {
  std::set<std::string> flags;
  for (const LauncherEntry& e : launchers()) {
    CHECK_FALSE(e.flags.empty());
    for (const LauncherFlag& f : e.flags) {
      CHECK(f.name.substr(0, 2) == "--");
      CHECK(flags.insert(std::string(f.name)).second);  // no flag chooses two launchers
    }
    for (const Refusal& r : e.refusals) CHECK_FALSE(r.what.empty());
  }
  CHECK(flags.count("--mpi") == 1);
  CHECK(refusal("native", Capability::kElastic) == nullptr);
  CHECK(refusal("mpirun", Capability::kElastic) != nullptr);
  CHECK(refusal("native", Capability::kMpiArgs) != nullptr);
  CHECK(refusal("mpirun", Capability::kMpiArgs) == nullptr);
  CHECK_NOTHROW(require("native", Capability::kGpusPerRank));
  try {
    require("mpirun", Capability::kRshUserPort, "kubectl exec -i {host} -u {user}");
    FAIL("mpirun must refuse {user} in --rsh-agent");
  } catch (const hvd::UsageError& e) {
    CHECK_THAT(e.what(),
               ContainsSubstring("--mpi --rsh-agent 'kubectl exec -i {host} -u {user}'") &&
                   ContainsSubstring("{user} and {port} cannot be filled in"));
    CHECK_FALSE(e.hint().empty());
  }
}
