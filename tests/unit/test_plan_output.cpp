#include <nlohmann/json.hpp>
#include "tests/support/catch.h"

#include "launcher/core/json_text.h"
#include "launcher/core/plan_output.h"

using namespace hvd::launcher;
using nlohmann::json;

namespace {

Plan sample_plan(std::vector<std::string> command = {"./train", "--lr", "0.1"}) {
  PlanRequest r;
  r.hosts = parse_host_list("localhost:1,127.0.0.2:2");
  r.default_user = "me";
  r.ssh_port = 2222;
  r.forward = {parse_forward_spec("SECRET_KEY=hunter2")};
  r.command = std::move(command);
  r.job_id = "j";
  return make_plan(r, LocalIdentity{"box", {"127.0.0.1"}}, {{"PATH", "/bin"}});
}

}  // namespace

TEST_CASE("plan JSON: schema 1 with hosts, ranks, env and command", "[output]") {
  const json doc = json(plan_json(sample_plan(), {}));
  CHECK(doc["schema_version"] == 1);
  CHECK(doc["command"] == json({"./train", "--lr", "0.1"}));
  CHECK(doc["np"] == 3);
  REQUIRE(doc["ranks"].size() == 3);
  const json& r2 = doc["ranks"][2];
  CHECK(r2["rank"] == 2);
  CHECK(r2["host"] == "127.0.0.2");
  CHECK(r2["local"] == false);
  CHECK(r2["local_rank"] == 1);
  CHECK(r2["local_size"] == 2);
  CHECK(r2["cross_rank"] == 0);
  CHECK(r2["cross_size"] == 1);
  CHECK(r2["env"]["HOROVOD_RANK"] == "2");
  CHECK(r2["env"]["PATH"] == "/bin");
  CHECK(doc["hosts"][0]["local"] == true);
  CHECK(doc["hosts"][0]["ssh"].is_null());
  CHECK(doc["hosts"][1]["ssh"] == json({{"user", "me"}, {"port", 2222}}));
}

TEST_CASE("plan JSON: -x values and the token are redacted, deferred values say so", "[output]") {
  const std::string text = json_text(plan_json(sample_plan(), {}));
  CHECK(text.find("hunter2") == std::string::npos);
  const json doc = json::parse(text);
  const json& env = doc["ranks"][0]["env"];
  CHECK(env["SECRET_KEY"] == "<redacted>");
  CHECK(env["HVD_RENDEZVOUS_TOKEN"] == "<redacted>");
  CHECK(env["MASTER_PORT"] == "<set at launch: a free port on rank 0's host>");
  CHECK(env["MASTER_ADDR"] ==
        "<set at launch: the launcher's address as the other hosts reach it>");

  const json shown = json(plan_json(sample_plan(), {.show_env_values = true}));
  CHECK(shown["ranks"][0]["env"]["SECRET_KEY"] == "hunter2");
  CHECK(shown["ranks"][0]["env"]["HVD_RENDEZVOUS_TOKEN"] == "<redacted>");
}

TEST_CASE("plan JSON: non-UTF-8 bytes do not break the document", "[output]") {
  const json doc = json::parse(json_text(plan_json(sample_plan({"./x", "caf\xe9"}), {})));
  CHECK(doc["command"][1] == "caf\xef\xbf\xbd");  // U+FFFD
}

TEST_CASE("plan table: header, one row per rank, ssh target", "[output]") {
  const std::string table = format_plan_table(sample_plan(), {});
  CHECK_THAT(table, Catch::Matchers::StartsWith(
                        "hvdrun dry run: 3 ranks on 2 hosts (3 slots); nothing is started.\n"
                        "command: ./train --lr 0.1\n"));
  CHECK_THAT(table, Catch::Matchers::ContainsSubstring(
                        " rank  host       where   local_rank  local_size  cross_rank  "
                        "cross_size  ssh\n"
                        "    0  localhost  local            0           1           0"
                        "           2  - (local)\n"
                        "    1  127.0.0.2  remote           0           2           1"
                        "           2  me@127.0.0.2:2222\n"));
  CHECK(table.find("SECRET_KEY=") == std::string::npos);
  const std::string verbose = format_plan_table(sample_plan(), {.show_env = true});
  CHECK_THAT(verbose, Catch::Matchers::ContainsSubstring("  SECRET_KEY=<redacted>\n"));
  CHECK_THAT(verbose, Catch::Matchers::ContainsSubstring("  HOROVOD_RANK=2\n"));
}
