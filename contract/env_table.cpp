#include "contract/env_table.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace hvd::contract {
namespace {

constexpr std::array<const EnvVar*, 31> kTable{
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
    &kElasticFd,
    &kElasticWorker,
    &kElasticGeneration,
};

constexpr std::array<const EnvVar*, 9> kKnobs{
    &kCpuOperations,     &kGlooTimeout,    &kLogLevel,          &kFusionThreshold, &kCycleTime,
    &kStallCheckDisable, &kStallCheckTime, &kStallShutdownTime, &kTimeline};

constexpr std::array<const EnvVar*, 7> kLibrary{
    &kNcclSocketIfname, &kGlooIface,        &kGlooSocketIfname, &kCudaVisibleDevices,
    &kOmpNumThreads,    &kPythonUnbuffered, &kNcclIbDisable};

constexpr std::string_view kNoAutotuner =
    "libhvd has no autotuner: the fusion threshold and cycle time stay as set";
constexpr std::array<UnimplementedKnob, 15> kUnimplemented{{
    {"HOROVOD_CACHE_CAPACITY", "libhvd has no response cache yet: it negotiates every tensor"},
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "libhvd runs one flat allreduce across all ranks"},
    {"HOROVOD_HIERARCHICAL_ALLGATHER", "libhvd runs one flat allgather across all ranks"},
    {"HOROVOD_TORUS_ALLREDUCE", "libhvd runs one flat allreduce across all ranks"},
    {"HOROVOD_AUTOTUNE", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_LOG", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", kNoAutotuner},
    {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", kNoAutotuner},
    {"HOROVOD_TIMELINE_MARK_CYCLES", "libhvd's timeline does not mark the engine's cycles"},
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
