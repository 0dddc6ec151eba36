// libhvd's engine: what negotiation, fusion and the background thread cost,
// measured against the raw engine underneath from the same processes in the same run. Under
// `hvdrun --mpi` the raw engine is MPI_Allreduce on MPI_COMM_WORLD (libhvd initialised MPI; this
// program never calls MPI_Init); under native hvdrun it is gloo::allreduce on the bench's own Gloo
// context, connected like libhvd's (TCP device on $HVD_ADVERTISE_ADDR, rendezvous through hvdrun's
// server, scope "<job>.engine_bench").
//
// Parts (--parts, comma-separated; default all three):
//   idle   after hvd::init() and one allreduce, every rank sleeps --idle-seconds (default 10) and
//          measures the CPU time its whole process used meanwhile (CLOCK_PROCESS_CPUTIME_ID: all
//          threads; getrusage for the user/sys split), as a percentage of one core, plus each
//          thread's CPU time and how often it was scheduled (/proc/self/task/*/schedstat). Runs
//          first, before the bench's own Gloo context exists. Goal: under 1%.
//   fusion one step = 100 float32 tensors of 16 KiB (sum, in place): hvd = 100 x
//          hvd::allreduce_async("g.<i>") then wait on all handles; raw = one raw allreduce per
//          tensor; and "by hand" = what libhvd's fusion does without the engine (copy the
//          tensors into one buffer, one raw allreduce, copy back): the floor of any fusion.
//          Whether libhvd fuses is HOROVOD_FUSION_THRESHOLD at hvd::init(): run the program
//          once as is and once with `hvdrun --fusion-threshold-mb 0` (bench/engine_bench.sh does
//          both). Goal (fusion on): raw loop/hvd at least 3.
//   small  a synchronous 4 KiB hvd::allreduce against one raw 4 KiB allreduce.
//          Goal (MPI): hvd at most raw + 100 us.
// fusion and small: 1 untimed + 2 timed warm-up steps of each, then --blocks blocks of each
// (default 8), in turn, the order rotating from block to block; every block starts with an
// untimed step whose results are checked (rank- tensor- and element-dependent values), then runs
// its timed steps; a block's time per step is the slowest rank's and the median over blocks is
// reported. Then a few more hvd steps run between two snapshots of /proc/self/task, and each
// rank's threads are listed with their CPU time and how often they were scheduled per step: a
// thread woken once per tensor instead of once per batch shows there. Rank 0 prints. Exit status:
// 0, 1 when a result was wrong, 2 on an error; never the ratios.
//
// Usage: hvdrun [--mpi] [--fusion-threshold-mb 0] -np 2 engine_bench [--parts LIST]
//            [--seconds S] [--blocks B] [--idle-seconds S] [--tensors N] [--tensor-bytes N]
//            [--average]
//   --seconds: wall time aimed at per part and engine (default 0.5).
//   --average: the fusion part averages (hvd::ReduceOp::kAverage, Horovod's default op) instead
//          of summing; the raw contenders then scale by 1/size after their allreduce, as a
//          caller averaging by hand would, with the same float multiply libhvd uses.
#include <hvd/hvd.hpp>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "raw_engine.h"
#include "thread_cpu.h"

namespace {

using namespace hvd_bench;  // NOLINT: the shared benchmark helpers (raw_engine.h)

// ---- Interleaved blocks ----

// One engine's step: `verify` runs one untimed checked step and returns the number of wrong
// elements; `step` runs one timed step.
struct Contender {
  std::function<std::int64_t()> verify;
  std::function<void()> step;
};

struct Result {
  std::vector<double> secs;         // per contender: median time per step, slowest rank
  std::vector<std::int64_t> wrong;  // per contender: wrong elements, all ranks, all blocks
  int steps = 0;                    // timed steps per contender
};

// Warm-up (1 untimed + 2 timed steps of each), then `blocks` blocks of each contender in turn,
// the order rotating from block to block (with two, each goes first in half of them); each block
// = one checked untimed step + `per_block` timed steps, with `per_block` from rank 0's warm-up
// estimate so that every rank runs the same number of steps.
Result interleave(const std::vector<Contender>& cs, double target_s, int blocks) {
  const std::size_t k = cs.size();
  for (const Contender& c : cs) c.step();
  const auto w = Clock::now();
  for (int i = 0; i < 2; ++i) {
    for (const Contender& c : cs) c.step();
  }
  std::vector<double> per_step{seconds_since(w) / static_cast<double>(2 * k)};
  hvd::broadcast(std::span<double>(per_step), 0);
  // At least 1: slow steps (a loaded machine) keep the run short.
  const int per_block =
      std::max(1, static_cast<int>(std::lround(target_s / (blocks * per_step[0]))));

  const auto nb = static_cast<std::size_t>(blocks);
  std::vector<double> times(k * nb);  // [contender 0's blocks..., contender 1's blocks..., ...]
  std::vector<std::int64_t> wrong(k, 0);
  for (std::size_t b = 0; b < nb; ++b) {
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t c = (b + j) % k;
      wrong[c] += cs[c].verify();
      const auto start = Clock::now();
      for (int i = 0; i < per_block; ++i) cs[c].step();
      times[c * nb + b] = seconds_since(start) / per_block;
    }
  }
  hvd::allreduce(hvd::tensor(times.data(), times.size()),
                 hvd::AllreduceOptions{hvd::ReduceOp::kMax});  // the slowest rank's
  hvd::allreduce(hvd::tensor(wrong.data(), wrong.size()),
                 hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  Result r;
  for (std::size_t c = 0; c < k; ++c) {
    const auto first = times.begin() + static_cast<std::ptrdiff_t>(c * nb);
    r.secs.push_back(median({first, first + blocks}));
  }
  r.wrong = wrong;
  r.steps = per_block * blocks;
  return r;
}

// Every rank's text, concatenated in rank order (on every rank).
std::string gather_text(const std::string& text) {
  const hvd::Buffer all =
      hvd::allgather(hvd::tensor(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
  const auto bytes = all.as<char>();
  return std::string(bytes.begin(), bytes.end());
}

// ---- Part: many small tensors, asynchronous (fusion) ----

// Tensor t, element j on rank r: a rank, tensor and position dependent integer, so that a
// fused tensor at a wrong offset, a lost or doubled rank shows; exact in float32 while the sum
// stays below 2^24 (2 ranks, 100 tensors: under 300,000).
float pattern(int r, std::size_t t, std::size_t j) {
  return static_cast<float>((r + 1) * 1000 + static_cast<int>(t % 1000) * 128 +
                            static_cast<int>(j % 127));
}
float expected_sum(int n, std::size_t t, std::size_t j) {
  return static_cast<float>(1000 * n * (n + 1) / 2 +
                            n * (static_cast<int>(t % 1000) * 128 + static_cast<int>(j % 127)));
}

int part_fusion(RawEngine& raw, int rank, int n, double target_s, int blocks, std::size_t tensors,
                std::size_t tensor_bytes, bool average) {
  const std::size_t count = tensor_bytes / sizeof(float);
  std::vector<std::vector<float>> bufs(tensors, std::vector<float>(count, 0.0f));
  std::vector<float> whole(tensors * count, 0.0f);  // the by-hand fusion buffer
  std::vector<std::string> names;
  for (std::size_t i = 0; i < tensors; ++i) names.push_back("g." + std::to_string(i));
  std::vector<hvd::Handle> handles(tensors);
  const hvd::AllreduceOptions op{average ? hvd::ReduceOp::kAverage : hvd::ReduceOp::kSum};
  const float inv_n = static_cast<float>(1.0 / n);  // libhvd's average: times float(1/size)
  const auto expected = [&](std::size_t t, std::size_t j) {
    const float s = expected_sum(n, t, j);
    return average ? s * inv_n : s;
  };

  const auto hvd_step = [&] {
    for (std::size_t i = 0; i < tensors; ++i) {
      handles[i] = hvd::allreduce_async(names[i], hvd::tensor(bufs[i].data(), count), op);
    }
    for (auto& h : handles) h.wait();
  };
  const auto raw_step = [&] {
    for (auto& b : bufs) {
      raw.allreduce(b.data(), count);
      if (average) scale_floats(b.data(), count, inv_n);
    }
  };
  // What libhvd's fusion does, minus the engine: copy in, one raw allreduce, copy out.
  const auto raw_fused_step = [&] {
    for (std::size_t t = 0; t < tensors; ++t) {
      std::memcpy(whole.data() + t * count, bufs[t].data(), count * sizeof(float));
    }
    raw.allreduce(whole.data(), whole.size());
    if (average) scale_floats(whole.data(), whole.size(), inv_n);
    for (std::size_t t = 0; t < tensors; ++t) {
      std::memcpy(bufs[t].data(), whole.data() + t * count, count * sizeof(float));
    }
  };
  // Fill with the pattern, run one step, count wrong elements, leave zeros for the timed steps
  // (sums of zeros stay zero: no inf or denormals).
  const auto checked = [&](const std::function<void()>& step) -> std::int64_t {
    for (std::size_t t = 0; t < tensors; ++t) {
      for (std::size_t j = 0; j < count; ++j) bufs[t][j] = pattern(rank, t, j);
    }
    step();
    std::int64_t wrong = 0;
    for (std::size_t t = 0; t < tensors; ++t) {
      for (std::size_t j = 0; j < count; ++j) wrong += bufs[t][j] != expected(t, j);
      std::fill(bufs[t].begin(), bufs[t].end(), 0.0f);
    }
    return wrong;
  };
  const Result r = interleave({{[&] { return checked(hvd_step); }, hvd_step},
                               {[&] { return checked(raw_step); }, raw_step},
                               {[&] { return checked(raw_fused_step); }, raw_fused_step}},
                              target_s, blocks);
  const double hvd_s = r.secs[0], raw_s = r.secs[1], floor_s = r.secs[2];
  const bool bad = r.wrong[0] || r.wrong[1] || r.wrong[2];

  // Where the hvd step's time goes, per thread: a few more hvd steps between two snapshots.
  // The same steps split in two: the submission loop, and the waits (negotiation, the fused
  // collective and its copies, the handles' wake-ups).
  const int diag_steps = std::max(3, r.steps / (2 * blocks));
  double submit_s = 0, wait_s = 0;
  const auto diag0 = thread_snapshot();
  for (int s = 0; s < diag_steps; ++s) {
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < tensors; ++i) {
      handles[i] = hvd::allreduce_async(names[i], hvd::tensor(bufs[i].data(), count), op);
    }
    const auto t1 = Clock::now();
    for (auto& h : handles) h.wait();
    submit_s += std::chrono::duration<double>(t1 - t0).count();
    wait_s += seconds_since(t1);
  }
  const auto diag1 = thread_snapshot();
  char split[160];
  std::snprintf(split, sizeof split,
                "  rank %d, %d more hvd steps: submitting %.1f us, waiting %.1f us per step\n",
                rank, diag_steps, submit_s / diag_steps * 1e6, wait_s / diag_steps * 1e6);
  const std::string diag =
      gather_text(split + thread_report(diag0, diag1, diag_steps, " per step", true));

  const std::string threshold = env("HOROVOD_FUSION_THRESHOLD");
  const bool fused = threshold != "0";
  const char* what = fused ? "fused" : "unfused";
  if (rank == 0) {
    std::printf(
        "\n[fusion] %zu tensors x %zu KiB float32 %s per step, async; libhvd fusion %s "
        "(HOROVOD_FUSION_THRESHOLD=%s)\n",
        tensors, tensor_bytes >> 10, average ? "average" : "sum", fused ? "ON" : "OFF",
        threshold.empty() ? "unset: 64 MiB" : threshold.c_str());
    std::printf("  %d timed steps per engine in %d blocks; median of block means, slowest rank\n",
                r.steps, blocks);
    std::printf("  hvd %-8s   %10.1f us/step  (%zu x allreduce_async, then wait all)\n", what,
                hvd_s * 1e6, tensors);
    std::printf("  raw loop       %10.1f us/step  (%zu x %s)\n", raw_s * 1e6, tensors,
                raw.name.c_str());
    std::printf(
        "  raw by hand    %10.1f us/step  (copy in, one %zu KiB %s, copy out: the floor of "
        "fusion)\n",
        floor_s * 1e6, (tensors * tensor_bytes) >> 10, raw.name.c_str());
    std::printf(
        "  raw loop/hvd %s = %.2f%s; raw loop/by hand = %.2f (the ceiling); hvd %s - "
        "by hand = %.1f us\n",
        what, raw_s / hvd_s, fused ? " (goal: at least 3)" : "", raw_s / floor_s, what,
        (hvd_s - floor_s) * 1e6);
    if (bad) {
      std::printf(
          "  WRONG RESULTS: hvd %lld, raw loop %lld, by hand %lld elements (all ranks, "
          "checked steps)\n",
          static_cast<long long>(r.wrong[0]), static_cast<long long>(r.wrong[1]),
          static_cast<long long>(r.wrong[2]));
    } else {
      std::printf("  verified: the first step of every block, every engine\n");
    }
    std::printf("  threads scheduled during the hvd steps (per step):\n%s", diag.c_str());
    std::printf("RESULT fusion_%s hvd_us=%.1f raw_us=%.1f ratio=%.3f floor_us=%.1f\n",
                fused ? "on" : "off", hvd_s * 1e6, raw_s * 1e6, raw_s / hvd_s, floor_s * 1e6);
    std::fflush(stdout);
  }
  return bad ? 1 : 0;
}

// ---- Part: one small synchronous allreduce ----

int part_small(RawEngine& raw, int rank, int n, double target_s, int blocks) {
  const std::size_t count = 4096 / sizeof(float);
  std::vector<float> buf(count, 0.0f);
  const hvd::AllreduceOptions sum{hvd::ReduceOp::kSum};
  const auto hvd_step = [&] { hvd::allreduce(hvd::tensor(buf.data(), count), sum); };
  const auto raw_step = [&] { raw.allreduce(buf.data(), count); };
  const auto checked = [&](const std::function<void()>& step) -> std::int64_t {
    for (std::size_t j = 0; j < count; ++j) buf[j] = pattern(rank, 0, j);
    step();
    std::int64_t wrong = 0;
    for (std::size_t j = 0; j < count; ++j) wrong += buf[j] != expected_sum(n, 0, j);
    std::fill(buf.begin(), buf.end(), 0.0f);
    return wrong;
  };
  const Result r = interleave({{[&] { return checked(hvd_step); }, hvd_step},
                               {[&] { return checked(raw_step); }, raw_step}},
                              target_s, blocks);
  const double hvd_s = r.secs[0], raw_s = r.secs[1];
  const bool bad = r.wrong[0] || r.wrong[1];
  const int diag_calls = std::max(20, r.steps / (2 * blocks));
  const std::uint64_t eager0 = hvd::engine_stats().eager;
  const auto diag0 = thread_snapshot();
  for (int i = 0; i < diag_calls; ++i) hvd_step();
  const auto diag1 = thread_snapshot();
  // How those calls ran: from the inputs sent with their negotiation (HOROVOD_EAGER_BYTES), or
  // as collectives.
  const std::string eager = "    eager (reduced from the negotiation): " +
                            std::to_string(hvd::engine_stats().eager - eager0) + " of " +
                            std::to_string(diag_calls) + "\n";
  const std::string diag = gather_text(
      "  rank " + std::to_string(rank) + ", " + std::to_string(diag_calls) + " more hvd calls:\n" +
      thread_report(diag0, diag1, diag_calls, " per call", true) + eager);
  if (rank == 0) {
    std::printf(
        "\n[small] synchronous 4 KiB float32 sum allreduce, %d calls per engine in %d "
        "blocks\n",
        r.steps, blocks);
    std::printf("  hvd::allreduce %10.1f us\n", hvd_s * 1e6);
    std::printf("  %-14s %10.1f us\n", raw.name.c_str(), raw_s * 1e6);
    std::printf("  hvd - raw = %.1f us (goal under MPI: at most 100 us); hvd/raw = %.2fx\n",
                (hvd_s - raw_s) * 1e6, hvd_s / raw_s);
    if (bad) {
      std::printf("  WRONG RESULTS: hvd %lld, raw %lld elements (all ranks, checked calls)\n",
                  static_cast<long long>(r.wrong[0]), static_cast<long long>(r.wrong[1]));
    } else {
      std::printf("  verified: the first call of every block, both engines\n");
    }
    std::printf("  threads scheduled during the hvd calls (per call):\n%s", diag.c_str());
    std::printf("RESULT small hvd_us=%.1f raw_us=%.1f diff_us=%.1f\n", hvd_s * 1e6, raw_s * 1e6,
                (hvd_s - raw_s) * 1e6);
    std::fflush(stdout);
  }
  return bad ? 1 : 0;
}

int part_idle(int rank, int n, double idle_s, const std::string& backend) {
  // "after hvd::init() and one allreduce"
  std::vector<float> one(1024, 1.0f);
  hvd::allreduce(hvd::tensor(one.data(), one.size()), hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  const bool ok = one[0] == static_cast<float>(n);

  const auto threads0 = thread_snapshot();
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);
  const std::int64_t cpu0 = process_cpu_ns();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
  const double wall = seconds_since(t0);
  const std::int64_t cpu1 = process_cpu_ns();
  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  const auto threads1 = thread_snapshot();

  const double cpu_s = static_cast<double>(cpu1 - cpu0) / 1e9;
  const double user_s = tv_seconds(ru1.ru_utime) - tv_seconds(ru0.ru_utime);
  const double sys_s = tv_seconds(ru1.ru_stime) - tv_seconds(ru0.ru_stime);
  char line[256];
  std::snprintf(line, sizeof line,
                "  rank %d: %.3f%% of one core (%.2f ms CPU in %.2f s; user %.2f ms, sys %.2f "
                "ms; %zu threads)\n",
                rank, 100.0 * cpu_s / wall, cpu_s * 1e3, wall, user_s * 1e3, sys_s * 1e3,
                threads1.size());
  const std::string text = line + thread_report(threads0, threads1, 1, "", false);

  // Every rank's percentage and text to rank 0.
  std::vector<double> pct(static_cast<std::size_t>(n), 0.0);
  pct[static_cast<std::size_t>(rank)] = 100.0 * cpu_s / wall;
  hvd::allreduce(hvd::tensor(pct.data(), pct.size()), hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  const std::string all = gather_text(text);
  std::vector<std::int64_t> wrong{ok ? 0 : 1};
  hvd::allreduce(hvd::tensor(wrong.data(), wrong.size()),
                 hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  if (rank == 0) {
    std::printf(
        "\n[idle] after hvd::init() and one allreduce, each rank sleeps %.1f s; CPU time "
        "of its whole process meanwhile (all threads), backend %s\n",
        idle_s, backend.c_str());
    std::fputs(all.c_str(), stdout);
    const double worst = *std::max_element(pct.begin(), pct.end());
    std::printf("  worst rank: %.3f%% of one core (goal: under 1%%)%s\n", worst,
                wrong[0] ? "  WRONG RESULT of the first allreduce" : "");
    std::printf("RESULT idle_%s max_pct=%.3f\n", backend.c_str(), worst);
    std::fflush(stdout);
  }
  return wrong[0] ? 1 : 0;
}

int run(int argc, char** argv) {
  double target_s = 0.5, idle_s = 10;
  int blocks = 8;  // even: each engine goes first in half of them
  std::size_t tensors = 100, tensor_bytes = 16 << 10;
  std::string parts = "idle,fusion,small";
  bool average = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--average") {
      average = true;
      --i;  // a flag: no value
      continue;
    }
    if (a != "--seconds" && a != "--blocks" && a != "--idle-seconds" && a != "--parts" &&
        a != "--tensors" && a != "--tensor-bytes") {
      throw std::runtime_error("unknown option " + a);
    }
    if (i + 1 == argc) throw std::runtime_error("option " + a + " needs a value");
    const std::string v = argv[i + 1];
    if (a == "--seconds")
      target_s = std::stod(v);
    else if (a == "--blocks")
      blocks = std::max(1, std::stoi(v));
    else if (a == "--idle-seconds")
      idle_s = std::stod(v);
    else if (a == "--parts")
      parts = v;
    else if (a == "--tensors")
      tensors = std::max<std::size_t>(1, std::stoull(v));
    else
      tensor_bytes = std::max<std::size_t>(4, std::stoull(v) / 4 * 4);
  }
  const auto want = [&](const std::string& p) {
    return ("," + parts + ",").find("," + p + ",") != std::string::npos;
  };
  for (std::size_t at = 0; at <= parts.size();) {
    const std::size_t comma = std::min(parts.find(',', at), parts.size());
    const std::string p = parts.substr(at, comma - at);
    if (p != "idle" && p != "fusion" && p != "small") {
      throw std::runtime_error("--parts: idle, fusion and/or small, not '" + p + "'");
    }
    at = comma + 1;
  }

  hvd::init();
  const int rank = hvd::rank(), n = hvd::size();
  const std::string backend = hvd::backend_name();
  if (rank == 0) {
    std::printf(
        "engine_bench: %d ranks, libhvd backend %s, HOROVOD_FUSION_THRESHOLD=%s, "
        "HOROVOD_CYCLE_TIME=%s, parts %s\n",
        n, backend.c_str(), env("HOROVOD_FUSION_THRESHOLD").c_str(),
        env("HOROVOD_CYCLE_TIME").c_str(), parts.c_str());
    std::fflush(stdout);
  }
  int failures = 0;
  // Idle first: before the bench's own Gloo context (and its threads) exists.
  if (want("idle")) failures += part_idle(rank, n, idle_s, backend);
  if (want("fusion") || want("small")) {
    std::unique_ptr<RawEngine> raw = make_raw_engine("engine_bench");
    if (want("fusion")) {
      failures += part_fusion(*raw, rank, n, target_s, blocks, tensors, tensor_bytes, average);
    }
    if (want("small")) failures += part_small(*raw, rank, n, target_s, blocks);
    raw.reset();  // before libhvd shuts its engine down (MPI_Finalize)
  }
  hvd::shutdown();
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_bench: %s\n", e.what());
    return 2;
  }
}
