#include "allreduce/backends/gpu.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>
#include <mutex>

#include "allreduce/api/status_error.h"
#include "hvd/build_config.h"

namespace hvd::runtime {
namespace {

// The directory this library was loaded from (dladdr on one of our own symbols).
std::string own_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&gpu_facts), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

GpuFacts load() {
  GpuFacts f;
  f.plugin_built = HVD_BUILD_HAS_NCCL != 0;
  if (!f.plugin_built) {
    f.load_error =
        "this libhvd was built without the NCCL plugin (HVD_WITH_NCCL=OFF, or no CUDA "
        "toolkit with NCCL at build time)";
    return f;
  }
  f.plugin_path = own_directory() + "/libhvd_nccl.so";
  // RTLD_LOCAL: NCCL's and CUDA's symbols stay out of the program's namespace.
  void* handle = ::dlopen(f.plugin_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    f.load_error = fmt::format("cannot load {}: {}", f.plugin_path, why != nullptr ? why : "?");
    return f;
  }
  auto entry = reinterpret_cast<hvd_nccl_plugin_entry>(::dlsym(handle, HVD_NCCL_PLUGIN_SYMBOL));
  const hvd_nccl_plugin* api = entry != nullptr ? entry() : nullptr;
  if (api == nullptr || api->abi != HVD_NCCL_PLUGIN_ABI) {
    f.load_error = fmt::format("{} is not a matching libhvd NCCL plugin (ABI {} expected)",
                               f.plugin_path, HVD_NCCL_PLUGIN_ABI);
    return f;  // the handle stays open: unloading libraries with CUDA state is unsafe
  }
  f.api = api;
  f.nccl_version = api->nccl_version();
  f.cuda_runtime_version = api->cuda_runtime_version();
  char why[512] = {};
  const int n = api->device_count(why, sizeof why);
  f.devices = n > 0 ? n : 0;
  if (n <= 0) f.no_device_reason = why;
  return f;
}

}  // namespace

const GpuFacts& gpu_facts() {
  static std::once_flag once;
  static GpuFacts facts;
  std::call_once(once, [] { facts = load(); });
  return facts;
}

std::string nccl_version_text(int code) {
  if (code < 0) return "unknown";
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

std::string cuda_version_text(int code) {
  if (code < 0) return "unknown";
  return fmt::format("{}.{}", code / 1000, code % 1000 / 10);
}

int choose_device(int local_rank, int device_count) {
  return device_count > 0 ? local_rank % device_count : -1;
}

std::string gpu_unavailable_reason(const GpuFacts& facts, const std::string& host) {
  if (facts.api == nullptr) return fmt::format("no NCCL on host {}: {}", host, facts.load_error);
  if (facts.devices == 0) {
    return fmt::format("no CUDA device visible on host {}: {}", host, facts.no_device_reason);
  }
  return {};
}

NcclUniqueId exchange_unique_id(Backend& cpu, int rank, const MakeUniqueId& make) {
  NcclUniqueId id{};
  std::array<char, 512> err{};
  int failed = 0;
  if (rank == 0) failed = make(id.data(), err.data(), err.size());
  cpu.broadcast(&failed, sizeof failed, 0);  // every rank learns if rank 0 could not make it
  if (failed != 0) {
    throw StatusError(HVD_ERR_BACKEND, fmt::format("rank 0 could not create the NCCL unique id: {}",
                                                   rank == 0 ? err.data() : "see rank 0's error"));
  }
  cpu.broadcast(id.data(), id.size(), 0);
  return id;
}

}  // namespace hvd::runtime
