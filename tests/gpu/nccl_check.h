// What the two files of the GPU check of the NCCL plugin share (nccl_check.cpp: correctness and
// main; nccl_check_perf.cpp: NCCL's own one-rank average and the timing): the checked CUDA and
// NCCL calls and a one-rank communicator of NCCL's own. tests/gpu/README.md says what it checks.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "allreduce/nccl/plugin_api.h"

namespace nccl_check {

constexpr int kSyncTimeoutMs = 60000;
constexpr size_t kMiB = size_t{1} << 20;

// NCCL before 2.29.7 (NVIDIA/nccl#1950) splits a one-rank average among up to 32 blocks by
// count / blocks rounded down to whole 16-byte packs, and the last (count mod 32) elements stay
// unwritten whenever that quotient is already a whole number of packs: 1,000,197 = 32 * 31256 + 5
// with 31256 a multiple of 8 hits it for float16, bfloat16, float32 and float64 alike.
constexpr size_t kRawAverageCount = 1000197;

[[noreturn]] inline void die(int code, const std::string& msg) {
  std::fprintf(stderr, "nccl check: %s\n", msg.c_str());
  std::printf("nccl check: FAILED\n");
  std::fflush(stdout);
  std::exit(code);
}

inline void cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    die(1, std::string(call) + " failed: " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) +
               ")");
  }
}

inline void nccl(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) die(1, std::string(call) + " failed: " + ncclGetErrorString(rc));
}

#define CUDA(call) cuda((call), #call)
#define NCCL(call) nccl((call), #call)

// cudaMemcpy from pageable host memory may return before the data reaches the device, and the
// collectives run on a non-blocking stream that does not wait for the legacy default stream:
// wait for the whole device before the data is used.
inline void to_device(void* dst, const void* src, size_t bytes) {
  CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  CUDA(cudaDeviceSynchronize());
}

// A communicator of NCCL's own on device 0, one rank: the raw contender beside the plugin's.
inline ncclComm_t one_rank_comm() {
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  ncclComm_t raw = nullptr;
  NCCL(ncclCommInitRank(&raw, 1, id, 0));
  return raw;
}

// nccl_check_perf.cpp. Says whether this NCCL's own one-rank average has the bug above
// (information only: the plugin sums on one rank, allreduce/nccl/nccl_types.h).
void report_raw_one_rank_average(cudaStream_t stream);
// The timing of the plugin against raw ncclAllReduce, up to `max_bytes`.
int run_perf(const hvd_nccl_plugin* p, hvd_nccl_comm* comm, cudaStream_t stream, size_t max_bytes);

}  // namespace nccl_check
