// hvdrun --rank-shim's pure part (launcher/mpirun/rank_shim.h): Open MPI's per-rank variables and
// the plan's layout become the contract a native launch sets; a broken contract is named. And the
// mpirun command that puts the shim in front of the user's command.
#include <algorithm>
#include <map>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "common/error.h"
#include "launcher/mpirun/mpi_command.h"
#include "launcher/mpirun/rank_shim.h"

using hvd::launcher::rank_shim_env;
using Vars = std::map<std::string, std::string>;

namespace {

Vars shim(const Vars& env) {
  Vars out;
  for (auto& [name, value] : rank_shim_env([&](const char* n) -> const char* {
         const auto it = env.find(n);
         return it == env.end() ? nullptr : it->second.c_str();
       })) {
    CHECK(out.count(name) == 0);  // each name once
    out[name] = value;
  }
  return out;
}

Vars mpi_rank(int rank, int size, int local_rank, const std::string& layout = "1,2",
              const std::string& hosts = "w0,w1") {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"HVD_RANK_LAYOUT", layout},
          {"HVD_RANK_HOSTS", hosts}};
}

std::string error_of(const Vars& env) {
  try {
    shim(env);
  } catch (const hvd::ContractError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("rank shim: Open MPI's rank becomes hvdrun's whole rank contract", "[mpi]") {
  // -np 3 -H w0:1,w1:2: rank 2 is w1's second rank.
  const Vars v = shim(mpi_rank(2, 3, 1));
  const Vars want{{"HOROVOD_RANK", "2"},       {"HOROVOD_SIZE", "3"},
                  {"HOROVOD_LOCAL_RANK", "1"}, {"HOROVOD_LOCAL_SIZE", "2"},
                  {"HOROVOD_CROSS_RANK", "0"}, {"HOROVOD_CROSS_SIZE", "1"},
                  {"HOROVOD_HOSTNAME", "w1"},  {"RANK", "2"},
                  {"WORLD_SIZE", "3"},         {"LOCAL_RANK", "1"},
                  {"LOCAL_WORLD_SIZE", "2"},   {"GROUP_RANK", "1"},
                  {"GROUP_WORLD_SIZE", "2"},   {"ROLE_RANK", "2"},
                  {"ROLE_WORLD_SIZE", "3"},    {"ROLE_NAME", "default"},
                  {"OMP_NUM_THREADS", "1"},    {"PYTHONUNBUFFERED", "1"}};
  CHECK(v == want);
  // Rank 0 is alone on w0: no OMP_NUM_THREADS; a user's PYTHONUNBUFFERED is left alone.
  Vars env = mpi_rank(0, 3, 0);
  env["PYTHONUNBUFFERED"] = "0";
  const Vars zero = shim(env);
  CHECK(zero.at("HOROVOD_HOSTNAME") == "w0");
  CHECK(zero.at("HOROVOD_CROSS_SIZE") == "2");
  CHECK(zero.count("OMP_NUM_THREADS") == 0);
  CHECK(zero.count("PYTHONUNBUFFERED") == 0);
  Vars omp = mpi_rank(1, 3, 0);
  omp["OMP_NUM_THREADS"] = "8";
  CHECK(shim(omp).count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("rank shim: a missing or broken input is named, never guessed", "[mpi]") {
  Vars no_rank = mpi_rank(0, 3, 0);
  no_rank.erase("OMPI_COMM_WORLD_RANK");
  CHECK_THAT(error_of(no_rank),
             Catch::Matchers::ContainsSubstring("OMPI_COMM_WORLD_RANK is not set"));
  CHECK_THAT(
      error_of(mpi_rank(0, 3, 0, "1,x")),
      Catch::Matchers::ContainsSubstring("HVD_RANK_LAYOUT='1,x' is not a list of rank counts"));
  CHECK_THAT(error_of(mpi_rank(0, 3, 0, "")),
             Catch::Matchers::ContainsSubstring("HVD_RANK_LAYOUT='' is not a list"));
  CHECK_THAT(
      error_of(mpi_rank(0, 3, 0, "1,2", "w0")),
      Catch::Matchers::ContainsSubstring("HVD_RANK_HOSTS names 1 hosts, HVD_RANK_LAYOUT has 2"));
  // mpirun's own options changed the job: more ranks, or a rank on another slot.
  CHECK_THAT(
      error_of(mpi_rank(3, 4, 0)),
      Catch::Matchers::ContainsSubstring("mpirun started rank 3 of 4, but hvdrun planned 3 ranks"));
  CHECK_THAT(
      error_of(mpi_rank(2, 3, 0)),
      Catch::Matchers::ContainsSubstring("mpirun placed rank 2 as local rank 0 on its host; hvdrun "
                                         "planned local rank 1 on w1"));
  Vars negative = mpi_rank(0, 3, 0);
  negative["OMPI_COMM_WORLD_LOCAL_RANK"] = "-1";
  CHECK_THAT(error_of(negative), Catch::Matchers::ContainsSubstring(
                                     "OMPI_COMM_WORLD_LOCAL_RANK='-1' is not a non-negative"));
}

TEST_CASE("mpirun argv: the shim goes in front of the command, its inputs by name", "[mpi]") {
  using namespace hvd::launcher;
  PlanRequest r;
  r.hosts = parse_host_list("127.0.0.2:2,127.0.0.3:1");
  r.default_user = "root";
  r.command = {"./train", "--epochs", "3"};
  const Plan plan = make_plan(r, LocalIdentity{"box", {"127.0.0.1"}}, {});
  MpiCommandInput in;
  in.cwd = "/shared";
  in.host_addresses = {"127.0.0.2", "127.0.0.3"};
  in.shim = "/opt/hvd/bin/hvdrun";
  in.shim_env = shim_environment(plan, "127.0.0.2", "29500");
  CHECK(in.shim_env ==
        std::vector<std::pair<std::string, std::string>>{{"HVD_RANK_LAYOUT", "2,1"},
                                                         {"HVD_RANK_HOSTS", "127.0.0.2,127.0.0.3"},
                                                         {"MASTER_ADDR", "127.0.0.2"},
                                                         {"MASTER_PORT", "29500"}});
  const std::vector<std::string> argv = mpirun_argv(plan, in);
  CHECK(std::vector<std::string>(argv.end() - 6, argv.end()) ==
        std::vector<std::string>{"/opt/hvd/bin/hvdrun", "--rank-shim", "--", "./train", "--epochs",
                                 "3"});
  for (const char* name : {"HVD_RANK_LAYOUT", "HVD_RANK_HOSTS", "MASTER_ADDR", "MASTER_PORT"}) {
    INFO(name);
    const auto at = std::find(argv.begin(), argv.end(), name);
    REQUIRE(at != argv.end());
    CHECK(*(at - 1) == "-x");  // the value stays in mpirun's environment
  }
  for (const std::string& word : argv) CHECK(word.find("29500") == std::string::npos);
}
