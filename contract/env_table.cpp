#include "contract/env_table.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include "common/nearest.h"

namespace hvd::contract {
namespace {

constexpr std::array<const EnvVar*, 34> kTable{
    &kHorovodRank,
    &kHorovodSize,
    &kHorovodLocalRank,
    &kHorovodLocalSize,
    &kHorovodCrossRank,
    &kHorovodCrossSize,
    &kHorovodHostname,
    &kRank,
    &kWorldSize,
    &kLocalRank,
    &kLocalWorldSize,
    &kGroupRank,
    &kGroupWorldSize,
    &kRoleRank,
    &kRoleWorldSize,
    &kRoleName,
    &kMasterAddr,
    &kMasterPort,
    &kRestartCount,
    &kMaxRestarts,
    &kRunId,
    &kRendezvousAddr,
    &kRendezvousToken,
    &kJobId,
    &kAdvertiseAddr,
    &kPortRange,
    &kRankLayout,
    &kRankHosts,
    &kHorovodElastic,
    &kElasticFd,
    &kElasticWorker,
    &kElasticGeneration,
    &kReportFd,
    &kStackFd,
};

constexpr std::array<const EnvVar*, 18> kKnobs{
    &kCpuOperations,      &kGlooTimeout,       &kGlooLoopPolicy,    &kGlooSyncBytes,
    &kGlooSyncPieceBytes, &kLogLevel,          &kFusionThreshold,   &kCycleTime,
    &kCacheCapacity,      &kMpiCycles,         &kGlooCycles,        &kEagerBytes,
    &kStallCheckDisable,  &kStallCheckTime,    &kStallShutdownTime, &kTimeline,
    &kTimelineMarkCycles, &kDynamicProcessSets};

constexpr std::array<const EnvVar*, 7> kLibrary{
    &kNcclSocketIfname, &kGlooIface,        &kGlooSocketIfname, &kCudaVisibleDevices,
    &kOmpNumThreads,    &kPythonUnbuffered, &kNcclIbDisable};

constexpr std::string_view kNoAutotuner =
    "libhvd has no autotuner: the fusion threshold and cycle time stay as set";
constexpr std::array<UnimplementedKnob, 13> kUnimplemented{{
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "libhvd runs one flat allreduce across all ranks"},
    {"HOROVOD_HIERARCHICAL_ALLGATHER", "libhvd runs one flat allgather across all ranks"},
    {"HOROVOD_TORUS_ALLREDUCE", "libhvd runs one flat allreduce across all ranks"},
    {"HOROVOD_AUTOTUNE", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_LOG", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", kNoAutotuner},
    {"HOROVOD_MPI_THREADS_DISABLE",
     "libhvd's engine thread calls MPI beside the program's threads: it always asks MPI for "
     "MPI_THREAD_MULTIPLE"},
    {"HOROVOD_NUM_NCCL_STREAMS", "libhvd runs NCCL on one stream"},
    {"HOROVOD_THREAD_AFFINITY", "libhvd does not pin its engine thread to a core"},
    {"HOROVOD_LOG_HIDE_TIME",
     "libhvd's log lines carry no time (hvdrun's --timestamp-output stamps every line)"},
}};

}  // namespace

std::span<const EnvVar* const> env_table() { return kTable; }

std::span<const EnvVar* const> library_table() { return kLibrary; }

std::span<const UnimplementedKnob> unimplemented_knobs() { return kUnimplemented; }

namespace {

// Horovod's variables that are not runtime knobs: its build settings (pip install), what its
// launchers set for its own workers, and knobs of engines libhvd does not have. A user's
// environment may hold them; libhvd has nothing to say about them.
constexpr std::array<std::string_view, 42> kHorovodOwn{"HOROVOD_WITH_PYTORCH",
                                                       "HOROVOD_WITH_TENSORFLOW",
                                                       "HOROVOD_WITH_MXNET",
                                                       "HOROVOD_WITH_MPI",
                                                       "HOROVOD_WITH_GLOO",
                                                       "HOROVOD_WITHOUT_PYTORCH",
                                                       "HOROVOD_WITHOUT_TENSORFLOW",
                                                       "HOROVOD_WITHOUT_MXNET",
                                                       "HOROVOD_WITHOUT_MPI",
                                                       "HOROVOD_WITHOUT_GLOO",
                                                       "HOROVOD_GPU",
                                                       "HOROVOD_GPU_OPERATIONS",
                                                       "HOROVOD_GPU_ALLREDUCE",
                                                       "HOROVOD_GPU_ALLGATHER",
                                                       "HOROVOD_GPU_BROADCAST",
                                                       "HOROVOD_GPU_ALLTOALL",
                                                       "HOROVOD_GPU_REDUCESCATTER",
                                                       "HOROVOD_NCCL_HOME",
                                                       "HOROVOD_NCCL_INCLUDE",
                                                       "HOROVOD_NCCL_LIB",
                                                       "HOROVOD_NCCL_LINK",
                                                       "HOROVOD_CUDA_HOME",
                                                       "HOROVOD_ROCM_HOME",
                                                       "HOROVOD_BUILD_ARCH_FLAGS",
                                                       "HOROVOD_BUILD_CUDA_CC_LIST",
                                                       "HOROVOD_CMAKE",
                                                       "HOROVOD_DEBUG",
                                                       "HOROVOD_MPICXX_SHOW",
                                                       "HOROVOD_CCL_HOME",
                                                       "HOROVOD_CONTROLLER",
                                                       "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                                                       "HOROVOD_GLOO_RENDEZVOUS_PORT",
                                                       "HOROVOD_GLOO_GLOBAL_PREFIX",
                                                       "HOROVOD_GLOO_LOCAL_PREFIX",
                                                       "HOROVOD_GLOO_CROSS_PREFIX",
                                                       "HOROVOD_START_TIMEOUT",
                                                       "HOROVOD_ELASTIC_TIMEOUT",
                                                       "HOROVOD_SECRET_KEY",
                                                       "HOROVOD_ENABLE_XLA_OPS",
                                                       "HOROVOD_BATCH_D2D_MEMCOPIES",
                                                       "HOROVOD_ADASUM_MPI_CHUNK_SIZE",
                                                       "HOROVOD_DISABLE_GROUP_FUSION"};

}  // namespace

std::vector<std::string> horovod_variable_warnings(std::span<const std::string> names) {
  std::vector<std::string_view> known;  // every HOROVOD_* name, for "did you mean"
  for (std::span<const EnvVar* const> table : {env_table(), knob_table(), library_table()}) {
    for (const EnvVar* v : table) {
      if (v->name.starts_with("HOROVOD_")) known.push_back(v->name);
    }
  }
  for (const UnimplementedKnob& k : kUnimplemented) known.push_back(k.name);
  known.insert(known.end(), kHorovodOwn.begin(), kHorovodOwn.end());
  std::vector<std::string> out;
  for (const std::string& name : names) {
    if (!name.starts_with("HOROVOD_")) continue;
    if (const UnimplementedKnob* k = find_unimplemented_knob(name)) {
      out.push_back(name + " is set, but libhvd does not implement it: " + std::string(k->instead));
      continue;
    }
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const auto near = nearest_name(name, known);
    out.push_back(name + " is set, but neither libhvd nor Horovod knows it: it has no effect" +
                  (near ? " (did you mean " + *near + "?)" : ""));
  }
  return out;
}

const UnimplementedKnob* find_unimplemented_knob(std::string_view name) {
  for (const UnimplementedKnob& k : kUnimplemented) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string default_text(const EnvVar& var) {
  const KnobDefault& d = var.default_value;
  switch (d.type) {
    case KnobDefault::Type::kInteger:
      return std::to_string(d.integer);
    case KnobDefault::Type::kMilliseconds: {
      std::array<char, 32> buf{};  // shortest form that reads back: "0.2"
      const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), d.milliseconds);
      return ec == std::errc() ? std::string(buf.data(), end) : std::string();
    }
    case KnobDefault::Type::kText:
      return std::string(d.text);
    case KnobDefault::Type::kNone:
      break;
  }
  return {};
}

std::span<const EnvVar* const> knob_table() { return kKnobs; }

bool is_valid_env_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

const EnvVar* find_env_var(std::string_view name) {
  for (const EnvVar* var : kTable) {
    if (var->name == name) return var;
  }
  return nullptr;
}

}  // namespace hvd::contract
