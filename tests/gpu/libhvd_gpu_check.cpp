// The GPU check of the whole of libhvd: its public API on CUDA tensors, through the engine
// (negotiation, named async ops, validation) and the NCCL plugin it dlopens from its own folder.
// Where tests/gpu/nccl_check.cpp calls the plugin directly, this one is a training program's view.
// Runs as one process (size 1) or under hvdrun / mpirun with one GPU per rank; every expected value
// is computed for the job's size. tests/gpu/README.md says how to run it.
//
//   1. allreduce of every dtype x reduce op, out of place and in place, on a non-default stream, at
//      1 and 1,000,197 elements (a count whose tail NCCL's one-rank average drops before 2.29.7).
//   2. 16 named async allreduces on 4 streams, waited in reverse order.
//   3. broadcast (root size-1), allgather and reducescatter with device-memory allocators.
//   4. What libhvd refuses on GPU tensors (prescale, alltoall) comes back as HVD_ERR_UNSUPPORTED.
//   5. Rank 0 times hvd::allreduce (sum, float32, synchronous) at 4 KiB, 1 MiB and 64 MiB, and, at
//      size 1, a raw ncclAllReduce + cudaStreamSynchronize on its own communicator beside it.
//
// Exit: 0 all correct ("libhvd gpu check: OK"), 1 a check failed, 77 no usable GPU here (skipped).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvd/hvd.hpp"

namespace {

using hvd::DataType;
using hvd::ReduceOp;

int g_rank = 0;
int g_size = 1;
int g_failures = 0;
int g_cases = 0;

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

void fail(const std::string& what, const std::string& why) {
  ++g_failures;
  std::printf("rank %d: FAIL %s: %s\n", g_rank, what.c_str(), why.c_str());
}

// ---- host-side values of every dtype, through double ----

std::size_t esize(DataType t) { return hvd::element_size(t); }

void put(DataType t, unsigned char* p, double v) {
  switch (t) {
    case DataType::kUInt8: {
      const auto x = static_cast<std::uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case DataType::kInt8: {
      const auto x = static_cast<std::int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case DataType::kInt32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DataType::kInt64: {
      const auto x = static_cast<std::int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DataType::kFloat16: {
      const auto x = hvd::float16_from(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case DataType::kBFloat16: {
      const auto x = hvd::bfloat16_from(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case DataType::kFloat32: {
      const auto x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DataType::kFloat64:
      std::memcpy(p, &v, 8);
      break;
  }
}

double get(DataType t, const unsigned char* p) {
  switch (t) {
    case DataType::kUInt8: {
      std::uint8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case DataType::kInt8: {
      std::int8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case DataType::kInt32: {
      std::int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DataType::kInt64: {
      std::int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case DataType::kFloat16: {
      hvd::float16 x;
      std::memcpy(&x, p, 2);
      return hvd::to_float(x);
    }
    case DataType::kBFloat16: {
      hvd::bfloat16 x;
      std::memcpy(&x, p, 2);
      return hvd::to_float(x);
    }
    case DataType::kFloat32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DataType::kFloat64: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
  }
  return 0;
}

bool is_float(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

// How far an average may be from the exact one (NCCL scales each input by 1/size first).
double tolerance(DataType t, double expected) {
  switch (t) {
    case DataType::kFloat16:
      return std::abs(expected) * 2e-3;
    case DataType::kBFloat16:
      return std::abs(expected) * 1.6e-2;
    case DataType::kFloat32:
      return std::abs(expected) * 1e-6;
    case DataType::kFloat64:
      return std::abs(expected) * 1e-14;
    default:
      return 0;
  }
}

// The inputs: small positive integers (1..11; 1 or 2 for a product), exact in every dtype in sums
// of up to 11 ranks and products of up to 6.
double input(int rank, std::size_t i) { return static_cast<double>((i * 7 + rank * 3) % 11 + 1); }
double product_input(int rank, std::size_t i) { return static_cast<double>((i + rank) % 2 + 1); }

double expected(ReduceOp op, DataType t, std::size_t i) {
  double acc = op == ReduceOp::kProduct ? 1 : 0;
  for (int r = 0; r < g_size; ++r) {
    const double v = op == ReduceOp::kProduct ? product_input(r, i) : input(r, i);
    if (r == 0 && (op == ReduceOp::kMin || op == ReduceOp::kMax)) acc = v;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc = is_float(t) ? acc / g_size : std::trunc(acc / g_size);
  return acc;
}

std::vector<unsigned char> host_values(DataType t, std::size_t n, double (*f)(int, std::size_t)) {
  std::vector<unsigned char> h(n * esize(t));
  for (std::size_t i = 0; i < n; ++i) put(t, h.data() + i * esize(t), f(g_rank, i));
  return h;
}

template <class Expect>
void compare(const std::string& what, DataType t, const void* device, std::size_t n,
             Expect&& want) {
  ++g_cases;
  std::vector<unsigned char> got(n * esize(t));
  CUDA(cudaMemcpy(got.data(), device, got.size(), cudaMemcpyDeviceToHost));
  std::size_t bad = 0, first = n;
  double first_got = 0, first_want = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = get(t, got.data() + i * esize(t));
    const double w = want(i);
    if (!(std::abs(g - w) <= tolerance(t, w))) {
      if (bad++ == 0) {
        first = i;
        first_got = g;
        first_want = w;
      }
    }
  }
  if (bad != 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%zu of %zu elements wrong, first %zu: got %.9g, want %.9g", bad,
                  n, first, first_got, first_want);
    fail(what, buf);
  }
}

hvd::Tensor device_tensor(void* p, DataType t, std::vector<std::int64_t> shape,
                          cudaStream_t stream) {
  return hvd::Tensor{p, t, std::move(shape), hvd::Device::cuda(hvd::gpu_device()), stream};
}

// Upload synchronously: the collectives run on a non-blocking stream.
void upload(void* dst, const std::vector<unsigned char>& h) {
  CUDA(cudaMemcpy(dst, h.data(), h.size(), cudaMemcpyHostToDevice));
  CUDA(cudaDeviceSynchronize());
}

constexpr DataType kDtypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                                DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                                DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

void check_allreduce(cudaStream_t stream, std::size_t n, unsigned char* d_in,
                     unsigned char* d_out) {
  for (const DataType t : kDtypes) {
    const int before = g_failures;
    for (const ReduceOp op : kOps) {
      const auto h =
          op == ReduceOp::kProduct ? host_values(t, n, product_input) : host_values(t, n, input);
      const std::string tag =
          std::string(hvd::op_name(op)) + " " + hvd::dtype_name(t) + " n=" + std::to_string(n);
      auto want = [&](std::size_t i) { return expected(op, t, i); };
      const std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
      upload(d_in, h);
      CUDA(cudaMemset(d_out, 0xA5, h.size()));
      CUDA(cudaDeviceSynchronize());
      hvd::allreduce(device_tensor(d_in, t, shape, stream), device_tensor(d_out, t, shape, stream),
                     hvd::AllreduceOptions{op});
      compare("allreduce " + tag, t, d_out, n, want);
      upload(d_out, h);
      hvd::allreduce(device_tensor(d_out, t, shape, stream), hvd::AllreduceOptions{op});
      compare("allreduce in place " + tag, t, d_out, n, want);
    }
    std::printf("rank %d: %s allreduce x5 ops (out of place, in place) %-8s n=%zu\n", g_rank,
                g_failures == before ? "ok  " : "FAIL", hvd::dtype_name(t), n);
  }
}

void check_async(std::vector<cudaStream_t>& streams) {
  constexpr int kOpsInFlight = 16;
  std::vector<unsigned char*> bufs(kOpsInFlight);
  std::vector<std::size_t> counts(kOpsInFlight);
  std::vector<hvd::Handle> handles(kOpsInFlight);
  const int before = g_failures;
  for (int k = 0; k < kOpsInFlight; ++k) {
    counts[k] = 1 + static_cast<std::size_t>(k) * 40009;
    CUDA(cudaMalloc(&bufs[k], counts[k] * 4));
    upload(bufs[k], host_values(DataType::kFloat32, counts[k], input));
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
    compare("async allreduce gpu.grad." + std::to_string(k), DataType::kFloat32, bufs[k], counts[k],
            [](std::size_t i) { return expected(ReduceOp::kSum, DataType::kFloat32, i); });
    CUDA(cudaFree(bufs[k]));
  }
  std::printf("rank %d: %s %d named async allreduces on %zu streams, waited in reverse order\n",
              g_rank, g_failures == before ? "ok  " : "FAIL", kOpsInFlight, streams.size());
}

void check_others(cudaStream_t stream) {
  const int before = g_failures;
  // broadcast from the last rank
  {
    const std::size_t n = 100003;
    unsigned char* d = nullptr;
    CUDA(cudaMalloc(&d, n * 8));
    upload(d, host_values(DataType::kFloat64, n, input));
    hvd::broadcast(device_tensor(d, DataType::kFloat64, {static_cast<std::int64_t>(n)}, stream),
                   g_size - 1);
    compare("broadcast float64 from the last rank", DataType::kFloat64, d, n,
            [](std::size_t i) { return input(g_size - 1, i); });
    CUDA(cudaFree(d));
  }
  // allgather: 3 x 5 int32 rows from every rank
  std::vector<void*> allocated;
  auto device_alloc = [&allocated](const std::vector<std::int64_t>&, std::size_t bytes) -> void* {
    void* p = nullptr;
    CUDA(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
    allocated.push_back(p);
    return p;
  };
  {
    const std::size_t rows = 3, cols = 5, n = rows * cols;
    unsigned char* d = nullptr;
    CUDA(cudaMalloc(&d, n * 4));
    upload(d, host_values(DataType::kInt32, n, input));
    hvd::allgather(device_tensor(d, DataType::kInt32, {3, 5}, stream), device_alloc);
    if (allocated.size() != 1) {
      fail("allgather int32",
           "the allocator was called " + std::to_string(allocated.size()) + " times, want 1");
    } else {
      compare("allgather int32", DataType::kInt32, allocated[0], n * g_size,
              [&](std::size_t i) { return input(static_cast<int>(i / n), i % n); });
    }
    CUDA(cudaFree(d));
  }
  // reducescatter: 2 rows per rank, sum
  {
    const std::size_t cols = 7, rows = 2 * static_cast<std::size_t>(g_size), n = rows * cols;
    unsigned char* d = nullptr;
    CUDA(cudaMalloc(&d, n * 4));
    upload(d, host_values(DataType::kFloat32, n, input));
    const std::size_t was = allocated.size();
    hvd::reducescatter(
        device_tensor(d, DataType::kFloat32, {static_cast<std::int64_t>(rows), 7}, stream),
        device_alloc, ReduceOp::kSum);
    if (allocated.size() != was + 1) {
      fail("reducescatter float32", "the allocator was not called once");
    } else {
      const std::size_t block = 2 * cols, offset = block * static_cast<std::size_t>(g_rank);
      compare(
          "reducescatter sum float32", DataType::kFloat32, allocated.back(), block,
          [&](std::size_t i) { return expected(ReduceOp::kSum, DataType::kFloat32, offset + i); });
    }
    CUDA(cudaFree(d));
  }
  for (void* p : allocated) CUDA(cudaFree(p));
  std::printf("rank %d: %s broadcast, allgather, reducescatter\n", g_rank,
              g_failures == before ? "ok  " : "FAIL");

  // What is refused on GPU tensors, with HVD_ERR_UNSUPPORTED and a message.
  float* d = nullptr;
  CUDA(cudaMalloc(&d, 64 * sizeof(float)));
  auto refused = [&](const char* what, auto&& call) {
    ++g_cases;
    try {
      call();
      fail(what, "libhvd accepted it");
    } catch (const hvd::RuntimeError& e) {
      if (e.status() != HVD_ERR_UNSUPPORTED) {
        fail(what, std::string("wrong status ") + hvd_status_name(e.status()) + ": " + e.what());
      } else {
        std::printf("rank %d: ok   %s: refused (%s)\n", g_rank, what, e.what());
      }
    }
  };
  refused("allreduce with prescale 2 on a GPU tensor", [&] {
    hvd::AllreduceOptions o{ReduceOp::kSum};
    o.prescale = 2.0;
    hvd::allreduce(device_tensor(d, DataType::kFloat32, {64}, stream), o);
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

void print_row(const char* where, std::size_t bytes, double hvd_us, double raw_us) {
  if (g_rank != 0) return;
  char size[32];
  std::snprintf(size, sizeof size, bytes >= (1u << 20) ? "%zu MiB" : "%zu KiB",
                bytes >= (1u << 20) ? bytes >> 20 : bytes >> 10);
  if (raw_us > 0) {
    std::printf("%6s %8s %10.1f %10.1f %10.1f %8.2f\n", where, size, hvd_us, raw_us,
                hvd_us - raw_us, hvd_us / raw_us);
  } else {
    std::printf("%6s %8s %10.1f %10s %10s %8s\n", where, size, hvd_us, "-", "-", "-");
  }
}

// Out of place (in place, a one-rank sum is no work at all for NCCL). Alternates hvd and raw to
// cancel drift; the best of 6 batches each.
void timing(cudaStream_t stream) {
  ncclComm_t raw = nullptr;
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
    const int calls = bytes >= (std::size_t{64} << 20) ? 20 : 200;
    auto hvd_call = [&] { hvd::allreduce(tin, tout, hvd::AllreduceOptions{ReduceOp::kSum}); };
    auto raw_call = [&] {
      if (ncclAllReduce(in, out, n, ncclFloat32, ncclSum, raw, stream) != ncclSuccess) {
        die("raw ncclAllReduce failed");
      }
      CUDA(cudaStreamSynchronize(stream));
    };
    for (int i = 0; i < 10; ++i) hvd_call();
    if (raw != nullptr) {
      for (int i = 0; i < 10; ++i) raw_call();
    }
    double hvd_us = 1e300, raw_us = raw != nullptr ? 1e300 : -1;
    for (int round = 0; round < 2; ++round) {
      hvd_us = std::min(hvd_us, us_per_call(calls, hvd_call));
      if (raw != nullptr) raw_us = std::min(raw_us, us_per_call(calls, raw_call));
    }
    print_row("gpu", bytes, hvd_us, raw_us);
    CUDA(cudaFree(in));
    CUDA(cudaFree(out));
  }
  {
    std::vector<float> hin(1024, 1.0f), hout(1024);
    auto hvd_call = [&] {
      hvd::allreduce(hvd::tensor(hin.data(), hin.size()), hvd::tensor(hout.data(), hout.size()),
                     hvd::AllreduceOptions{ReduceOp::kSum});
    };
    auto raw_call = [&] {
      std::memcpy(hout.data(), hin.data(), hin.size() * sizeof(float));
      asm volatile("" ::"r"(hout.data()) : "memory");
    };
    for (int i = 0; i < 10; ++i) hvd_call();
    double hvd_us = 1e300, raw_us = g_size == 1 ? 1e300 : -1;
    for (int round = 0; round < 2; ++round) {
      hvd_us = std::min(hvd_us, us_per_call(200, hvd_call));
      if (g_size == 1) raw_us = std::min(raw_us, us_per_call(200, raw_call));
    }
    print_row("host", 4096, hvd_us, raw_us);
  }
  if (raw != nullptr) ncclCommDestroy(raw);
}

}  // namespace

int main(int argc, char** argv) {
  const bool time_it = !(argc > 1 && std::string(argv[1]) == "--no-timing");
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
    std::printf("rank %d: correctness: %d cases, %d failed\n", g_rank, g_cases, g_failures);
    if (time_it) timing(streams[2]);
    for (auto& s : streams) CUDA(cudaStreamDestroy(s));
    hvd::shutdown();
  } catch (const hvd::RuntimeError& e) {
    die(std::string("unexpected error: ") + hvd_status_name(e.status()) + ": " + e.what());
  }
  if (g_failures != 0) {
    std::printf("libhvd gpu check: FAILED (%d of %d cases)\n", g_failures, g_cases);
    return 1;
  }
  std::printf("libhvd gpu check: OK\n");
  return 0;
}
