// GPU support: the NCCL plugin (nccl/plugin_api.h), loaded on first use from libhvd's own
// directory, and what it reports. libhvd never links CUDA or NCCL: on a host without them the
// plugin fails to load and every GPU tensor gets an error that says why; CPU work is unaffected.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "allreduce/backends/backend.h"

#include "allreduce/nccl/plugin_api.h"

namespace hvd::runtime {

struct GpuFacts {
  bool plugin_built = false;  // this libhvd was built with the NCCL plugin
  std::string plugin_path;
  const hvd_nccl_plugin* api = nullptr;  // loaded, or nullptr with load_error
  std::string load_error;
  int nccl_version = -1;          // e.g. 22809
  int cuda_runtime_version = -1;  // e.g. 13000
  int devices = 0;                // visible devices; 0 with no_device_reason
  std::string no_device_reason;
};

// Loads the plugin once per process and asks it; later calls return the same facts.
const GpuFacts& gpu_facts();

// "2.28.9" from NCCL's version code (2.x: major*10000 + minor*100 + patch).
std::string nccl_version_text(int code);
// "13.0" from the CUDA runtime's version code (major*1000 + minor*10).
std::string cuda_version_text(int code);

// The device a rank uses: its local rank modulo the visible devices, as Horovod does.
int choose_device(int local_rank, int device_count);

// Why a CUDA tensor cannot run on this host, or "" when it can. `host` names it in the text.
std::string gpu_unavailable_reason(const GpuFacts& facts, const std::string& host);

// The NCCL unique id a communicator starts from: rank 0 makes it with `make` (the plugin's
// unique_id), then it travels over the CPU backend. Every rank first learns whether rank 0 could
// make it, so all throw the same StatusError instead of the others waiting for bytes that never
// come. A collective: every rank calls it.
using NcclUniqueId = std::array<char, HVD_NCCL_UNIQUE_ID_BYTES>;
using MakeUniqueId = std::function<int(void* id, char* err, std::size_t err_len)>;
NcclUniqueId exchange_unique_id(Backend& cpu, int rank, const MakeUniqueId& make);

}  // namespace hvd::runtime
