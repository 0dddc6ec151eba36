#include "allreduce/runtime/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "allreduce/api/status_error.h"
#include "common/port_range.h"
#include "common/thread_policy.h"
#include "contract/elastic.h"
#include "contract/env_table.h"

namespace hvd::runtime {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string value_of(const contract::EnvGetter& getenv, std::string_view name) {
  const char* v = getenv(std::string(name).c_str());
  return v == nullptr ? std::string() : std::string(v);
}

[[noreturn]] void bad_value(std::string_view name, const std::string& value,
                            const std::string& allowed) {
  throw StatusError(HVD_ERR_CONFIG, fmt::format("{}={:?} is not valid", name, value),
                    fmt::format("use {}, or unset it", allowed));
}

// A whole number in [min, max]; the table's default when unset.
long long read_integer(const contract::EnvGetter& getenv, const contract::EnvVar& var,
                       long long min, long long max, const char* unit) {
  const std::string v = value_of(getenv, var.name);
  if (v.empty()) return var.default_value.integer;
  long long n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < min || n > max) {
    bad_value(var.name, v,
              *unit == '\0' ? fmt::format("{} or {}", min, max)
                            : fmt::format("a whole number of {} from {} to {}", unit, min, max));
  }
  return n;
}

std::chrono::seconds read_timeout(const contract::EnvGetter& getenv) {
  return std::chrono::seconds(read_integer(getenv, contract::kGlooTimeout, 1, 86400, "seconds"));
}

// HVD_PORT_RANGE: "LOW-HIGH" (hvdrun writes it; strict all the same).
PortRange read_port_range(const contract::EnvGetter& getenv) {
  const std::string v = value_of(getenv, contract::kPortRange.name);
  if (v.empty()) return {};
  const auto range = parse_port_range(v);
  if (!range) bad_value(contract::kPortRange.name, v, "LOW-HIGH with 1 <= LOW <= HIGH <= 65535");
  return *range;
}

// HOROVOD_CYCLE_TIME: milliseconds, fractional (Horovod's unit), 0 to 1000.
std::chrono::microseconds read_cycle_time(const contract::EnvGetter& getenv) {
  const std::string v = value_of(getenv, contract::kCycleTime.name);
  if (v.empty()) return contract::kCycleTime.default_value.as_microseconds();
  double ms = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  if (ec != std::errc() || end != v.data() + v.size() || !(ms >= 0 && ms <= 1000)) {
    bad_value(contract::kCycleTime.name, v, "milliseconds from 0 to 1000, e.g. 0.2");
  }
  return std::chrono::microseconds(static_cast<long long>(ms * 1000));
}

void read_engine_knobs(const contract::EnvGetter& getenv, RuntimeConfig& config) {
  config.fusion_threshold = static_cast<std::size_t>(
      read_integer(getenv, contract::kFusionThreshold, 0, 1ll << 40, "bytes"));
  config.cycle_time = read_cycle_time(getenv);
  config.cache_capacity = static_cast<std::size_t>(
      read_integer(getenv, contract::kCacheCapacity, 0, 1 << 20, "tensors"));
  config.mpi_cycles = read_integer(getenv, contract::kMpiCycles, 0, 1, "") == 1;
  config.gloo_cycles = read_integer(getenv, contract::kGlooCycles, 0, 1, "") == 1;
  config.eager_bytes =
      read_integer(getenv, contract::kEagerBytes, -1, 1 << 20, "bytes (-1: libhvd chooses)");
  const bool disabled = read_integer(getenv, contract::kStallCheckDisable, 0, 1, "") == 1;
  config.stall_warning = std::chrono::seconds(
      disabled ? 0 : read_integer(getenv, contract::kStallCheckTime, 1, 86400, "seconds"));
  config.stall_shutdown = std::chrono::seconds(
      disabled ? 0 : read_integer(getenv, contract::kStallShutdownTime, 0, 86400, "seconds"));
  config.timeline = value_of(getenv, contract::kTimeline.name);
  config.dynamic_process_sets = read_integer(getenv, contract::kDynamicProcessSets, 0, 1, "") == 1;
  // Horovod's "DYNAMIC": no file until the program starts one (start_timeline), never a file
  // named DYNAMIC.
  if (config.timeline == "DYNAMIC") config.timeline.clear();
  config.timeline_mark_cycles = read_integer(getenv, contract::kTimelineMarkCycles, 0, 1, "") == 1;
}

StartedBy detect_starter(const contract::EnvGetter& getenv) {
  if (!value_of(getenv, contract::kRendezvousAddr.name).empty()) return StartedBy::kHvdrunNative;
  if (!value_of(getenv, "OMPI_COMM_WORLD_SIZE").empty()) return StartedBy::kMpirun;
  return StartedBy::kNone;
}

BackendKind choose_backend(const contract::EnvGetter& getenv, StartedBy launcher,
                           BuildFacts build) {
  const std::string requested = lower(value_of(getenv, contract::kCpuOperations.name));
  BackendKind kind;
  if (requested.empty()) {
    kind = launcher == StartedBy::kMpirun         ? BackendKind::kMpi
           : launcher == StartedBy::kHvdrunNative ? BackendKind::kGloo
           : build.has_gloo                       ? BackendKind::kGloo
                                                  : BackendKind::kMpi;
  } else if (requested == "mpi") {
    kind = BackendKind::kMpi;
  } else if (requested == "gloo") {
    kind = BackendKind::kGloo;
  } else {
    bad_value(contract::kCpuOperations.name, value_of(getenv, contract::kCpuOperations.name),
              "mpi or gloo");
  }
  const bool built = kind == BackendKind::kMpi ? build.has_mpi : build.has_gloo;
  if (!built) {
    throw StatusError(
        HVD_ERR_UNSUPPORTED,
        fmt::format("this libhvd was built without the {} backend{}", backend_name(kind),
                    requested.empty()
                        ? ""
                        : fmt::format(" ({}={})", contract::kCpuOperations.name, requested)),
        kind == BackendKind::kMpi
            ? "rebuild with Open MPI (libopenmpi-dev, -DHVD_WITH_MPI=ON), or use Gloo"
            : "rebuild with Gloo (libgloo-dev, -DHVD_WITH_GLOO=ON), or run under mpirun");
  }
  if (kind == BackendKind::kGloo && launcher == StartedBy::kMpirun) {
    throw StatusError(HVD_ERR_CONFIG,
                      "Gloo needs hvdrun's rendezvous, but this process was started by mpirun "
                      "(OMPI_COMM_WORLD_SIZE is set, HVD_RENDEZVOUS_ADDR is not)",
                      fmt::format("unset {} (MPI is used under mpirun), or launch with hvdrun "
                                  "without --mpi",
                                  contract::kCpuOperations.name));
  }
  if (kind == BackendKind::kMpi && launcher == StartedBy::kHvdrunNative) {
    throw StatusError(HVD_ERR_CONFIG,
                      fmt::format("{}=mpi, but hvdrun started this rank natively, not through "
                                  "mpirun, so MPI cannot connect the ranks",
                                  contract::kCpuOperations.name),
                      "launch with `hvdrun --mpi ...`, or unset HOROVOD_CPU_OPERATIONS");
  }
  return kind;
}

}  // namespace

const char* backend_name(BackendKind kind) { return kind == BackendKind::kMpi ? "mpi" : "gloo"; }

const char* started_by_name(StartedBy started_by) {
  switch (started_by) {
    case StartedBy::kHvdrunNative:
      return "hvdrun";
    case StartedBy::kMpirun:
      return "mpirun";
    case StartedBy::kNone:
      return "none";
  }
  return "none";
}

RuntimeConfig read_config(const contract::EnvGetter& getenv, BuildFacts build) {
  RuntimeConfig config;
  config.started_by = detect_starter(getenv);
  config.backend = choose_backend(getenv, config.started_by, build);
  config.gloo_timeout = read_timeout(getenv);
  const std::string loop_policy = value_of(getenv, contract::kGlooLoopPolicy.name);
  if (!loop_policy.empty()) {
    const auto policy = parse_thread_policy(lower(loop_policy));
    if (!policy) bad_value(contract::kGlooLoopPolicy.name, loop_policy, "normal, batch or idle");
    config.gloo_loop_policy = *policy;
  }
  config.gloo_sync_bytes = static_cast<std::size_t>(
      read_integer(getenv, contract::kGlooSyncBytes, 0, 1ll << 30, "bytes"));
  config.gloo_sync_piece_bytes = read_integer(getenv, contract::kGlooSyncPieceBytes, -1, 1ll << 30,
                                              "bytes (-1: net.core.wmem_max)");
  if (config.gloo_sync_piece_bytes >= 0 && config.gloo_sync_piece_bytes < 64) {
    bad_value(contract::kGlooSyncPieceBytes.name, std::to_string(config.gloo_sync_piece_bytes),
              "bytes from 64 to 1073741824, or -1 (net.core.wmem_max)");
  }
  read_engine_knobs(getenv, config);
  const std::string level = lower(value_of(getenv, contract::kLogLevel.name));
  if (!level.empty()) {
    static constexpr std::string_view kLevels[] = {"trace",   "debug", "info",
                                                   "warning", "error", "fatal"};
    if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) {
      bad_value(contract::kLogLevel.name, value_of(getenv, contract::kLogLevel.name),
                "trace, debug, info, warning, error or fatal");
    }
    config.log_level = level;
  }

  if (config.started_by == StartedBy::kHvdrunNative) {
    const auto topology = contract::read_topology(getenv);
    if (!topology) {
      throw StatusError(HVD_ERR_CONFIG,
                        "HVD_RENDEZVOUS_ADDR is set but HOROVOD_RANK is not: this environment "
                        "is not a complete hvdrun launch",
                        "start the program with hvdrun, or unset HVD_RENDEZVOUS_ADDR");
    }
    config.topology = *topology;
    config.rendezvous_addr = value_of(getenv, contract::kRendezvousAddr.name);
    config.rendezvous_token = value_of(getenv, contract::kRendezvousToken.name);
    config.job_id = value_of(getenv, contract::kJobId.name);
    config.advertise_addr = value_of(getenv, contract::kAdvertiseAddr.name);
    config.port_range = read_port_range(getenv);
    config.master_port =
        static_cast<int>(read_integer(getenv, contract::kMasterPort, 0, 65535, "a port number"));
    config.master_addr = value_of(getenv, contract::kMasterAddr.name);
    for (auto [name, value] : {std::pair{contract::kRendezvousToken.name, &config.rendezvous_token},
                               std::pair{contract::kJobId.name, &config.job_id},
                               std::pair{contract::kAdvertiseAddr.name, &config.advertise_addr}}) {
      if (value->empty()) {
        throw StatusError(HVD_ERR_CONFIG,
                          fmt::format("HVD_RENDEZVOUS_ADDR is set but {} is empty or unset: this "
                                      "environment is not a complete hvdrun launch",
                                      name),
                          "start the program with hvdrun; HVD_* variables are hvdrun's own");
      }
    }
    config.gloo_scope = config.job_id + ".global";
    // The agent's report channel (contract/report.h); unset: a launch with no agent.
    if (!value_of(getenv, contract::kReportFd.name).empty()) {
      config.report_fd =
          static_cast<int>(read_integer(getenv, contract::kReportFd, 0, 1 << 20, "a descriptor"));
    }
    if (!value_of(getenv, contract::kElasticFd.name).empty()) {
      config.elastic.fd =
          static_cast<int>(read_integer(getenv, contract::kElasticFd, 0, 1 << 20, "a descriptor"));
      config.elastic.worker = static_cast<int>(
          read_integer(getenv, contract::kElasticWorker, 0, 1 << 30, "a worker id"));
      config.elastic.generation = static_cast<int>(
          read_integer(getenv, contract::kElasticGeneration, 0, 1 << 30, "a generation"));
      config.gloo_scope = contract::generation_scope(config.job_id, config.elastic.generation);
    }
  } else if (config.started_by == StartedBy::kMpirun) {
    config.mpi_tcp_include = value_of(getenv, "OMPI_MCA_btl_tcp_if_include");
  } else if (config.started_by == StartedBy::kNone) {
    // `srun ./train` in an allocation: N copies that would each train alone, at size 1.
    const std::string procid = value_of(getenv, "SLURM_PROCID");
    const std::string ntasks = value_of(getenv, "SLURM_NTASKS");
    if (!procid.empty() && !ntasks.empty() && ntasks != "1" && ntasks != "0") {
      throw StatusError(
          HVD_ERR_CONFIG,
          fmt::format("started by srun as task {} of {} (SLURM_PROCID, SLURM_NTASKS) without "
                      "hvdrun: each task would train on its own as a job of size 1",
                      procid, ntasks),
          "inside the allocation, run the program once through hvdrun (`hvdrun ./train`: it "
          "takes the nodes and tasks from Slurm and starts the ranks through srun), not "
          "`srun ./train`");
    }
    const auto topology = contract::read_topology(getenv);
    if (topology && topology->size > 1) {
      throw StatusError(
          HVD_ERR_CONFIG,
          fmt::format("HOROVOD_SIZE={} but neither hvdrun's rendezvous (HVD_RENDEZVOUS_ADDR) nor "
                      "mpirun's environment (OMPI_COMM_WORLD_SIZE) is present",
                      topology->size),
          "start the program with hvdrun or mpirun, or unset the HOROVOD_* topology variables");
    }
    config.advertise_addr = "127.0.0.1";
  }
  return config;
}

}  // namespace hvd::runtime
