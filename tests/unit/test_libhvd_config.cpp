// libhvd's read_config: the environment -> RuntimeConfig step of init(), strict about every value.
#include "tests/support/catch.h"

#include <map>
#include <string>

#include "allreduce/api/status_error.h"
#include "allreduce/runtime/config.h"
#include "common/error.h"
#include "hvd/hvd.hpp"

// ---- read_config ----

namespace {

using hvd::runtime::BackendKind;
using hvd::runtime::BuildFacts;
using hvd::runtime::read_config;
using hvd::runtime::RuntimeConfig;
using hvd::runtime::StartedBy;
using Env = std::map<std::string, std::string>;

constexpr BuildFacts kBoth{.has_mpi = true, .has_gloo = true};
constexpr BuildFacts kGlooOnly{.has_mpi = false, .has_gloo = true};
constexpr BuildFacts kMpiOnly{.has_mpi = true, .has_gloo = false};
constexpr BuildFacts kNeither{};

hvd::contract::EnvGetter getter_for(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

RuntimeConfig config_of(const Env& env, BuildFacts build = kBoth) {
  return read_config(getter_for(env), build);
}

struct Failure {
  hvd_status status = HVD_OK;  // HVD_OK: read_config did not throw
  std::string what;
  std::string hint;
};

Failure failure_of(const Env& env, BuildFacts build = kBoth) {
  try {
    read_config(getter_for(env), build);
  } catch (const hvd::runtime::StatusError& e) {
    return {e.status(), e.what(), e.hint()};
  }
  return {};
}

Env native_env() {
  return {{"HVD_RENDEZVOUS_ADDR", "10.0.0.1:4000"},
          {"HVD_RENDEZVOUS_TOKEN", "tok-123"},
          {"HVD_JOB_ID", "job-7"},
          {"HVD_ADVERTISE_ADDR", "10.0.0.2"},
          {"HOROVOD_RANK", "3"},
          {"HOROVOD_SIZE", "4"},
          {"HOROVOD_LOCAL_RANK", "1"},
          {"HOROVOD_LOCAL_SIZE", "2"},
          {"HOROVOD_CROSS_RANK", "1"},
          {"HOROVOD_CROSS_SIZE", "2"}};
}

Env mpirun_env() { return {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "1"}}; }

}  // namespace

TEST_CASE("read_config: a process on its own", "[libhvd]") {
  const auto c = config_of({}, kBoth);
  CHECK(c.started_by == StartedBy::kNone);
  CHECK(c.backend == BackendKind::kGloo);
  CHECK(c.advertise_addr == "127.0.0.1");
  CHECK(c.topology == hvd::contract::RankTopology{});
  CHECK(c.topology.size == 1);
  CHECK(c.gloo_timeout == std::chrono::seconds(30));
  CHECK(c.log_level == "warning");
  CHECK(c.rendezvous_addr.empty());

  CHECK(config_of({}, kGlooOnly).backend == BackendKind::kGloo);
  const auto m = config_of({}, kMpiOnly);
  CHECK(m.backend == BackendKind::kMpi);
  CHECK(m.started_by == StartedBy::kNone);
  CHECK(m.advertise_addr == "127.0.0.1");

  // A size-1 HOROVOD_* topology alone is fine.
  const auto one = config_of({{"HOROVOD_RANK", "0"},
                              {"HOROVOD_SIZE", "1"},
                              {"HOROVOD_LOCAL_RANK", "0"},
                              {"HOROVOD_LOCAL_SIZE", "1"},
                              {"HOROVOD_CROSS_RANK", "0"},
                              {"HOROVOD_CROSS_SIZE", "1"}});
  CHECK(one.started_by == StartedBy::kNone);
}

TEST_CASE("read_config: under mpirun", "[libhvd]") {
  const auto c = config_of(mpirun_env(), kBoth);
  CHECK(c.started_by == StartedBy::kMpirun);
  CHECK(c.backend == BackendKind::kMpi);
  CHECK(c.rendezvous_addr.empty());
  CHECK(config_of(mpirun_env(), kMpiOnly).backend == BackendKind::kMpi);
  auto env = mpirun_env();
  env["HOROVOD_CPU_OPERATIONS"] = "MPI";
  CHECK(config_of(env).backend == BackendKind::kMpi);
  // An empty OMPI_COMM_WORLD_SIZE is not mpirun.
  CHECK(config_of({{"OMPI_COMM_WORLD_SIZE", ""}}).started_by == StartedBy::kNone);

  CHECK(std::string(hvd::runtime::started_by_name(StartedBy::kMpirun)) == "mpirun");
  CHECK(std::string(hvd::runtime::started_by_name(StartedBy::kHvdrunNative)) == "hvdrun");
  CHECK(std::string(hvd::runtime::started_by_name(StartedBy::kNone)) == "none");
  CHECK(std::string(hvd::runtime::backend_name(BackendKind::kMpi)) == "mpi");
  CHECK(std::string(hvd::runtime::backend_name(BackendKind::kGloo)) == "gloo");
}

TEST_CASE("read_config: hvdrun's native launch", "[libhvd]") {
  for (BuildFacts build : {kBoth, kGlooOnly}) {
    const auto c = config_of(native_env(), build);
    CHECK(c.started_by == StartedBy::kHvdrunNative);
    CHECK(c.backend == BackendKind::kGloo);
    CHECK(c.topology == hvd::contract::RankTopology{3, 4, 1, 2, 1, 2});
    CHECK(c.rendezvous_addr == "10.0.0.1:4000");
    CHECK(c.rendezvous_token == "tok-123");
    CHECK(c.job_id == "job-7");
    CHECK(c.advertise_addr == "10.0.0.2");
  }
  // Native wins over a stray mpirun variable.
  auto env = native_env();
  env["OMPI_COMM_WORLD_SIZE"] = "4";
  CHECK(config_of(env).started_by == StartedBy::kHvdrunNative);
  // Native with MPI only built: no Gloo to use.
  CHECK(failure_of(native_env(), kMpiOnly).status == HVD_ERR_UNSUPPORTED);
}

TEST_CASE("read_config: HOROVOD_CPU_OPERATIONS", "[libhvd]") {
  for (const char* v : {"gloo", "GLOO", "Gloo"}) {
    INFO(v);
    auto env = native_env();
    env["HOROVOD_CPU_OPERATIONS"] = v;
    CHECK(config_of(env).backend == BackendKind::kGloo);
    CHECK(config_of({{"HOROVOD_CPU_OPERATIONS", v}}).backend == BackendKind::kGloo);
  }
  CHECK(config_of({{"HOROVOD_CPU_OPERATIONS", "mpi"}}).backend == BackendKind::kMpi);
  CHECK(config_of({{"HOROVOD_CPU_OPERATIONS", "Mpi"}}, kMpiOnly).backend == BackendKind::kMpi);

  for (const char* v : {"ccl", "nccl", " gloo", "gloo,mpi"}) {
    INFO(v);
    const auto f = failure_of({{"HOROVOD_CPU_OPERATIONS", v}});
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_CPU_OPERATIONS"));
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring(v));
    CHECK_THAT(f.hint, Catch::Matchers::ContainsSubstring("mpi or gloo"));
  }
}

TEST_CASE("read_config: backend and launcher that cannot work together", "[libhvd]") {
  auto env = mpirun_env();
  env["HOROVOD_CPU_OPERATIONS"] = "gloo";
  const auto gloo_under_mpirun = failure_of(env);
  CHECK(gloo_under_mpirun.status == HVD_ERR_CONFIG);
  CHECK_THAT(gloo_under_mpirun.what, Catch::Matchers::ContainsSubstring("mpirun"));

  env = native_env();
  env["HOROVOD_CPU_OPERATIONS"] = "mpi";
  const auto mpi_native = failure_of(env);
  CHECK(mpi_native.status == HVD_ERR_CONFIG);
  CHECK_THAT(mpi_native.what, Catch::Matchers::ContainsSubstring("HOROVOD_CPU_OPERATIONS=mpi"));
  CHECK_THAT(mpi_native.hint, Catch::Matchers::ContainsSubstring("--mpi"));
}

TEST_CASE("read_config: a backend this build lacks", "[libhvd]") {
  for (const Env& env : {Env{}, mpirun_env(), native_env()}) {
    const auto f = failure_of(env, kNeither);
    CHECK(f.status == HVD_ERR_UNSUPPORTED);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("built without"));
  }
  const auto no_gloo = failure_of({{"HOROVOD_CPU_OPERATIONS", "gloo"}}, kMpiOnly);
  CHECK(no_gloo.status == HVD_ERR_UNSUPPORTED);
  CHECK_THAT(no_gloo.what, Catch::Matchers::ContainsSubstring("gloo"));
  const auto no_mpi = failure_of(mpirun_env(), kGlooOnly);
  CHECK(no_mpi.status == HVD_ERR_UNSUPPORTED);
  CHECK_THAT(no_mpi.what, Catch::Matchers::ContainsSubstring("mpi"));
  CHECK(failure_of({{"HOROVOD_CPU_OPERATIONS", "mpi"}}, kGlooOnly).status == HVD_ERR_UNSUPPORTED);
}

TEST_CASE("read_config: HOROVOD_GLOO_TIMEOUT_SECONDS", "[libhvd]") {
  CHECK(config_of({{"HOROVOD_GLOO_TIMEOUT_SECONDS", "45"}}).gloo_timeout ==
        std::chrono::seconds(45));
  CHECK(config_of({{"HOROVOD_GLOO_TIMEOUT_SECONDS", "1"}}).gloo_timeout == std::chrono::seconds(1));
  CHECK(config_of({{"HOROVOD_GLOO_TIMEOUT_SECONDS", "86400"}}).gloo_timeout ==
        std::chrono::seconds(86400));
  auto env = native_env();
  env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = "120";
  CHECK(config_of(env).gloo_timeout == std::chrono::seconds(120));

  for (const char* v : {"0", "abc", "10s", "-1", "86401", " 5", "1.5", "99999999999"}) {
    INFO(v);
    const auto f = failure_of({{"HOROVOD_GLOO_TIMEOUT_SECONDS", v}});
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_GLOO_TIMEOUT_SECONDS"));
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring(v));
  }
}

TEST_CASE("read_config: HOROVOD_EAGER_BYTES", "[libhvd]") {
  CHECK(config_of({}).eager_bytes == -1);  // chosen at init from the backend and the size
  CHECK(config_of({{"HOROVOD_EAGER_BYTES", "-1"}}).eager_bytes == -1);
  CHECK(config_of({{"HOROVOD_EAGER_BYTES", "0"}}).eager_bytes == 0);
  CHECK(config_of({{"HOROVOD_EAGER_BYTES", "8192"}}).eager_bytes == 8192);
  CHECK(config_of({{"HOROVOD_EAGER_BYTES", "1048576"}}).eager_bytes == 1048576);
  for (const char* v : {"-2", "1048577", "auto", "4k", " 64", "1.5"}) {
    INFO(v);
    const auto f = failure_of({{"HOROVOD_EAGER_BYTES", v}});
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_EAGER_BYTES"));
    CHECK_THAT(f.hint, Catch::Matchers::ContainsSubstring("from -1 to 1048576"));
  }
}

TEST_CASE("read_config: HOROVOD_GLOO_SYNC_BYTES and HOROVOD_GLOO_SYNC_PIECE_BYTES", "[libhvd]") {
  CHECK(config_of({}).gloo_sync_bytes == 4u << 20);
  CHECK(config_of({}).gloo_sync_piece_bytes == -1);  // net.core.wmem_max, read at init
  CHECK(config_of({{"HOROVOD_GLOO_SYNC_BYTES", "0"}}).gloo_sync_bytes == 0);
  CHECK(config_of({{"HOROVOD_GLOO_SYNC_BYTES", "65536"}}).gloo_sync_bytes == 65536);
  CHECK(config_of({{"HOROVOD_GLOO_SYNC_PIECE_BYTES", "4096"}}).gloo_sync_piece_bytes == 4096);
  CHECK(config_of({{"HOROVOD_GLOO_SYNC_PIECE_BYTES", "64"}}).gloo_sync_piece_bytes == 64);
  for (const char* v : {"-1", "1073741825", "4M", " 1"}) {
    INFO(v);
    const auto f = failure_of({{"HOROVOD_GLOO_SYNC_BYTES", v}});
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_GLOO_SYNC_BYTES"));
    CHECK_THAT(f.hint, Catch::Matchers::ContainsSubstring("from 0 to 1073741824"));
  }
  for (const char* v : {"-2", "0", "63", "1073741825", "wmem"}) {
    INFO(v);
    const auto f = failure_of({{"HOROVOD_GLOO_SYNC_PIECE_BYTES", v}});
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_GLOO_SYNC_PIECE_BYTES"));
    CHECK_THAT(f.hint, Catch::Matchers::ContainsSubstring("1073741824"));
  }
}

TEST_CASE("read_config: HOROVOD_GLOO_LOOP_POLICY", "[libhvd]") {
  using hvd::ThreadPolicy;
  CHECK(config_of({}).gloo_loop_policy == ThreadPolicy::kNormal);
  CHECK(config_of({{"HOROVOD_GLOO_LOOP_POLICY", "normal"}}).gloo_loop_policy ==
        ThreadPolicy::kNormal);
  CHECK(config_of({{"HOROVOD_GLOO_LOOP_POLICY", "batch"}}).gloo_loop_policy ==
        ThreadPolicy::kBatch);
  CHECK(config_of({{"HOROVOD_GLOO_LOOP_POLICY", "IDLE"}}).gloo_loop_policy == ThreadPolicy::kIdle);
  for (const char* v : {"fifo", "batch ", "0", "SCHED_BATCH"}) {
    INFO(v);
    const auto f = failure_of({{"HOROVOD_GLOO_LOOP_POLICY", v}});
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_GLOO_LOOP_POLICY"));
    CHECK_THAT(f.hint, Catch::Matchers::ContainsSubstring("normal, batch or idle"));
  }
}

TEST_CASE("read_config: HOROVOD_LOG_LEVEL", "[libhvd]") {
  CHECK(config_of({{"HOROVOD_LOG_LEVEL", "DEBUG"}}).log_level == "debug");
  for (const char* v : {"trace", "debug", "info", "warning", "error", "fatal"}) {
    CHECK(config_of({{"HOROVOD_LOG_LEVEL", v}}).log_level == v);
  }
  for (const char* v : {"bogus", "warn", "debug2"}) {
    INFO(v);
    const auto f = failure_of({{"HOROVOD_LOG_LEVEL", v}});
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_LOG_LEVEL"));
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring(v));
  }
}

TEST_CASE("read_config: a multi-rank topology without a launcher", "[libhvd]") {
  Env env = native_env();
  for (const char* hvd_var :
       {"HVD_RENDEZVOUS_ADDR", "HVD_RENDEZVOUS_TOKEN", "HVD_JOB_ID", "HVD_ADVERTISE_ADDR"}) {
    env.erase(hvd_var);
  }
  const auto f = failure_of(env);
  CHECK(f.status == HVD_ERR_CONFIG);
  CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HOROVOD_SIZE=4"));

  env = {{"HOROVOD_RANK", "1"},       {"HOROVOD_SIZE", "2"},       {"HOROVOD_LOCAL_RANK", "0"},
         {"HOROVOD_LOCAL_SIZE", "1"}, {"HOROVOD_CROSS_RANK", "1"}, {"HOROVOD_CROSS_SIZE", "2"}};
  const auto two = failure_of(env);
  CHECK(two.status == HVD_ERR_CONFIG);
  CHECK_THAT(two.what, Catch::Matchers::ContainsSubstring("HOROVOD_SIZE=2"));

  // A bad HOROVOD_* value is the rank contract's error, naming the variable.
  env["HOROVOD_SIZE"] = "x";
  CHECK_THROWS_AS(config_of(env), hvd::ContractError);
  CHECK_THROWS_WITH(config_of(env), Catch::Matchers::ContainsSubstring("HOROVOD_SIZE='x'"));
}

TEST_CASE("read_config: a bare srun of several tasks is refused with how to start it", "[libhvd]") {
  const auto f = failure_of({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "6"}, {"SLURM_JOB_ID", "9"}});
  CHECK(f.status == HVD_ERR_CONFIG);
  CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("started by srun as task 2 of 6"));
  CHECK_THAT(f.hint, Catch::Matchers::ContainsSubstring("hvdrun ./train"));
  // One task, or Slurm variables a launcher's rank inherited, are not a bare srun.
  CHECK_NOTHROW(config_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  Env native = native_env();
  native["SLURM_PROCID"] = "1";
  native["SLURM_NTASKS"] = "3";
  CHECK_NOTHROW(config_of(native));
}

TEST_CASE("read_config: an incomplete native launch", "[libhvd]") {
  for (const char* name : {"HVD_RENDEZVOUS_TOKEN", "HVD_JOB_ID", "HVD_ADVERTISE_ADDR"}) {
    INFO(name);
    for (bool empty : {false, true}) {
      auto env = native_env();
      if (empty) {
        env[name] = "";
      } else {
        env.erase(name);
      }
      const auto f = failure_of(env);
      CHECK(f.status == HVD_ERR_CONFIG);
      CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring(name));
    }
  }
  auto env = native_env();
  env.erase("HOROVOD_RANK");
  const auto no_rank = failure_of(env);
  CHECK(no_rank.status == HVD_ERR_CONFIG);
  CHECK_THAT(no_rank.what, Catch::Matchers::ContainsSubstring("HOROVOD_RANK"));

  env = native_env();
  env["HOROVOD_LOCAL_RANK"] = "2";  // not less than HOROVOD_LOCAL_SIZE=2
  CHECK_THROWS_AS(config_of(env), hvd::ContractError);
  CHECK_THROWS_WITH(config_of(env), Catch::Matchers::ContainsSubstring("HOROVOD_LOCAL_RANK=2"));
}

TEST_CASE("read_config: HVD_PORT_RANGE and MASTER_PORT for the control plane", "[libhvd][config]") {
  Env env = native_env();
  CHECK(config_of(env).port_range.any());
  env["HVD_PORT_RANGE"] = "29500-29510";
  env["MASTER_PORT"] = "29500";
  const RuntimeConfig c = config_of(env);
  REQUIRE_FALSE(c.port_range.any());
  CHECK(c.port_range.low == 29500);
  CHECK(c.port_range.high == 29510);
  CHECK(c.master_port == 29500);
  for (const char* bad : {"29510-29500", "x-1", "1-", "0-5", "5-65536", "29500"}) {
    INFO(bad);
    env["HVD_PORT_RANGE"] = bad;
    const Failure f = failure_of(env);
    CHECK(f.status == HVD_ERR_CONFIG);
    CHECK_THAT(f.what, Catch::Matchers::ContainsSubstring("HVD_PORT_RANGE"));
  }
  env["HVD_PORT_RANGE"] = "29500-29510";
  env["MASTER_PORT"] = "port";
  CHECK_THAT(failure_of(env).what, Catch::Matchers::ContainsSubstring("MASTER_PORT"));
}
