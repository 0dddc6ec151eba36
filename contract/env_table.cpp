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

constexpr std::array<const EnvVar*, 6> kLibrary{&kNcclSocketIfname, &kGlooIface,
                                                &kGlooSocketIfname, &kCudaVisibleDevices,
                                                &kOmpNumThreads,    &kPythonUnbuffered};

}  // namespace

std::span<const EnvVar* const> env_table() { return kTable; }

std::span<const EnvVar* const> library_table() { return kLibrary; }

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
