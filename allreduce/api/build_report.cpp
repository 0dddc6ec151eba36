// hvd_build_report(): what this libhvd was built with and what works on this host now, as JSON,
// for `hvdrun --check-build` (which loads libhvd with dlopen rather than linking it).
#include <nlohmann/json.hpp>

#include <cstring>

#include "allreduce/backends/gpu.h"
#include "hvd/build_config.h"
#include "hvd/hvd.h"

#if HVD_BUILD_HAS_MPI
#include <mpi.h>
#endif

namespace {

nlohmann::ordered_json report() {
  using json = nlohmann::ordered_json;
  json doc;
  doc["libhvd_version"] = HVD_VERSION_STRING;
  json mpi{{"built", HVD_BUILD_HAS_MPI != 0}};
#if HVD_BUILD_HAS_MPI
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(library, &len);  // allowed before MPI_Init
  std::string text(library, static_cast<std::size_t>(len));
  mpi["library"] = text.substr(0, text.find_first_of(",\n"));
#endif
  json gloo{{"built", HVD_BUILD_HAS_GLOO != 0}};
#ifdef HVD_GLOO_VERSION
  gloo["version"] = HVD_GLOO_VERSION;
#endif
  const hvd::runtime::GpuFacts& gpu = hvd::runtime::gpu_facts();
  json nccl{{"built", gpu.plugin_built}, {"loaded", gpu.api != nullptr}};
  if (!gpu.plugin_path.empty()) nccl["plugin"] = gpu.plugin_path;
  if (gpu.api != nullptr) {
    nccl["version"] = hvd::runtime::nccl_version_text(gpu.nccl_version);
  } else {
    nccl["error"] = gpu.load_error;
  }
  doc["engines"] = {{"mpi", mpi}, {"gloo", gloo}, {"nccl", nccl}};
  doc["cuda_runtime"] = gpu.api != nullptr && gpu.cuda_runtime_version >= 0
                            ? json(hvd::runtime::cuda_version_text(gpu.cuda_runtime_version))
                            : json(nullptr);
  json gpus{{"count", gpu.devices}};
  if (gpu.devices == 0) gpus["reason"] = gpu.api != nullptr ? gpu.no_device_reason : gpu.load_error;
  doc["gpus"] = gpus;
  return doc;
}

}  // namespace

extern "C" size_t hvd_build_report(char* buf, size_t len) {
  try {
    const std::string text = report().dump();
    if (buf != nullptr && len > 0) {
      const std::size_t n = std::min(len - 1, text.size());
      std::memcpy(buf, text.data(), n);
      buf[n] = '\0';
    }
    return text.size() + 1;
  } catch (...) {
    return 0;
  }
}
