// What libhvd learns from its environment at init(): who launched it, where it sits, which
// engine to use and the engine's settings. Read once, strictly: a bad value is an error naming
// the variable, its value and what is allowed. Pure (the environment comes in as a getter).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "common/port_range.h"
#include "common/thread_policy.h"
#include "contract/env_table.h"
#include "contract/topology.h"

namespace hvd::runtime {

// Who started this process (not to be confused with hvdrun's launchers, launcher/core/launcher.h).
enum class StartedBy {
  kHvdrunNative,  // hvdrun's native launch: HOROVOD_* topology and a rendezvous (HVD_*)
  kMpirun,        // Open MPI's mpirun (also hvdrun --mpi): OMPI_COMM_WORLD_*
  kNone,          // a process started on its own: size 1
};

enum class BackendKind { kMpi, kGloo };

struct BuildFacts {
  bool has_mpi = false;
  bool has_gloo = false;
};

struct RuntimeConfig {
  StartedBy started_by = StartedBy::kNone;
  BackendKind backend = BackendKind::kGloo;
  contract::RankTopology topology;  // native: from HOROVOD_*; mpirun: filled in by MPI
  std::string rendezvous_addr;      // host:port, native launch only
  std::string rendezvous_token;
  std::string job_id;
  std::string advertise_addr;  // where this rank's Gloo device binds; 127.0.0.1 alone
  // Under mpirun: the networks Open MPI was told to use (OMPI_MCA_btl_tcp_if_include: CIDRs or
  // interface names; hvdrun --mpi always sets it), where the control plane listens.
  std::string mpi_tcp_include;
  // HVD_PORT_RANGE (hvdrun --port-range): the control plane's listener stays inside it, and
  // off MASTER_PORT, which hvdrun took from the same range for the program.
  PortRange port_range;  // any(): unset
  int master_port = 0;
  std::string master_addr;  // MASTER_ADDR as hvdrun set it (elastic: world().master_addr)
  // The knobs start at the contract table's defaults (contract/env_table.h), written once there.
  std::chrono::seconds gloo_timeout{contract::kGlooTimeout.default_value.integer};
  ThreadPolicy gloo_loop_policy = ThreadPolicy::kNormal;  // HOROVOD_GLOO_LOOP_POLICY
  // HOROVOD_GLOO_SYNC_BYTES (0: off) and HOROVOD_GLOO_SYNC_PIECE_BYTES (-1: net.core.wmem_max).
  std::size_t gloo_sync_bytes =
      static_cast<std::size_t>(contract::kGlooSyncBytes.default_value.integer);
  long long gloo_sync_piece_bytes = contract::kGlooSyncPieceBytes.default_value.integer;
  std::string log_level{contract::kLogLevel.default_value.text};
  // The engine (named ops, negotiation, fusion, stalls, timeline).
  std::size_t fusion_threshold =
      static_cast<std::size_t>(contract::kFusionThreshold.default_value.integer);
  std::chrono::microseconds cycle_time = contract::kCycleTime.default_value.as_microseconds();
  std::size_t cache_capacity =
      static_cast<std::size_t>(contract::kCacheCapacity.default_value.integer);
  bool mpi_cycles = contract::kMpiCycles.default_value.integer == 1;
  bool gloo_cycles = contract::kGlooCycles.default_value.integer == 1;
  long long eager_bytes = contract::kEagerBytes.default_value.integer;  // -1: chosen at init
  // 0: the stall inspector is off
  std::chrono::seconds stall_warning{contract::kStallCheckTime.default_value.integer};
  // 0: stalls only warn
  std::chrono::seconds stall_shutdown{contract::kStallShutdownTime.default_value.integer};
  std::string timeline;               // HOROVOD_TIMELINE; written by rank 0
  bool timeline_mark_cycles = false;  // HOROVOD_TIMELINE_MARK_CYCLES=1: CYCLE_START marks
  // HOROVOD_DYNAMIC_PROCESS_SETS=1 (or hvd::init's option): add_process_set after init.
  bool dynamic_process_sets = contract::kDynamicProcessSets.default_value.integer == 1;
  // Gloo's rendezvous scope: "<job id>.global", or one per generation in an elastic job.
  std::string gloo_scope;
  // HVD_REPORT_FD: the rank's report channel to its agent (contract/report.h), where rank 0
  // sends its stall reports; -1: none (not a native launch).
  int report_fd = -1;
  // Elastic jobs (HVD_ELASTIC_FD set): the channel to the agent and who this process is.
  struct Elastic {
    int fd = -1;  // -1: not an elastic job
    int worker = 0;
    int generation = 0;
  } elastic;
  // Elastic resets: true once a newer generation was announced, so that the rendezvous of one
  // that will never form stops waiting (HttpStoreOptions::interrupted). Not from the environment.
  std::function<bool()> superseded;
};

// Throws StatusError(HVD_ERR_CONFIG) for a bad or inconsistent environment, and
// StatusError(HVD_ERR_UNSUPPORTED) for an engine this build lacks.
RuntimeConfig read_config(const contract::EnvGetter& getenv, BuildFacts build);

const char* backend_name(BackendKind kind);
const char* started_by_name(StartedBy started_by);

}  // namespace hvd::runtime
