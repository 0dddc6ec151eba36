// The defaults hvdrun gives every rank, in one place, whoever writes the rank's environment: the
// plan (native launches), the rank shim (under --mpi), and an elastic job's later workers.
//   OMP_NUM_THREADS=1     when ranks share the host and it is not set (as torchrun: ranks with a
//                         thread per core each would overload its cores)
//   PYTHONUNBUFFERED=1    when not set (a Python rank's lines reach hvdrun as it prints them)
//   CUDA_VISIBLE_DEVICES  with --gpus-per-rank N: devices local_rank*N .. local_rank*N+N-1
// Pure.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvd::launcher {

// OMP_NUM_THREADS and PYTHONUNBUFFERED for a rank whose host runs `local_size` ranks, each only
// when `is_set` says the rank's environment does not have it already.
std::vector<std::pair<std::string, std::string>> rank_defaults(
    int local_size, const std::function<bool(std::string_view name)>& is_set);

// CUDA_VISIBLE_DEVICES's value for the rank in `slot` (its local rank) with `gpus_per_rank`
// devices each: "2,3" for slot 1 of 2.
std::string cuda_visible_devices(int slot, int gpus_per_rank);

}  // namespace hvd::launcher
