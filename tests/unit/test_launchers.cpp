// The launcher registry, what each launcher says it would run (--dry-run), the deferred values
// of a plan resolved at launch, and the rendezvous protocol both sides read.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include "tests/support/catch.h"

#include "contract/rendezvous.h"
#include "launcher/core/launcher.h"
#include "launcher/native/job_specs.h"
#include "launcher/native/srun_agents.h"
#include "launcher/plan/plan.h"
#include "launcher/registry.h"
#include "launcher_fixture.h"

using Catch::Matchers::ContainsSubstring;
using namespace hvd::launcher;
using hvd::test::launch_options;
using hvd::test::plan_on;

TEST_CASE("registry: every launcher by its name, an unknown name lists them", "[launcher]") {
  std::set<std::string> names;
  for (const LauncherEntry& e : launchers()) {
    names.insert(std::string(e.name));
    CHECK(make_launcher(e.name, launch_options())->name() == e.name);
    CHECK_FALSE(e.summary.empty());
  }
  CHECK(names == std::set<std::string>{"native", "mpirun"});
  try {
    make_launcher("srun", launch_options());
    FAIL("an unknown launcher must be refused");
  } catch (const hvd::UsageError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("no launcher called 'srun'"));
    CHECK_THAT(e.hint(), ContainsSubstring("native, mpirun"));
  }
}

TEST_CASE("srun agents: hvdrun-agent beside hvdrun when it is there, else hvdrun", "[launcher]") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("hvd_unit_srun_agent_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string hvdrun = (dir / "hvdrun").string();
  const fs::path lean = dir / "hvdrun-agent";
  CHECK(srun_agent_program(hvdrun) == hvdrun);  // not there
  std::ofstream(lean) << "#!/bin/sh\n";
  fs::permissions(lean, fs::perms::owner_read | fs::perms::owner_write);
  CHECK(srun_agent_program(hvdrun) == hvdrun);  // there but not executable
  fs::permissions(lean, fs::perms::owner_all);
  CHECK(srun_agent_program(hvdrun) == lean.string());
  CHECK(srun_agent_program("hvdrun") == "hvdrun");  // no folder to look in
  fs::remove_all(dir);
}

TEST_CASE("native describe: the agent command per host, local or over SSH", "[launcher]") {
  const auto commands =
      make_launcher("native", launch_options())->describe(plan_on("localhost,10.0.0.2"));
  REQUIRE(commands.size() == 2);
  CHECK(commands[0].argv == std::vector<std::string>{"/opt/hvd/bin/hvdrun", "--agent"});
  CHECK_THAT(commands[0].where, ContainsSubstring("local child"));
  CHECK(commands[1].argv == std::vector<std::string>{"exec", "/opt/hvd/bin/hvdrun", "--agent"});
  CHECK_THAT(commands[1].where, ContainsSubstring("me@10.0.0.2:22"));
}

TEST_CASE("mpirun describe: the exact argv, with what only the launch knows as placeholders",
          "[launcher]") {
  const auto remote =
      make_launcher("mpirun", launch_options())->describe(plan_on("10.0.0.2,10.0.0.3"));
  REQUIRE(remote.size() == 3);  // the network check's two agents, then mpirun
  const auto& argv = remote.back().argv;
  CHECK(argv.front() == "mpirun");
  const auto at = [&](const std::string& word) {
    const auto it = std::find(argv.begin(), argv.end(), word);
    REQUIRE(it != argv.end());
    REQUIRE(it + 1 != argv.end());
    return *(it + 1);
  };
  CHECK(at("-H") == "10.0.0.2:1,10.0.0.3:1");
  CHECK(at("btl").starts_with("<set at launch:"));
  CHECK(at("btl_tcp_if_include").starts_with("<set at launch:"));
  CHECK(argv.back() == "./train");

  // On this machine alone nothing is left to the launch.
  const auto local = make_launcher("mpirun", launch_options())->describe(plan_on("localhost:2"));
  REQUIRE(local.size() == 1);
  for (const std::string& w : local.front().argv) CHECK_FALSE(w.starts_with("<set at launch"));
}

TEST_CASE("a launcher's own options reach it through the registry, and only it", "[launcher]") {
  LauncherOptions own;
  own.mpirun.program = "/opt/ompi/bin/mpirun";
  own.mpirun.extra_args = {"--mca", "btl_tcp_port_min_v4", "40000"};
  own.mpirun.binding_args = std::vector<std::string>{"-bind-to", "core"};
  const auto argv =
      make_launcher("mpirun", launch_options(), own)->describe(plan_on("localhost:2")).back().argv;
  CHECK(argv.front() == "/opt/ompi/bin/mpirun");
  const auto has = [&](const std::vector<std::string>& words) {
    return std::search(argv.begin(), argv.end(), words.begin(), words.end()) != argv.end();
  };
  CHECK(has(own.mpirun.extra_args));
  CHECK(has({"-bind-to", "core"}));
  CHECK_FALSE(has({"-bind-to", "none"}));  // hvdrun's default binding is replaced
  // Without them: mpirun from PATH and hvdrun's binding.
  const auto plain =
      make_launcher("mpirun", launch_options())->describe(plan_on("localhost:2")).back().argv;
  CHECK(plain.front() == "mpirun");
  CHECK(std::search(plain.begin(), plain.end(), own.mpirun.extra_args.begin(),
                    own.mpirun.extra_args.end()) == plain.end());
  // The native launcher has no use for mpirun's: its command does not change.
  CHECK(make_launcher("native", launch_options(), own)
            ->describe(plan_on("localhost:2"))
            .front()
            .argv ==
        make_launcher("native", launch_options())->describe(plan_on("localhost:2")).front().argv);
}

TEST_CASE("deferred values: each kind is resolved from the launch's facts", "[launcher]") {
  LaunchFacts facts;
  facts.master_port = 29500;
  facts.launcher_address = "10.0.0.1";
  facts.launcher_address_of = {"10.0.0.1", "fd00::1"};
  facts.reached_at = {"10.0.0.2", ""};
  facts.rendezvous_port = 4000;
  facts.rendezvous_token = "t0k";
  CHECK(resolve_deferred(Deferred::kMasterAddr, 1, facts) == "10.0.0.2");
  CHECK(resolve_deferred(Deferred::kMasterPort, 1, facts) == "29500");
  CHECK(resolve_deferred(Deferred::kRendezvousAddr, 0, facts) == "10.0.0.1:4000");
  CHECK(resolve_deferred(Deferred::kRendezvousAddr, 1, facts) == "[fd00::1]:4000");
  CHECK(resolve_deferred(Deferred::kRendezvousToken, 0, facts) == "t0k");
  CHECK(resolve_deferred(Deferred::kAdvertiseAddr, 0, facts) == "10.0.0.2");
  CHECK(resolve_deferred(Deferred::kAdvertiseAddr, 1, facts) == "10.0.0.1");  // a local host
  facts.chosen = {{"192.168.1.2", "eth1"}, {"192.168.1.3", "ib0"}};
  CHECK(resolve_deferred(Deferred::kAdvertiseAddr, 1, facts) == "192.168.1.3");
  CHECK(resolve_deferred(Deferred::kMasterAddr, 1, facts) == "192.168.1.2");
  CHECK(resolve_deferred(Deferred::kInterfaceName, 1, facts) == "ib0");
}

TEST_CASE("rendezvous protocol: names, keys, paths and addresses", "[launcher]") {
  namespace rv = hvd::contract::rendezvous;
  CHECK(rv::valid_name("job.global_1-x"));
  CHECK_FALSE(rv::valid_name(""));
  CHECK_FALSE(rv::valid_name("a/b"));
  CHECK_FALSE(rv::valid_name(std::string(rv::kMaxName + 1, 'a')));
  CHECK(rv::encode_key("rank_3") == "rank_3");
  CHECK(rv::encode_key("a b") == "x-612062");
  CHECK(rv::valid_name(rv::encode_key(std::string("\0\xff/", 3))));
  CHECK(rv::key_path("s", "k/1") == "/s/x-6b2f31");
  CHECK(rv::bearer("abc") == "Bearer abc");
  CHECK(rv::join_address("10.0.0.1", 80) == "10.0.0.1:80");
  CHECK(rv::join_address("::1", 80) == "[::1]:80");
  CHECK(rv::split_address("[::1]:80") == std::pair<std::string, int>{"::1", 80});
  CHECK(rv::split_address("h:65535") == std::pair<std::string, int>{"h", 65535});
  for (const char* bad : {"h", "h:", ":80", "h:0", "h:65536", "h:8x"}) {
    INFO(bad);
    CHECK_FALSE(rv::split_address(bad).has_value());
  }
}
