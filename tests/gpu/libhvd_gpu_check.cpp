// The GPU check of the whole of libhvd: its public API on CUDA tensors, through the engine
// (negotiation, named async ops, validation) and the NCCL plugin it dlopens from its own folder.
// Where tests/gpu/nccl_check.cpp calls the plugin directly, this one is a training program's view.
// Runs as one process (size 1) or under hvdrun / mpirun with one GPU per rank; every expected value
// is computed for the job's size. tests/gpu/README.md says how to run it.
//
//   1. allreduce of every dtype x reduce op, out of place and in place, on a non-default stream, at
//      1 and 1,000,197 elements (a count whose tail NCCL's one-rank average drops before 2.29.7),
//      with libhvd_check's inputs and expected results (exact at up to 4 ranks).
//   2. 16 named async allreduces on 4 streams, waited in reverse order.
//   3. broadcast (root size-1), allgather and reducescatter with device-memory allocators; int16
//      broadcast and allgather (NCCL has no int16 type: the plugin moves it as bytes).
//   4. What libhvd refuses on GPU tensors (prescale, alltoall, int16 reductions) comes back as
//      HVD_ERR_UNSUPPORTED.
//   5. Rank 0 times hvd::allreduce (sum, float32, synchronous) at 4 KiB, 1 MiB and 64 MiB, and, at
//      size 1, a raw ncclAllReduce + cudaStreamSynchronize on its own communicator beside it.
//
// Usage: libhvd_gpu_check [--no-timing]
// Exit: 0 all correct ("libhvd gpu check: OK"), 1 a check failed, 2 a bad argument, 77 no usable
// GPU here (skipped).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/libhvd/libhvd_check.h"  // typed host data, inputs, expected results, expect()

namespace {

using namespace libhvd_check;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "rank %d: libhvd gpu check: %s\n", g_rank, msg.c_str());
  std::printf("libhvd gpu check: FAILED\n");
  std::fflush(stdout);
  std::exit(1);
}

void cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    die(std::string(call) + " failed: " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) +
        ")");
  }
}
#define CUDA(call) cuda((call), #call)

hvd::Tensor device_tensor(void* p, DataType t, std::vector<std::int64_t> shape,
                          cudaStream_t stream) {
  return hvd::Tensor{p, t, std::move(shape), hvd::Device::cuda(hvd::gpu_device()), stream};
}

// Synchronous copies: the collectives run on non-blocking streams.
void upload(void* dst, const Data& d) {
  CUDA(cudaMemcpy(dst, d.bytes.data(), d.bytes.size(), cudaMemcpyHostToDevice));
  CUDA(cudaDeviceSynchronize());
}

Data download(const void* src, DataType t, std::size_t n) {
  Data d(t, n);
  CUDA(cudaMemcpy(d.ptr(), src, d.bytes.size(), cudaMemcpyDeviceToHost));
  return d;
}

// This rank's input for `op` (libhvd_check.h: exact sums and products at up to 4 ranks).
Data inputs(ReduceOp op, DataType t, std::size_t n) {
  Data d(t, n);
  for (std::size_t i = 0; i < n; ++i) d.set(i, input(op, t, g_rank, i));
  return d;
}

void say(const char* what, long failures_before) {
  std::printf("rank %d: %s %s\n", g_rank, g_failures == failures_before ? "ok  " : "FAIL", what);
}

void check_allreduce(cudaStream_t stream, std::size_t n, unsigned char* d_in,
                     unsigned char* d_out) {
  for (const DataType t : kAllTypes) {
    if (t == DataType::kInt16) continue;  // NCCL cannot reduce int16: check_others() refuses it
    const long before = g_failures;
    for (const ReduceOp op : kAllOps) {
      const Data in = inputs(op, t, n);
      const std::string tag = name(op) + " " + name(t) + " n=" + std::to_string(n);
      auto want = [&](std::size_t i) { return expected_reduction(op, t, i); };
      const std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
      upload(d_in, in);
      CUDA(cudaMemset(d_out, 0xA5, in.bytes.size()));
      CUDA(cudaDeviceSynchronize());
      hvd::allreduce(device_tensor(d_in, t, shape, stream), device_tensor(d_out, t, shape, stream),
                     hvd::AllreduceOptions{op});
      expect_elements(download(d_out, t, n), n, want, "allreduce " + tag);
      upload(d_out, in);
      hvd::allreduce(device_tensor(d_out, t, shape, stream), hvd::AllreduceOptions{op});
      expect_elements(download(d_out, t, n), n, want, "allreduce in place " + tag);
    }
    const std::string what =
        "allreduce x5 ops (out of place, in place) " + name(t) + " n=" + std::to_string(n);
    say(what.c_str(), before);
  }
}

void check_async(std::vector<cudaStream_t>& streams) {
  constexpr int kOpsInFlight = 16;
  std::vector<void*> bufs(kOpsInFlight);
  std::vector<std::size_t> counts(kOpsInFlight);
  std::vector<hvd::Handle> handles(kOpsInFlight);
  const long before = g_failures;
  for (int k = 0; k < kOpsInFlight; ++k) {
    counts[k] = 1 + static_cast<std::size_t>(k) * 40009;
    CUDA(cudaMalloc(&bufs[k], counts[k] * 4));
    upload(bufs[k], inputs(ReduceOp::kSum, DataType::kFloat32, counts[k]));
  }
  for (int k = 0; k < kOpsInFlight; ++k) {
    handles[k] = hvd::allreduce_async(
        "gpu.grad." + std::to_string(k),
        device_tensor(bufs[k], DataType::kFloat32, {static_cast<std::int64_t>(counts[k])},
                      streams[static_cast<std::size_t>(k) % streams.size()]),
        hvd::AllreduceOptions{ReduceOp::kSum});
  }
  for (int k = kOpsInFlight - 1; k >= 0; --k) {
    handles[k].wait();
    expect_elements(
        download(bufs[k], DataType::kFloat32, counts[k]), counts[k],
        [](std::size_t i) { return expected_reduction(ReduceOp::kSum, DataType::kFloat32, i); },
        "async allreduce gpu.grad." + std::to_string(k));
    CUDA(cudaFree(bufs[k]));
  }
  const std::string what = std::to_string(kOpsInFlight) + " named async allreduces on " +
                           std::to_string(streams.size()) + " streams, waited in reverse order";
  say(what.c_str(), before);
}

void check_others(cudaStream_t stream) {
  const long before = g_failures;
  // broadcast from the last rank
  {
    const std::size_t n = 100003;
    void* d = nullptr;
    CUDA(cudaMalloc(&d, n * 8));
    upload(d, inputs(ReduceOp::kSum, DataType::kFloat64, n));
    hvd::broadcast(device_tensor(d, DataType::kFloat64, {static_cast<std::int64_t>(n)}, stream),
                   g_size - 1);
    expect_elements(
        download(d, DataType::kFloat64, n), n,
        [](std::size_t i) { return input(ReduceOp::kSum, DataType::kFloat64, g_size - 1, i); },
        "broadcast float64 from the last rank");
    CUDA(cudaFree(d));
  }
  std::vector<void*> allocated;
  auto device_alloc = [&allocated](const std::vector<std::int64_t>&, std::size_t bytes) -> void* {
    void* p = nullptr;
    CUDA(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
    allocated.push_back(p);
    return p;
  };
  // broadcast of int16 (NCCL has no int16 type: moved as bytes) from the last rank
  {
    const std::size_t n = 100003;
    void* d = nullptr;
    CUDA(cudaMalloc(&d, n * 2));
    upload(d, inputs(ReduceOp::kMin, DataType::kInt16, n));
    hvd::broadcast(device_tensor(d, DataType::kInt16, {static_cast<std::int64_t>(n)}, stream),
                   g_size - 1);
    expect_elements(
        download(d, DataType::kInt16, n), n,
        [](std::size_t i) { return input(ReduceOp::kMin, DataType::kInt16, g_size - 1, i); },
        "broadcast int16 from the last rank");
    CUDA(cudaFree(d));
  }
  // allgather: 3 x 5 int32 from every rank
  {
    const std::size_t n = 3 * 5;
    void* d = nullptr;
    CUDA(cudaMalloc(&d, n * 4));
    upload(d, inputs(ReduceOp::kSum, DataType::kInt32, n));
    hvd::allgather(device_tensor(d, DataType::kInt32, {3, 5}, stream), device_alloc);
    expect(allocated.size() == 1, "allgather int32: the allocator is called once");
    if (allocated.size() == 1) {
      const std::size_t total = n * static_cast<std::size_t>(g_size);
      expect_elements(
          download(allocated[0], DataType::kInt32, total), total,
          [&](std::size_t i) {
            return input(ReduceOp::kSum, DataType::kInt32, static_cast<int>(i / n), i % n);
          },
          "allgather int32");
    }
    CUDA(cudaFree(d));
  }
  // allgather: 4 x 3 int16 (negative values included) from every rank
  {
    const std::size_t n = 4 * 3;
    void* d = nullptr;
    CUDA(cudaMalloc(&d, n * 2));
    upload(d, inputs(ReduceOp::kMin, DataType::kInt16, n));
    const std::size_t was = allocated.size();
    hvd::allgather(device_tensor(d, DataType::kInt16, {4, 3}, stream), device_alloc);
    expect(allocated.size() == was + 1, "allgather int16: the allocator is called once");
    if (allocated.size() == was + 1) {
      const std::size_t total = n * static_cast<std::size_t>(g_size);
      expect_elements(
          download(allocated.back(), DataType::kInt16, total), total,
          [&](std::size_t i) {
            return input(ReduceOp::kMin, DataType::kInt16, static_cast<int>(i / n), i % n);
          },
          "allgather int16");
    }
    CUDA(cudaFree(d));
  }
  // reducescatter: 2 rows of 7 per rank, sum
  {
    const std::size_t rows = 2 * static_cast<std::size_t>(g_size), n = rows * 7;
    void* d = nullptr;
    CUDA(cudaMalloc(&d, n * 4));
    upload(d, inputs(ReduceOp::kSum, DataType::kFloat32, n));
    const std::size_t was = allocated.size();
    hvd::reducescatter(
        device_tensor(d, DataType::kFloat32, {static_cast<std::int64_t>(rows), 7}, stream),
        device_alloc, ReduceOp::kSum);
    expect(allocated.size() == was + 1, "reducescatter float32: the allocator is called once");
    if (allocated.size() == was + 1) {
      const std::size_t block = 2 * 7, offset = block * static_cast<std::size_t>(g_rank);
      expect_elements(
          download(allocated.back(), DataType::kFloat32, block), block,
          [&](std::size_t i) {
            return expected_reduction(ReduceOp::kSum, DataType::kFloat32, offset + i);
          },
          "reducescatter sum float32");
    }
    CUDA(cudaFree(d));
  }
  for (void* p : allocated) CUDA(cudaFree(p));
  say("broadcast, allgather, reducescatter", before);

  // What is refused on GPU tensors, with HVD_ERR_UNSUPPORTED and a message.
  float* d = nullptr;
  CUDA(cudaMalloc(&d, 64 * sizeof(float)));
  auto refused = [&](const std::string& what, auto&& call) {
    try {
      call();
      expect(false, what + ": libhvd accepted it");
    } catch (const hvd::RuntimeError& e) {
      expect(e.status() == HVD_ERR_UNSUPPORTED,
             what + ": status " + hvd_status_name(e.status()) + ": " + e.what());
      if (e.status() == HVD_ERR_UNSUPPORTED) {
        std::printf("rank %d: ok   %s: refused (%s)\n", g_rank, what.c_str(), e.what());
      }
    }
  };
  refused("allreduce with prescale 2 on a GPU tensor", [&] {
    hvd::AllreduceOptions o{ReduceOp::kSum};
    o.prescale = 2.0;
    hvd::allreduce(device_tensor(d, DataType::kFloat32, {64}, stream), o);
  });
  refused("allreduce of an int16 GPU tensor (NCCL has no int16 type)", [&] {
    hvd::allreduce(device_tensor(d, DataType::kInt16, {64}, stream), {ReduceOp::kSum});
  });
  refused("reducescatter of an int16 GPU tensor (NCCL has no int16 type)", [&] {
    hvd::reducescatter(
        device_tensor(d, DataType::kInt16, {static_cast<std::int64_t>(2 * g_size)}, stream),
        device_alloc, ReduceOp::kSum);
  });
  refused("alltoall of a GPU tensor", [&] {
    hvd::alltoall(device_tensor(d, DataType::kFloat32, {static_cast<std::int64_t>(g_size)}, stream),
                  {}, device_alloc);
  });
  CUDA(cudaFree(d));
}

// ---- timing (rank 0 prints) ----

double us_per_call(int calls, auto&& one) {
  double best = 1e300;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) one();
    const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count() / calls);
  }
  return best;
}

struct Times {
  double hvd_us;
  double raw_us;  // < 0: no raw contender (it needs size 1)
};

// Warms both up, then alternates them to cancel drift: the best of 6 batches of `calls` each.
Times best_of(int warmups, int calls, auto&& hvd_call, auto&& raw_call, bool with_raw) {
  for (int i = 0; i < warmups; ++i) hvd_call();
  for (int i = 0; with_raw && i < warmups; ++i) raw_call();
  Times t{1e300, with_raw ? 1e300 : -1};
  for (int round = 0; round < 2; ++round) {
    t.hvd_us = std::min(t.hvd_us, us_per_call(calls, hvd_call));
    if (with_raw) t.raw_us = std::min(t.raw_us, us_per_call(calls, raw_call));
  }
  return t;
}

void print_row(const char* where, std::size_t bytes, Times t) {
  if (g_rank != 0) return;
  char size[32];
  std::snprintf(size, sizeof size, bytes >= (1u << 20) ? "%zu MiB" : "%zu KiB",
                bytes >= (1u << 20) ? bytes >> 20 : bytes >> 10);
  if (t.raw_us > 0) {
    std::printf("%6s %8s %10.1f %10.1f %10.1f %8.2f\n", where, size, t.hvd_us, t.raw_us,
                t.hvd_us - t.raw_us, t.hvd_us / t.raw_us);
  } else {
    std::printf("%6s %8s %10.1f %10s %10s %8s\n", where, size, t.hvd_us, "-", "-", "-");
  }
}

void raw_allreduce(const void* in, void* out, std::size_t n, ncclComm_t raw, cudaStream_t stream) {
  if (ncclAllReduce(in, out, n, ncclFloat32, ncclSum, raw, stream) != ncclSuccess) {
    die("raw ncclAllReduce failed");
  }
}

// A synchronous allreduce of each size on the GPU, out of place (in place, a one-rank sum is no
// work at all for NCCL); `raw` null: hvd alone.
void time_gpu_sizes(cudaStream_t stream, ncclComm_t raw) {
  for (const std::size_t bytes : {std::size_t{4096}, std::size_t{1} << 20, std::size_t{64} << 20}) {
    const std::size_t n = bytes / 4;
    void* in = nullptr;
    void* out = nullptr;
    CUDA(cudaMalloc(&in, bytes));
    CUDA(cudaMalloc(&out, bytes));
    CUDA(cudaMemset(in, 0, bytes));
    CUDA(cudaDeviceSynchronize());
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
    const auto tin = device_tensor(in, DataType::kFloat32, shape, stream);
    const auto tout = device_tensor(out, DataType::kFloat32, shape, stream);
    const Times t = best_of(
        10, bytes >= (std::size_t{64} << 20) ? 20 : 200,
        [&] { hvd::allreduce(tin, tout, hvd::AllreduceOptions{ReduceOp::kSum}); },
        [&] {
          raw_allreduce(in, out, n, raw, stream);
          CUDA(cudaStreamSynchronize(stream));
        },
        raw != nullptr);
    print_row("gpu", bytes, t);
    CUDA(cudaFree(in));
    CUDA(cudaFree(out));
  }
}

// The same 4 KiB allreduce on host memory, against memcpy at size 1.
void time_host() {
  std::vector<float> hin(1024, 1.0f), hout(1024);
  const Times t = best_of(
      10, 200,
      [&] {
        hvd::allreduce(hvd::tensor(hin.data(), hin.size()), hvd::tensor(hout.data(), hout.size()),
                       hvd::AllreduceOptions{ReduceOp::kSum});
      },
      [&] {
        std::memcpy(hout.data(), hin.data(), hin.size() * sizeof(float));
        asm volatile("" ::"r"(hout.data()) : "memory");
      },
      g_size == 1);
  print_row("host", 4096, t);
}

// A step: 100 gradients of 16 KiB as named async ops, then every wait (GPU tensors are not
// fused), against 100 ncclAllReduce calls in one NCCL group and one stream wait.
void time_gpu_step(cudaStream_t stream, ncclComm_t raw) {
  constexpr int kTensors = 100;
  constexpr std::size_t kCount = 4096;
  std::vector<void*> ins(kTensors), outs(kTensors);
  for (int k = 0; k < kTensors; ++k) {
    CUDA(cudaMalloc(&ins[k], kCount * 4));
    CUDA(cudaMalloc(&outs[k], kCount * 4));
    CUDA(cudaMemset(ins[k], 0, kCount * 4));
  }
  CUDA(cudaDeviceSynchronize());
  std::vector<std::string> names(kTensors);
  for (int k = 0; k < kTensors; ++k) names[k] = "gpu.step." + std::to_string(k);
  std::vector<hvd::Handle> handles(kTensors);
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(kCount)};
  const Times t = best_of(
      3, 10,
      [&] {
        for (int k = 0; k < kTensors; ++k) {
          handles[k] = hvd::allreduce_async(
              names[k], device_tensor(ins[k], DataType::kFloat32, shape, stream),
              device_tensor(outs[k], DataType::kFloat32, shape, stream),
              hvd::AllreduceOptions{ReduceOp::kSum});
        }
        for (auto& h : handles) h.wait();
      },
      [&] {
        ncclGroupStart();
        for (int k = 0; k < kTensors; ++k) raw_allreduce(ins[k], outs[k], kCount, raw, stream);
        if (ncclGroupEnd() != ncclSuccess) die("ncclGroupEnd failed");
        CUDA(cudaStreamSynchronize(stream));
      },
      raw != nullptr);
  if (g_rank == 0) {
    char raw_text[32] = "- (size 1 only)";
    if (t.raw_us > 0) std::snprintf(raw_text, sizeof raw_text, "%.1f us", t.raw_us);
    std::printf(
        "step: %d x 16 KiB named async, then wait all: hvd %.1f us (%.2f us a tensor); "
        "raw, one NCCL group and one wait: %s\n",
        kTensors, t.hvd_us, t.hvd_us / kTensors, raw_text);
  }
  for (int k = 0; k < kTensors; ++k) {
    CUDA(cudaFree(ins[k]));
    CUDA(cudaFree(outs[k]));
  }
}

void timing(cudaStream_t stream) {
  ncclComm_t raw = nullptr;  // NCCL's own communicator: one rank only (it needs no exchange)
  if (g_size == 1) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&raw, 1, id, 0) != ncclSuccess) {
      raw = nullptr;
    }
  }
  if (g_rank == 0) {
    std::printf(
        "\ntiming: synchronous allreduce, sum, float32, out of place, %d rank(s)\n"
        "  gpu: hvd = hvd::allreduce (engine, plugin, stream wait), raw = ncclAllReduce + "
        "cudaStreamSynchronize%s\n"
        "  host: hvd = hvd::allreduce on host memory (%s), raw = memcpy (size 1 only)\n"
        "%6s %8s %10s %10s %10s %8s\n",
        g_size, g_size == 1 ? "" : " (size 1 only)", hvd::backend_name().c_str(), "where", "size",
        "hvd us", "raw us", "hvd-raw", "ratio");
  }
  time_gpu_sizes(stream, raw);
  time_host();
  time_gpu_step(stream, raw);
  if (raw != nullptr) ncclCommDestroy(raw);
}

}  // namespace

int main(int argc, char** argv) {
  bool time_it = true;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-timing") {
      time_it = false;
    } else {
      std::fprintf(stderr,
                   "libhvd_gpu_check: unknown argument '%s'\nusage: libhvd_gpu_check "
                   "[--no-timing]\n",
                   argv[i]);
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    hvd::init();
    g_rank = hvd::rank();
    g_size = hvd::size();
    const int device = hvd::gpu_device();
    if (device < 0) {
      std::printf(
          "rank %d: hvd::gpu_device() is -1: no usable CUDA device here (a GPU check; "
          "tests/gpu/README.md)\nlibhvd gpu check: skipped (no GPU)\n",
          g_rank);
      hvd::shutdown();
      return 77;
    }
    cudaDeviceProp prop{};
    CUDA(cudaSetDevice(device));
    CUDA(cudaGetDeviceProperties(&prop, device));
    std::printf("rank %d of %d: backend %s, CUDA device %d: %s\n", g_rank, g_size,
                hvd::backend_name().c_str(), device, prop.name);

    std::vector<cudaStream_t> streams(4);
    for (auto& s : streams) CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const std::size_t counts[] = {1, 1000197};
    unsigned char* d_in = nullptr;
    unsigned char* d_out = nullptr;
    CUDA(cudaMalloc(&d_in, counts[1] * 8));
    CUDA(cudaMalloc(&d_out, counts[1] * 8));
    for (const std::size_t n : counts) check_allreduce(streams[0], n, d_in, d_out);
    CUDA(cudaFree(d_in));
    CUDA(cudaFree(d_out));
    check_async(streams);
    check_others(streams[1]);
    std::printf("rank %d: correctness: %ld checks, %ld failed\n", g_rank, g_checks, g_failures);
    if (time_it) timing(streams[2]);
    for (auto& s : streams) CUDA(cudaStreamDestroy(s));
    hvd::shutdown();
  } catch (const hvd::RuntimeError& e) {
    die(std::string("unexpected error: ") + hvd_status_name(e.status()) + ": " + e.what());
  }
  if (g_failures != 0) {
    std::printf("libhvd gpu check: FAILED (%ld of %ld checks)\n", g_failures, g_checks);
    return 1;
  }
  std::printf("libhvd gpu check: OK\n");
  return 0;
}
