#include "launcher/plan/rank_defaults.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "contract/env_table.h"

namespace hvd::launcher {

std::vector<std::pair<std::string, std::string>> rank_defaults(
    int local_size, const std::function<bool(std::string_view name)>& is_set) {
  std::vector<std::pair<std::string, std::string>> out;
  if (local_size > 1 && !is_set(contract::kOmpNumThreads.name)) {
    out.emplace_back(contract::kOmpNumThreads.name, "1");
  }
  if (!is_set(contract::kPythonUnbuffered.name)) {
    out.emplace_back(contract::kPythonUnbuffered.name, "1");
  }
  return out;
}

std::string cuda_visible_devices(int slot, int gpus_per_rank) {
  std::vector<int> devices;
  for (int d = 0; d < gpus_per_rank; ++d) devices.push_back(slot * gpus_per_rank + d);
  return fmt::format("{}", fmt::join(devices, ","));
}

}  // namespace hvd::launcher
