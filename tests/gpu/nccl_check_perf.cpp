// The GPU check of the NCCL plugin, its second part (nccl_check.h): NCCL's own one-rank average
// on a raw communicator, and the plugin's float32 sum allreduce timed against raw ncclAllReduce
// (CUDA events, the same stream, the same run).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/gpu/nccl_check.h"

namespace nccl_check {
namespace {

// ---- performance ----

struct Perf {
  const hvd_nccl_plugin* p;
  hvd_nccl_comm* comm;
  ncclComm_t raw;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  void* in;
  void* out;

  void sync_plugin() {
    char err[512] = "";
    if (p->synchronize(comm, stream, kSyncTimeoutMs, err, sizeof err) != 0) {
      die(1, std::string("perf: plugin synchronize failed: ") + err);
    }
  }

  // Microseconds per call, `iters` calls back to back between two events.
  double batch(bool plugin, size_t count, int iters) {
    CUDA(cudaEventRecord(start, stream));
    for (int i = 0; i < iters; ++i) {
      if (plugin) {
        char err[512] = "";
        if (p->allreduce(comm, in, out, count, HVD_FLOAT32, HVD_SUM, stream, err, sizeof err)) {
          die(1, std::string("perf: plugin allreduce failed: ") + err);
        }
      } else {
        NCCL(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, raw, stream));
      }
    }
    CUDA(cudaEventRecord(stop, stream));
    if (plugin) {
      sync_plugin();
    } else {
      CUDA(cudaStreamSynchronize(stream));
    }
    CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1000.0 / iters;
  }
};

}  // namespace

int run_perf(const hvd_nccl_plugin* p, hvd_nccl_comm* comm, cudaStream_t stream, size_t max_bytes) {
  size_t free_b = 0, total_b = 0;
  CUDA(cudaMemGetInfo(&free_b, &total_b));
  // Two buffers of the largest size, leaving room for NCCL and the driver.
  const size_t reserve = 512 * kMiB;
  size_t fit = free_b > reserve ? (free_b - reserve) / 2 : 0;
  size_t top = kMiB;
  while (top * 4 <= std::min(max_bytes, fit)) top *= 4;
  if (top > fit) {
    std::printf("perf: skipped (%zu MiB of device memory free)\n", free_b / kMiB);
    return 0;
  }

  ncclComm_t raw = one_rank_comm();

  Perf perf{p, comm, raw, stream, nullptr, nullptr, nullptr, nullptr};
  CUDA(cudaEventCreate(&perf.start));
  CUDA(cudaEventCreate(&perf.stop));
  CUDA(cudaMalloc(&perf.in, top));
  CUDA(cudaMalloc(&perf.out, top));
  CUDA(cudaMemset(perf.in, 0x3F, top));  // 0x3F3F3F3F: about 0.747f
  CUDA(cudaMemset(perf.out, 0, top));
  CUDA(cudaDeviceSynchronize());  // cudaMemset is asynchronous, on the legacy default stream

  std::printf(
      "\nperf: float32 sum allreduce, 1 rank; plugin = libhvd's NCCL plugin, raw = ncclAllReduce "
      "on its own communicator\n"
      "      time per call (best of 5 batches, CUDA events), algbw = bytes / time, "
      "ratio = plugin time / raw time\n");
  std::printf("%10s %12s %12s %12s %12s %8s\n", "size", "plugin us", "plugin GB/s", "raw us",
              "raw GB/s", "ratio");
  double worst_large = 0;
  for (size_t bytes = kMiB; bytes <= top; bytes *= 4) {
    const size_t count = bytes / 4;
    const int iters = static_cast<int>(std::clamp<size_t>(64 * kMiB / bytes * 5, 5, 100));
    perf.batch(true, count, 3);  // warm-up
    perf.batch(false, count, 3);
    double best_plugin = 1e300, best_raw = 1e300;
    for (int round = 0; round < 5; ++round) {  // alternate to cancel drift
      if (round % 2 == 0) {
        best_plugin = std::min(best_plugin, perf.batch(true, count, iters));
        best_raw = std::min(best_raw, perf.batch(false, count, iters));
      } else {
        best_raw = std::min(best_raw, perf.batch(false, count, iters));
        best_plugin = std::min(best_plugin, perf.batch(true, count, iters));
      }
    }
    const double ratio = best_plugin / best_raw;
    if (bytes >= 64 * kMiB) worst_large = std::max(worst_large, ratio);
    char size[32];
    if (bytes >= 1024 * kMiB) {
      std::snprintf(size, sizeof size, "%zu GiB", bytes / (1024 * kMiB));
    } else {
      std::snprintf(size, sizeof size, "%zu MiB", bytes / kMiB);
    }
    std::printf("%10s %12.1f %12.1f %12.1f %12.1f %8.3f\n", size, best_plugin,
                static_cast<double>(bytes) / (best_plugin * 1e3), best_raw,
                static_cast<double>(bytes) / (best_raw * 1e3), ratio);
    std::fflush(stdout);
  }
  if (worst_large > 0) {
    std::printf("perf: largest plugin/raw ratio at >= 64 MiB: %.3f%s\n", worst_large,
                worst_large > 1.10 ? " (plugin more than 10% slower: look into it)" : "");
  }

  CUDA(cudaFree(perf.in));
  CUDA(cudaFree(perf.out));
  CUDA(cudaEventDestroy(perf.start));
  CUDA(cudaEventDestroy(perf.stop));
  NCCL(ncclCommDestroy(raw));
  return 0;
}

// ---- NCCL's own one-rank average, for information ----

// Runs ncclAvg on a raw one-rank communicator (not through the plugin, which sums on one rank:
// allreduce/nccl/nccl_types.h) and says whether this NCCL has the bug. Information only: the
// plugin's own results are what the correctness cases judge.
void report_raw_one_rank_average(cudaStream_t stream) {
  const size_t n = kRawAverageCount;
  ncclComm_t raw = one_rank_comm();
  std::vector<float> in(n), got(n);
  for (size_t i = 0; i < n; ++i) in[i] = 1.0f + static_cast<float>(i % 1000) / 1024.0f;
  float* d_in = nullptr;
  float* d_out = nullptr;
  CUDA(cudaMalloc(&d_in, n * sizeof(float)));
  CUDA(cudaMalloc(&d_out, n * sizeof(float)));
  to_device(d_in, in.data(), n * sizeof(float));
  CUDA(cudaMemset(d_out, 0, n * sizeof(float)));  // 0.0f: never one of the inputs
  CUDA(cudaDeviceSynchronize());
  NCCL(ncclAllReduce(d_in, d_out, n, ncclFloat32, ncclAvg, raw, stream));
  CUDA(cudaStreamSynchronize(stream));
  CUDA(cudaMemcpy(got.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
  size_t wrong = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &in[i], sizeof(float)) != 0) {
      ++wrong;
      first = std::min(first, i);
    }
  }
  if (wrong == 0) {
    std::printf(
        "info raw ncclAvg on one rank, float32 n=%zu: correct (this NCCL has the fix of "
        "NVIDIA/nccl#1950)\n",
        n);
  } else {
    std::printf(
        "info raw ncclAvg on one rank, float32 n=%zu: %zu elements wrong from element "
        "%zu (NVIDIA/nccl#1950, fixed in NCCL 2.29.7); the plugin sums on one rank "
        "instead, so libhvd is not affected\n",
        n, wrong, first);
  }
  CUDA(cudaFree(d_in));
  CUDA(cudaFree(d_out));
  NCCL(ncclCommDestroy(raw));
}

}  // namespace nccl_check
