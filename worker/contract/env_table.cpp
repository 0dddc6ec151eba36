#include "worker/contract/env_table.h"

#include <array>

namespace hvd::contract {
namespace {

constexpr std::array<const EnvVar*, 18> kTable{
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
    &kMasterAddr,
    &kMasterPort,
    &kRendezvousAddr,
    &kRendezvousToken,
    &kJobId,
    &kAdvertiseAddr,
};

}  // namespace

std::span<const EnvVar* const> env_table() { return kTable; }

const EnvVar* find_env_var(std::string_view name) {
  for (const EnvVar* var : kTable) {
    if (var->name == name) return var;
  }
  return nullptr;
}

}  // namespace hvd::contract
