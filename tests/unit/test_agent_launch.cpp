// The agent launches (launcher/native/agent_launch.h): their table and the choice among them,
// what each says it would run, and --rsh-agent's template and address choice (pure parts; the
// real commands run in tests/e2e/rsh_agent_check.sh).
#include <cstdlib>
#include <set>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "common/error.h"
#include "launcher/native/agent_launch.h"
#include "launcher/native/rsh_launch.h"
#include "launcher/plan/plan.h"
#include "launcher_fixture.h"

using Catch::Matchers::ContainsSubstring;
using namespace hvd::launcher;
using hvd::agent::NetInterface;
using hvd::test::launch_options;
using hvd::test::plan_on;

namespace {

std::string usage_error(const std::string& text) {
  try {
    parse_rsh_template(text);
  } catch (const hvd::UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

NetInterface iface(const std::string& name, std::vector<std::string> ipv4, bool loopback = false) {
  NetInterface i;
  i.name = name;
  i.ipv4 = std::move(ipv4);
  i.up = true;
  i.loopback = loopback;
  return i;
}

}  // namespace

TEST_CASE("agent launches: one table, each with its capabilities", "[launcher]") {
  std::set<std::string> names;
  for (const AgentLaunchEntry& e : agent_launches()) {
    names.insert(std::string(e.name));
    CHECK_FALSE(e.summary.empty());
  }
  CHECK(names == std::set<std::string>{"ssh", "srun", "rsh"});
  for (const AgentLaunchEntry& e : agent_launches()) {
    // srun cannot start a joining host's agent mid-job: elastic through it is refused.
    CHECK(e.elastic == (e.name != "srun"));
  }
}

TEST_CASE("agent launches: --rsh-agent, --launcher, and auto's choice", "[launcher]") {
  ::unsetenv("SLURM_JOB_ID");
  LaunchOptions o = launch_options();
  CHECK(choose_agent_launch(o, plan_on("a,b")).name == "ssh");  // auto, outside Slurm
  o.rsh_agent = "kubectl exec -i {host} --";
  CHECK(choose_agent_launch(o, plan_on("a,b")).name == "rsh");
  o.rsh_agent.reset();
  o.agent_launch = "srun";
  try {
    choose_agent_launch(o, plan_on("a,b"));
    FAIL("srun outside an allocation must be refused");
  } catch (const hvd::UsageError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("--launcher srun: not inside a Slurm allocation"));
  }
  ::setenv("SLURM_JOB_ID", "7", 1);
  CHECK(choose_agent_launch(o, plan_on("a,b")).name == "srun");
  o.agent_launch = "ssh";
  CHECK(choose_agent_launch(o, plan_on("a,b", "slurm")).name == "ssh");
  ::unsetenv("SLURM_JOB_ID");
}

TEST_CASE("rsh template: words as a shell splits them, nothing expanded", "[launcher]") {
  CHECK(parse_rsh_template("kubectl exec -i {host} --").words ==
        std::vector<std::string>{"kubectl", "exec", "-i", "{host}", "--"});
  CHECK(parse_rsh_template("kubectl exec -i {host} --").names_host);
  CHECK_FALSE(parse_rsh_template("  rsh  ").names_host);
  CHECK(parse_rsh_template(R"(a 'b c' "d \"e\" \\f" g\ h $HOME)").words ==
        std::vector<std::string>{"a", "b c", R"(d "e" \f)", "g h", "$HOME"});
  CHECK(parse_rsh_template("x '' y").words == std::vector<std::string>{"x", "", "y"});
  // Braces that are not a placeholder belong to the command.
  CHECK(parse_rsh_template("sh -c {} {1}").words ==
        std::vector<std::string>{"sh", "-c", "{}", "{1}"});
}

TEST_CASE("rsh template: bad input is a usage error that says what", "[launcher]") {
  CHECK_THAT(usage_error(""), ContainsSubstring("the template is empty"));
  CHECK_THAT(usage_error(" \t "), ContainsSubstring("the template is empty"));
  CHECK_THAT(usage_error("kubectl exec '{host}"),
             ContainsSubstring("unbalanced quotes: a ' is not closed"));
  CHECK_THAT(usage_error("kubectl \"exec"),
             ContainsSubstring("unbalanced quotes: a \" is not closed"));
  CHECK_THAT(usage_error("kubectl exec \\"), ContainsSubstring("it ends with a backslash"));
  CHECK_THAT(usage_error("kubectl exec {pod} --"),
             ContainsSubstring(
                 "unknown placeholder {pod}: the placeholders are {host}, {user} and {port}"));
  CHECK_THAT(usage_error("kubectl exec {pod} --"),
             ContainsSubstring("--rsh-agent 'kubectl exec {pod} --'"));
}

TEST_CASE("rsh argv: placeholders replaced inside words, the host appended without one",
          "[launcher]") {
  const RshTemplate kube = parse_rsh_template("kubectl exec -i {host} --");
  CHECK(rsh_agent_argv(kube, "pod-1", "me", 22, "/opt/hvdrun") ==
        std::vector<std::string>{"kubectl", "exec", "-i", "pod-1", "--", "/opt/hvdrun", "--agent"});
  const RshTemplate rsh = parse_rsh_template("rsh -l {user} -p{port}");
  CHECK(rsh_agent_argv(rsh, "n1", "ann", 2222, "/opt/hvdrun") ==
        std::vector<std::string>{"rsh", "-l", "ann", "-p2222", "n1", "/opt/hvdrun", "--agent"});
  const RshTemplate twice = parse_rsh_template("ssh {host}.{host}.lan");
  CHECK(rsh_agent_argv(twice, "h", "u", 1, "a") ==
        std::vector<std::string>{"ssh", "h.h.lan", "a", "--agent"});
}

TEST_CASE("rsh launch: the dry run shows each host's exact argv, local hosts stay children",
          "[launcher]") {
  LaunchOptions o = launch_options();
  o.rsh_agent = "kubectl exec -i {host} --";
  const Plan plan = plan_on("pod-a:1,localhost:1");
  const auto commands = choose_agent_launch(o, plan).make(o)->describe(plan);
  REQUIRE(commands.size() == 2);
  CHECK_THAT(commands[0].where, ContainsSubstring("on pod-a through --rsh-agent"));
  CHECK(commands[0].argv == std::vector<std::string>{"kubectl", "exec", "-i", "pod-a", "--",
                                                     "/opt/hvd/bin/hvdrun", "--agent"});
  CHECK_THAT(commands[1].where, ContainsSubstring("as a local child"));
}

TEST_CASE("rsh addresses: where a host's ranks listen and reach the launcher", "[launcher]") {
  const std::vector<NetInterface> ours{iface("lo", {"127.0.0.1"}, true),
                                       iface("eth0", {"10.231.0.1"})};
  const std::vector<OwnNetwork> nets{{"lo", "127.0.0.1", 8}, {"eth0", "10.231.0.1", 24}};
  const NetworkChoice none;

  SECTION("a host name that is an address: that address, and ours on its network") {
    const AgentAddresses a = choose_rsh_addresses("10.231.0.7", {}, ours, nets, none);
    CHECK(a.reached_at == "10.231.0.7");
    CHECK(a.launcher_address == "10.231.0.1");
  }
  SECTION("an agent in our own network namespace: loopback both ways") {
    const AgentAddresses a = choose_rsh_addresses("pod-a", ours, ours, nets, none);
    CHECK(a.reached_at == "127.0.0.1");
    CHECK(a.launcher_address == "127.0.0.1");
  }
  SECTION("a namespace or a pod: its first address on a network of ours") {
    const std::vector<NetInterface> theirs{iface("lo", {"127.0.0.1"}, true),
                                           iface("island0", {"10.233.1.1"}),
                                           iface("eth0", {"10.231.0.2"})};
    const AgentAddresses a = choose_rsh_addresses("ns-h1", theirs, ours, nets, none);
    CHECK(a.reached_at == "10.231.0.2");
    CHECK(a.launcher_address == "10.231.0.1");
  }
  SECTION("--network-cidr decides where the ranks listen") {
    NetworkChoice cidr;
    cidr.cidr = parse_cidr("10.232.0.0/24");
    const std::vector<NetInterface> theirs{iface("eth0", {"10.231.0.2"}),
                                           iface("data0", {"10.232.0.2"})};
    const AgentAddresses a = choose_rsh_addresses("ns-h1", theirs, ours, nets, cidr);
    CHECK(a.reached_at == "10.232.0.2");
    CHECK(a.launcher_address == "10.231.0.1");  // not on that network: our first address
  }
  SECTION("no shared network: an error that names both sides and what to do") {
    const std::vector<NetInterface> theirs{iface("eth0", {"192.168.9.2"})};
    try {
      choose_rsh_addresses("pod-x", theirs, ours, nets, none);
      FAIL("no address in common must be refused");
    } catch (const hvd::Error& e) {
      CHECK(e.kind() == hvd::ErrorKind::kNetCheck);
      CHECK_THAT(e.what(), ContainsSubstring("pod-x: none of the addresses its agent reports"));
      CHECK_THAT(e.what(), ContainsSubstring("192.168.9.2"));
      CHECK_THAT(e.what(), ContainsSubstring("eth0 10.231.0.1/24"));
      CHECK_THAT(e.hint(), ContainsSubstring("--network-cidr"));
    }
  }
}
