// libhvd_check's engine, fault and GPU modes: async (50 named ops in random orders), threads
// (several threads per rank submitting and waiting at once), delayed, mismatch FIELD, stall
// SECONDS, gpu (no device) and die RANK. See libhvd_check.cpp.
#include "libhvd_check.h"

namespace libhvd_check {

int async_ops() {
  // Tensor i: dtype from a cycle, 1..4000 elements; value (i + 1) * (rank + 1) at every element.
  constexpr int kTensors = 50;
  constexpr DataType kCycle[] = {DataType::kFloat32, DataType::kInt32, DataType::kFloat64,
                                 DataType::kFloat16, DataType::kInt64, DataType::kBFloat16};
  std::vector<Data> data;
  for (int i = 0; i < kTensors; ++i) {
    data.emplace_back(kCycle[i % 6], static_cast<std::size_t>(1 + (i * 997) % 4000));
    for (std::size_t k = 0; k < data.back().size(); ++k)
      data.back().set(k, (i % 7 + 1) * (g_rank + 1));
  }
  std::vector<int> order(kTensors);
  for (int i = 0; i < kTensors; ++i) order[static_cast<std::size_t>(i)] = i;
  std::mt19937 rng(static_cast<unsigned>(1234 + 77 * g_rank));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<hvd::Handle> handles(kTensors);
  for (int i : order) {
    handles[static_cast<std::size_t>(i)] = hvd::allreduce_async(
        "grad." + std::to_string(i), data[static_cast<std::size_t>(i)].tensor(), {ReduceOp::kSum});
  }
  const double ranks_sum = g_size * (g_size + 1) / 2.0;
  for (int i = 0; i < kTensors; ++i) {
    handles[static_cast<std::size_t>(i)].wait();
    Data& d = data[static_cast<std::size_t>(i)];
    expect_elements(
        d, d.size(), [&](std::size_t) { return (i % 7 + 1) * ranks_sum; },
        "async allreduce grad." + std::to_string(i) + " " + name(d.dtype));
  }
  // Broadcasts from rank size-1, submitted in reverse order on odd ranks.
  std::vector<Data> b;
  for (int i = 0; i < 10; ++i) {
    b.emplace_back(DataType::kFloat32, 100);
    for (std::size_t k = 0; k < 100; ++k) b.back().set(k, g_rank * 1000 + i);
  }
  std::vector<hvd::Handle> bh(10);
  for (int j = 0; j < 10; ++j) {
    const int i = g_rank % 2 == 1 ? 9 - j : j;
    bh[static_cast<std::size_t>(i)] = hvd::broadcast_async(
        "weights." + std::to_string(i), b[static_cast<std::size_t>(i)].tensor(), g_size - 1);
  }
  for (int i = 0; i < 10; ++i) {
    bh[static_cast<std::size_t>(i)].wait();
    expect_elements(
        b[static_cast<std::size_t>(i)], 100, [&](std::size_t) { return (g_size - 1) * 1000 + i; },
        "async broadcast weights." + std::to_string(i));
  }
  // The same name again while it is in flight is refused on this rank at once. Deterministic: the
  // other ranks submit "dup" only after a barrier that rank 0 reaches after its second try, so
  // "dup" cannot have finished in between.
  std::vector<float> dup(4, 1.0f);
  hvd::Handle dup_handle;
  if (g_rank == 0) {
    dup_handle = hvd::allreduce_async("dup", hvd::tensor(dup.data(), dup.size()), {ReduceOp::kSum});
    try {
      hvd::allreduce_async("dup", hvd::tensor(dup.data(), dup.size()), {ReduceOp::kSum});
      expect(false, "a duplicate in-flight name was accepted");
    } catch (const hvd::RuntimeError& e) {
      expect(e.status() == HVD_ERR_INVALID_ARGUMENT &&
                 std::string(e.what()).find("already in flight") != std::string::npos,
             std::string("duplicate name error: ") + e.what());
    }
  }
  hvd::barrier();
  if (g_rank != 0) {
    dup_handle = hvd::allreduce_async("dup", hvd::tensor(dup.data(), dup.size()), {ReduceOp::kSum});
  }
  dup_handle.wait();
  expect(dup[0] == static_cast<float>(g_size), "the duplicated name still completes once");
  // Async allgather and reducescatter results come back in the handle.
  Data g(DataType::kInt32, static_cast<std::size_t>(g_rank + 1));
  for (std::size_t k = 0; k < g.size(); ++k) g.set(k, g_rank);
  hvd::Handle gh = hvd::allgather_async("gathered", g.tensor());
  gh.wait();
  expect(gh.output().bytes.size() == static_cast<std::size_t>(g_size * (g_size + 1) / 2) * 4,
         "async allgather output size");
  std::printf("rank %d: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int threaded_ops() {
  // Thread t submits "th<t>.<i>" for 40 tensors in its own shuffled order (the same on every rank,
  // so that its waits never wait on a name another rank's thread t has yet to reach), waiting on
  // an earlier handle after every fifth submission while the other threads keep submitting. On
  // ranks other than 0, each waiting thread sends its batch to the coordinator itself.
  constexpr int kThreads = 4;
  constexpr int kPerThread = 40;
  std::vector<std::vector<float>> data(kThreads * kPerThread);
  const auto value = [](std::size_t index) { return static_cast<float>(index % 13 + 1); };
  for (std::size_t x = 0; x < data.size(); ++x) {
    data[x].assign(1 + (x * 37) % 300, value(x) * static_cast<float>(g_rank + 1));
  }
  std::vector<std::string> errors(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          std::vector<int> order(kPerThread);
          for (int i = 0; i < kPerThread; ++i) order[static_cast<std::size_t>(i)] = i;
          std::mt19937 rng(static_cast<unsigned>(99 + 13 * t));
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<hvd::Handle> handles(kPerThread);
          for (int n = 0; n < kPerThread; ++n) {
            const auto i = static_cast<std::size_t>(order[static_cast<std::size_t>(n)]);
            std::vector<float>& d = data[static_cast<std::size_t>(t * kPerThread) + i];
            handles[i] = hvd::allreduce_async("th" + std::to_string(t) + "." + std::to_string(i),
                                              hvd::tensor(d.data(), d.size()), {ReduceOp::kSum});
            if (n % 5 == 4) {
              handles[static_cast<std::size_t>(order[static_cast<std::size_t>(n - 2)])].wait();
            }
          }
          for (hvd::Handle& h : handles) h.wait();
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(t)] = e.what();
        }
      });
    }
  }  // joined
  for (int t = 0; t < kThreads; ++t) {
    expect(errors[static_cast<std::size_t>(t)].empty(),
           "thread " + std::to_string(t) + ": " + errors[static_cast<std::size_t>(t)]);
  }
  const float ranks_sum = static_cast<float>(g_size * (g_size + 1) / 2);
  for (std::size_t x = 0; x < data.size(); ++x) {
    const bool right = std::all_of(data[x].begin(), data[x].end(),
                                   [&](float v) { return v == value(x) * ranks_sum; });
    expect(right, "threaded allreduce th" + std::to_string(x / kPerThread) + "." +
                      std::to_string(x % kPerThread));
  }
  std::printf("rank %d: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int delayed() {
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f);
  hvd::Handle ha, hb;
  if (g_rank == 0) {
    ha = hvd::allreduce_async("A", hvd::tensor(a.data(), a.size()), {ReduceOp::kSum});
    std::this_thread::sleep_for(std::chrono::seconds(2));
    hb = hvd::allreduce_async("B", hvd::tensor(b.data(), b.size()), {ReduceOp::kSum});
  } else {
    hb = hvd::allreduce_async("B", hvd::tensor(b.data(), b.size()), {ReduceOp::kSum});
    ha = hvd::allreduce_async("A", hvd::tensor(a.data(), a.size()), {ReduceOp::kSum});
  }
  ha.wait();
  hb.wait();
  const bool ok = a[0] == 1.0f * g_size && a[999] == 1.0f * g_size && b[0] == 2.0f * g_size;
  std::printf("rank %d: delayed A and B %s\n", g_rank, ok ? "both completed correctly" : "WRONG");
  return ok ? 0 : 1;
}

// Rank 1 differs from the others in one field of tensor "x".
int mismatch(const std::string& field) {
  std::vector<float> f(8, 1.0f), f9(9, 1.0f);
  std::vector<double> d(8, 1.0);
  const bool odd = g_rank == 1;
  hvd::Handle h;
  hvd::AllreduceOptions opts{ReduceOp::kSum};
  if (field == "dtype") {
    h = odd ? hvd::allreduce_async("x", hvd::tensor(d.data(), d.size()), opts)
            : hvd::allreduce_async("x", hvd::tensor(f.data(), f.size()), opts);
  } else if (field == "shape") {
    h = hvd::allreduce_async(
        "x", odd ? hvd::tensor(f9.data(), f9.size()) : hvd::tensor(f.data(), f.size()), opts);
  } else if (field == "op") {
    h = hvd::allreduce_async("x", hvd::tensor(f.data(), f.size()),
                             {odd ? ReduceOp::kMax : ReduceOp::kSum});
  } else if (field == "prescale" || field == "postscale") {
    hvd::AllreduceOptions o{ReduceOp::kSum};
    (field == "prescale" ? o.prescale : o.postscale) = odd ? 2.0 : 1.0;
    h = hvd::allreduce_async("x", hvd::tensor(f.data(), f.size()), o);
  } else if (field == "scatter_prescale" || field == "scatter_postscale") {
    const double two = odd ? 2.0 : 1.0;
    h = field == "scatter_prescale"
            ? hvd::reducescatter_async("x", hvd::tensor(f.data(), f.size()), ReduceOp::kSum, two)
            : hvd::reducescatter_async("x", hvd::tensor(f.data(), f.size()), ReduceOp::kSum, 1.0,
                                       two);
  } else if (field == "root") {
    h = hvd::broadcast_async("x", hvd::tensor(f.data(), f.size()), odd ? 1 : 0);
  } else if (field == "kind") {
    h = odd ? hvd::broadcast_async("x", hvd::tensor(f.data(), f.size()), 0)
            : hvd::allreduce_async("x", hvd::tensor(f.data(), f.size()), opts);
  } else {
    std::fprintf(stderr, "unknown field %s\n", field.c_str());
    return 2;
  }
  try {
    if (!h.wait(std::chrono::seconds(20))) {
      std::printf("rank %d: HANG: no answer for 'x' within 20 s\n", g_rank);
      return 1;
    }
    std::printf("rank %d: mismatch in %s was NOT detected\n", g_rank, field.c_str());
    return 1;
  } catch (const hvd::RuntimeError& e) {
    std::printf("rank %d: mismatch error (%s): %s\n", g_rank, hvd_status_name(e.status()),
                e.what());
  }
  hvd::barrier();  // the job goes on after the error
  std::printf("rank %d: still in step after the mismatch\n", g_rank);
  return 0;
}

// Rank 1 submits "late" only after `seconds`: rank 0's stall inspector speaks meanwhile.
int stall(int seconds) {
  std::vector<float> v(16, 1.0f);
  if (g_rank == 1) std::this_thread::sleep_for(std::chrono::seconds(seconds));
  try {
    hvd::Handle h = hvd::allreduce_async("late", hvd::tensor(v.data(), v.size()), {ReduceOp::kSum});
    h.wait();
    std::printf("rank %d: 'late' completed with %g\n", g_rank, static_cast<double>(v[0]));
    return 0;
  } catch (const hvd::RuntimeError& e) {
    std::printf("rank %d: stall error (%s): %s\n", g_rank, hvd_status_name(e.status()), e.what());
    return 4;
  }
}

int gpu_without_device() {
  // A device pointer is never dereferenced on this path: the op is refused at submit.
  hvd::Tensor t{reinterpret_cast<void*>(0x1000), DataType::kFloat32, {16}, hvd::Device::cuda(0)};
  expect(hvd::gpu_device() == -1, "gpu_device() is -1 without a GPU");
  for (bool async : {false, true}) {
    try {
      if (async) {
        hvd::allreduce_async("gpu.grad", t).wait();
      } else {
        hvd::allreduce(t);
      }
      expect(false, "a CUDA tensor was accepted on a host without a GPU");
    } catch (const hvd::RuntimeError& e) {
      std::printf("rank %d: GPU tensor refused (%s): %s\n", g_rank, hvd_status_name(e.status()),
                  e.what());
      const std::string what = e.what();
      expect(e.status() == HVD_ERR_UNSUPPORTED &&
                 (what.find("no CUDA device visible on host") != std::string::npos ||
                  what.find("no NCCL on host") != std::string::npos),
             "GPU refusal message: " + what);
    }
  }
  // NCCL cannot reduce int16 on any host: said before anything about this host's GPUs.
  hvd::Tensor i16{reinterpret_cast<void*>(0x1000), DataType::kInt16, {16}, hvd::Device::cuda(0)};
  for (bool scatter : {false, true}) {
    try {
      if (scatter) {
        hvd::reducescatter(
            i16, [](const std::vector<std::int64_t>&, std::size_t) -> void* { return nullptr; });
      } else {
        hvd::allreduce(i16);
      }
      expect(false, "an int16 CUDA tensor was reduced");
    } catch (const hvd::RuntimeError& e) {
      const std::string what = e.what();
      std::printf("rank %d: int16 GPU reduction refused (%s): %s\n", g_rank,
                  hvd_status_name(e.status()), e.what());
      expect(e.status() == HVD_ERR_UNSUPPORTED &&
                 what.find("NCCL has no int16 type") != std::string::npos &&
                 what.find(scatter ? "reducescatter" : "allreduce") != std::string::npos,
             "int16 GPU refusal message: " + what);
    }
  }
  std::vector<float> v(8, 1.0f);
  hvd::allreduce(std::span<float>(v), ReduceOp::kSum);
  expect(v[0] == static_cast<float>(g_size), "CPU allreduce after the GPU refusal");
  std::printf("rank %d: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int die(int victim, int signal) {
  std::vector<float> data(1 << 18, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0;; ++round) {
    if (round == 3 && g_rank == victim) {
      std::printf("rank %d: %s\n", g_rank,
                  signal == SIGKILL ? "killing myself with SIGKILL" : "freezing with SIGSTOP");
      std::fflush(stdout);
      ::raise(signal);
    }
    try {
      hvd::allreduce(std::span<float>(data), ReduceOp::kSum);
    } catch (const hvd::RuntimeError& e) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("rank %d: error after %.2f s (status %s): %s\n", g_rank, s,
                  hvd_status_name(e.status()), e.what());
      return 3;
    }
    std::fill(data.begin(), data.end(), 1.0f);
  }
}

// The runtime timeline API (hvd::start_timeline): every rank names its own files,
// DIR/<a|b>.rank<R>.json; only rank 0 writes. File a marks cycles; between a's stop and b's start
// ops go nowhere; b is started twice (the same file goes on) and stopped twice; a path rank 0
// cannot write is refused there and nowhere else (the call is not collective).
int timeline(const std::string& dir) {
  const auto path = [&](const char* base) {
    return dir + "/" + base + ".rank" + std::to_string(g_rank) + ".json";
  };
  const auto ops = [&](const std::string& tag) {
    std::vector<float> grad(100000, 1.0f);  // above any eager size: a collective of its own
    hvd::allreduce_async("tl." + tag + ".grad", hvd::tensor(grad.data(), grad.size()),
                         {ReduceOp::kSum})
        .wait();
    expect(grad.back() == static_cast<float>(g_size), "timeline " + tag + ": allreduce");
    std::vector<std::int16_t> weights(5, static_cast<std::int16_t>(-100 - g_rank));
    hvd::broadcast_async("tl." + tag + ".weights", hvd::tensor(weights.data(), weights.size()), 0)
        .wait();
    expect(weights.back() == -100, "timeline " + tag + ": broadcast of int16");
  };
  hvd::stop_timeline();  // nothing records: harmless
  // The C API: the same calls, statuses instead of exceptions.
  expect(hvd_stop_timeline() == HVD_OK, "hvd_stop_timeline without a timeline");
  expect(hvd_start_timeline(nullptr, 0) == HVD_ERR_INVALID_ARGUMENT &&
             std::string(hvd_last_error()).find("file_path must not be NULL") != std::string::npos,
         "hvd_start_timeline(NULL)");
  expect(hvd_start_timeline("", 0) == HVD_ERR_INVALID_ARGUMENT &&
             std::string(hvd_last_error()).find("empty") != std::string::npos,
         "hvd_start_timeline(\"\")");
  hvd::start_timeline(path("a"), true);
  ops("a");
  hvd::stop_timeline();
  ops("between");
  hvd::start_timeline(path("b"));
  hvd::start_timeline(path("b"));
  ops("b");
  hvd::stop_timeline();
  hvd::stop_timeline();
  try {
    hvd::start_timeline(dir + "/no/such/dir.json");
    expect(g_rank != 0, "rank 0 accepted a timeline path it cannot write");
    hvd::stop_timeline();
  } catch (const hvd::RuntimeError& e) {
    std::printf("rank %d: timeline path refused (%s): %s\n", g_rank, hvd_status_name(e.status()),
                e.what());
    expect(g_rank == 0 && e.status() == HVD_ERR_INVALID_ARGUMENT &&
               std::string(e.what()).find("cannot write it") != std::string::npos,
           std::string("the unwritable timeline path's error: ") + e.what());
  }
  std::printf("rank %d: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace libhvd_check
