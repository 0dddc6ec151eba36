// The agent launches (launcher/native/agent_launch.h): their table and the choice among them,
// what each says it would run, and --rsh-agent's template and address choice (pure parts; the
// real commands run in tests/e2e/rsh_agent_check.sh).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/native/agent_launch.h"
#include "launcher/plan/plan.h"

using Catch::Matchers::Contains;
using namespace hvd::launcher;

namespace {

Plan plan_on(const std::string& hosts, const std::string& origin = "-H") {
  PlanRequest r;
  r.hosts = parse_host_list(hosts);
  r.hosts_origin = {origin, ""};
  r.default_user = "me";
  r.command = {"./train"};
  r.job_id = "j";
  return make_plan(r, LocalIdentity{"box", {"127.0.0.1"}}, {{"PATH", "/bin"}});
}

LaunchOptions options() {
  LaunchOptions o;
  o.cwd = "/work";
  o.hvdrun_path = "/opt/hvd/bin/hvdrun";
  o.ssh.agent_path = "/opt/hvd/bin/hvdrun";
  return o;
}

}  // namespace

TEST_CASE("agent launches: one table, each with its capabilities", "[launcher]") {
  std::set<std::string> names;
  for (const AgentLaunchEntry& e : agent_launches()) {
    names.insert(std::string(e.name));
    CHECK_FALSE(e.summary.empty());
  }
  CHECK(names == std::set<std::string>{"ssh", "srun"});
  for (const AgentLaunchEntry& e : agent_launches()) {
    // srun cannot start a joining host's agent mid-job: elastic through it is refused.
    CHECK(e.elastic == (e.name != "srun"));
  }
}

TEST_CASE("agent launches: --launcher, and auto's choice", "[launcher]") {
  ::unsetenv("SLURM_JOB_ID");
  LaunchOptions o = options();
  CHECK(choose_agent_launch(o, plan_on("a,b")).name == "ssh");  // auto, outside Slurm
  o.agent_launch = "srun";
  try {
    choose_agent_launch(o, plan_on("a,b"));
    FAIL("srun outside an allocation must be refused");
  } catch (const hvd::UsageError& e) {
    CHECK_THAT(e.what(), Contains("--launcher srun: not inside a Slurm allocation"));
  }
  ::setenv("SLURM_JOB_ID", "7", 1);
  CHECK(choose_agent_launch(o, plan_on("a,b")).name == "srun");
  o.agent_launch = "ssh";
  CHECK(choose_agent_launch(o, plan_on("a,b", "slurm")).name == "ssh");
  ::unsetenv("SLURM_JOB_ID");
}
