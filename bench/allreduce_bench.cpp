// Allreduce bus bandwidth: libhvd's hvd::allreduce (float32, sum, in place)
// against the raw engine underneath it, from the same processes in the same run. Under
// `hvdrun --mpi` the raw engine is MPI_Allreduce on MPI_COMM_WORLD (libhvd initialised MPI); under
// native hvdrun it is gloo::allreduce on the bench's own Gloo context, connected like libhvd's
// (TCP device on $HVD_ADVERTISE_ADDR, rendezvous through hvdrun's server, scope "<job>.bench").
//
// For each size: 3 warm-up calls of each, then BLOCKS blocks of each, alternating hvd and raw
// (and which goes first) so machine noise hits both; a block's time per call is the slowest
// rank's, and the median over blocks is reported. Bus bandwidth = 2 (n-1)/n bytes / time (NCCL
// tests). Each size is verified once per engine (all-ones summed over n ranks = n everywhere).
// Rank 0 prints the table. Exit status: 0, or 1 when a result was wrong; never the ratio.
//
// Usage: hvdrun [--mpi] -np 2 allreduce_bench [--seconds S] [--blocks B]
//                                              [--min-bytes N] [--max-bytes N] [--control]
//   --seconds: wall time aimed at per size and engine (default 0.5); --blocks: default 8;
//   --min-bytes/--max-bytes: the size range (default 4 KiB to 64 MiB; sizes are 4 KiB times powers
//   of 4); --control: the raw engine in both columns (A/A), to see how noisy the machine is.
#include <hvd/hvd.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "raw_engine.h"

namespace {

using namespace hvd_bench;  // NOLINT: the shared benchmark helpers (raw_engine.h)

std::string size_label(std::size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

// Fills with ones, reduces once, counts elements that are not `expected`.
std::int64_t verify(const std::function<void(float*, std::size_t)>& reduce, std::vector<float>& buf,
                    float expected) {
  std::fill(buf.begin(), buf.end(), 1.0f);
  reduce(buf.data(), buf.size());
  return std::count_if(buf.begin(), buf.end(), [&](float x) { return x != expected; });
}

int run(int argc, char** argv) {
  double target_s = 0.5;
  int blocks = 8;        // even: each engine goes first in half of them
  bool control = false;  // A/A: the raw engine in both columns, to see the noise floor
  std::size_t min_bytes = 4096, max_bytes = std::size_t{64} << 20;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--control") {
      control = true;
      --i;
      continue;
    }
    if (a != "--seconds" && a != "--blocks" && a != "--min-bytes" && a != "--max-bytes") {
      throw std::runtime_error("unknown option " + a);
    }
    if (i + 1 == argc) throw std::runtime_error("option " + a + " needs a value");
    if (a == "--seconds")
      target_s = std::stod(argv[i + 1]);
    else if (a == "--blocks")
      blocks = std::max(1, std::stoi(argv[i + 1]));
    else if (a == "--min-bytes")
      min_bytes = std::stoull(argv[i + 1]);
    else
      max_bytes = std::stoull(argv[i + 1]);
  }

  hvd::init();
  const int rank = hvd::rank(), n = hvd::size();
  std::unique_ptr<RawEngine> raw = make_raw_engine("bench");
  const auto raw_reduce = [&](float* d, std::size_t c) { raw->allreduce(d, c); };
  const auto hvd_reduce = [&](float* d, std::size_t c) {
    if (control) return raw_reduce(d, c);
    hvd::allreduce(hvd::tensor(d, c), hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  };
  if (rank == 0) {
    std::printf("allreduce float32 sum in place, %d ranks, libhvd backend %s, raw engine %s\n", n,
                hvd::backend_name().c_str(), raw->name.c_str());
    std::printf("per size and engine: %d blocks, ~%.2f s; median of block means, slowest rank\n",
                blocks, target_s);
    if (control) std::printf("--control: the \"hvd\" column is the raw engine too (A/A)\n");
    std::printf("%9s %6s %12s %12s %12s %12s %8s\n", "size", "iters", "hvd us", "hvd GB/s",
                "raw us", "raw GB/s", "hvd/raw");
    std::fflush(stdout);
  }

  int failures = 0;
  double ratio_at_max = 0;
  std::size_t last_bytes = 0;
  for (std::size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    if (bytes < min_bytes) continue;
    const std::size_t count = bytes / sizeof(float);
    std::vector<float> buf(count, 0.0f);  // zeros while timing: sums stay 0, no inf or denormals

    // Warm-up (3 calls each; the first pair untimed), and an estimate of one call's time that
    // every rank agrees on (rank 0's), so that all ranks run the same number of calls.
    hvd_reduce(buf.data(), count);
    raw_reduce(buf.data(), count);
    const auto w = Clock::now();
    for (int i = 0; i < 2; ++i) {
      hvd_reduce(buf.data(), count);
      raw_reduce(buf.data(), count);
    }
    std::vector<double> per_call{seconds_since(w) / 4};
    hvd::broadcast(std::span<double>(per_call), 0);
    const int iters = std::max(1, static_cast<int>(std::lround(target_s / (blocks * per_call[0]))));
    const int total_iters = std::max(5, iters * blocks);
    const int per_block = (total_iters + blocks - 1) / blocks;

    // Alternating blocks; which engine goes first alternates too.
    std::vector<double> times(2 * static_cast<std::size_t>(blocks));  // [hvd..., raw...]
    for (int b = 0; b < blocks; ++b) {
      for (int k = 0; k < 2; ++k) {
        const bool hvd_turn = (k == 0) == (b % 2 == 0);
        const auto& reduce = hvd_turn ? std::function<void(float*, std::size_t)>(hvd_reduce)
                                      : std::function<void(float*, std::size_t)>(raw_reduce);
        const auto start = Clock::now();
        for (int i = 0; i < per_block; ++i) reduce(buf.data(), count);
        times[static_cast<std::size_t>((hvd_turn ? 0 : blocks) + b)] =
            seconds_since(start) / per_block;
      }
    }
    hvd::allreduce(hvd::tensor(times.data(), times.size()),
                   hvd::AllreduceOptions{hvd::ReduceOp::kMax});  // the slowest rank's

    // Verification, once per size and engine.
    std::vector<std::int64_t> wrong{verify(hvd_reduce, buf, static_cast<float>(n)),
                                    verify(raw_reduce, buf, static_cast<float>(n))};
    hvd::allreduce(hvd::tensor(wrong.data(), wrong.size()),
                   hvd::AllreduceOptions{hvd::ReduceOp::kSum});

    const double t_hvd = median({times.begin(), times.begin() + blocks});
    const double t_raw = median({times.begin() + blocks, times.end()});
    const double bus = 2.0 * (n - 1) / n * static_cast<double>(bytes) / 1e9;
    ratio_at_max = t_raw / t_hvd;
    if (rank == 0) {
      std::printf("%9s %6d %12.1f %12.3f %12.1f %12.3f %8.3f%s\n", size_label(bytes).c_str(),
                  per_block * blocks, t_hvd * 1e6, bus / t_hvd, t_raw * 1e6, bus / t_raw,
                  ratio_at_max, wrong[0] || wrong[1] ? "  WRONG RESULTS" : "");
      if (wrong[0] || wrong[1]) {
        std::printf("  wrong elements (all ranks): hvd %lld, raw %lld (expected %d everywhere)\n",
                    static_cast<long long>(wrong[0]), static_cast<long long>(wrong[1]), n);
      }
      std::fflush(stdout);
    }
    if (wrong[0] || wrong[1]) ++failures;
    last_bytes = bytes;
  }
  if (rank == 0) {
    std::printf("ratio hvd/raw at %s: %.3f (goal: at least 0.95)\n", size_label(last_bytes).c_str(),
                ratio_at_max);
  }
  raw.reset();  // before libhvd shuts its engine down (MPI_Finalize)
  hvd::shutdown();
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 2;
  }
}
