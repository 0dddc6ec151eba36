// libhvd_check's cache mode: the response cache (HOROVOD_CACHE_CAPACITY) seen from a program,
// through hvd::engine_stats(). Prints, for the e2e test to compare across runs and settings:
//   "rank R: steady state per step: hits H negotiated N"   100 tensors, 6 steps, each
//        rank submitting them in its own order (different on every step), results checked
//   "rank R: steady-state cycles decided by cache bits: K"   of those steps' cycles, how many
//        the AND round alone decided
//   "rank R: checksum X"             FNV-1a of every result byte of those steps: cache on and off
//                                    must give the same bits
//   "rank R: mismatch after hits: MESSAGE"   rank 1 submits a cached name with another shape
//   "rank R: after the mismatch: ok"          the same name, right shape, runs again
//   "rank R: cycling 10 names: hits H negotiated N"   10 names x 5 rounds (capacity 2 thrashes)
//   "rank R: negotiation sizes: ok"  contributions from 90 bytes to 3 KiB, results checked
//   "rank R: eager: E of 86 synchronous calls"  of those, how many ran from the inputs
//                                    gathered with their negotiation (HOROVOD_EAGER_BYTES)
//   "rank R: 1000 tensors: ok"       2 steps of 1000 tensors, then 6 of 100 (the AND round as
//                                    MPI_Iallreduce)
//   "rank R: all checks passed"
#include "libhvd_check.h"

namespace libhvd_check {
namespace {

constexpr std::size_t kCount = 1000;

// Element i of tensor t on rank r in step s: small integers, exact in float32 sums.
float value(int r, int s, std::size_t t, std::size_t i) {
  return static_cast<float>((r + 1) * 3 + s * 5 + static_cast<int>(t % 13) +
                            static_cast<int>(i % 7));
}

float sum_over_ranks(int s, std::size_t t, std::size_t i) {
  float total = 0;
  for (int r = 0; r < g_size; ++r) total += value(r, s, t, i);
  return total;
}

std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// One step: `n` tensors "c.<t>" submitted in a random order, waited on, checked.
void step(int s, std::size_t n, std::vector<std::vector<float>>& tensors, std::uint64_t* hash) {
  std::vector<std::size_t> order(n);
  for (std::size_t t = 0; t < n; ++t) order[t] = t;
  std::mt19937 rng(static_cast<unsigned>(7 + 31 * g_rank + 1009 * s));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<hvd::Handle> handles(n);
  for (std::size_t t : order) {
    for (std::size_t i = 0; i < kCount; ++i) tensors[t][i] = value(g_rank, s, t, i);
    handles[t] = hvd::allreduce_async("c." + std::to_string(t),
                                      hvd::tensor(tensors[t].data(), kCount), {ReduceOp::kSum});
  }
  for (std::size_t t = 0; t < n; ++t) {
    handles[t].wait();
    bool ok = true;
    for (std::size_t i = 0; i < kCount && ok; ++i) ok = tensors[t][i] == sum_over_ranks(s, t, i);
    expect(ok, "step " + std::to_string(s) + " tensor c." + std::to_string(t));
    if (hash != nullptr) *hash = fnv(*hash, tensors[t].data(), kCount * sizeof(float));
  }
}

}  // namespace

int cache_mode() {
  constexpr std::size_t kTensors = 100;
  constexpr int kSteps = 6;
  std::vector<std::vector<float>> tensors(kTensors, std::vector<float>(kCount));
  std::uint64_t hash = 1469598103934665603ull;
  step(0, kTensors, tensors, &hash);  // first sight: negotiated in full, then cached
  hvd::barrier();                     // every rank's first step done: the next steps start together
  const hvd::EngineStats before = hvd::engine_stats();
  for (int s = 1; s <= kSteps; ++s) step(s, kTensors, tensors, &hash);
  const hvd::EngineStats after = hvd::engine_stats();
  // Only the tensors (the barrier's cycle comes before `before`).
  std::printf("rank %d: steady state per step: hits %g negotiated %g\n", g_rank,
              static_cast<double>(after.cache_hits - before.cache_hits) / kSteps,
              static_cast<double>(after.negotiated - before.negotiated) / kSteps);
  std::printf("rank %d: steady-state cycles decided by cache bits: %llu\n", g_rank,
              static_cast<unsigned long long>(after.decided_by_bits - before.decided_by_bits));
  std::printf("rank %d: checksum %016llx\n", g_rank, static_cast<unsigned long long>(hash));

  // A cached name submitted with another shape on rank 1: every rank's handle fails.
  std::vector<float> x(kCount, 1.0f);
  const std::size_t mine = g_rank == 1 ? kCount - 1 : kCount;
  try {
    hvd::allreduce_async("c.0", hvd::tensor(x.data(), mine), {ReduceOp::kSum}).wait();
    expect(false, "a cached name with another shape on rank 1 was not refused");
  } catch (const hvd::RuntimeError& e) {
    std::printf("rank %d: mismatch after hits: %s\n", g_rank, e.what());
  }
  std::fill(x.begin(), x.end(), 1.0f);
  hvd::allreduce_async("c.0", hvd::tensor(x.data(), kCount), {ReduceOp::kSum}).wait();
  expect(x[0] == static_cast<float>(g_size), "c.0 after the mismatch");
  std::printf("rank %d: after the mismatch: %s\n", g_rank,
              x[0] == static_cast<float>(g_size) ? "ok" : "WRONG");

  // 10 names in turn, one at a time: with capacity 2 the least recently used is always gone.
  hvd::barrier();
  const hvd::EngineStats c0 = hvd::engine_stats();
  for (int round = 0; round < 5; ++round) {
    for (int t = 0; t < 10; ++t) {
      std::vector<float> v(16, static_cast<float>(g_rank + round + t));
      hvd::allreduce_async("cycle." + std::to_string(t), hvd::tensor(v.data(), v.size()),
                           {ReduceOp::kSum})
          .wait();
      float want = 0;
      for (int r = 0; r < g_size; ++r) want += static_cast<float>(r + round + t);
      expect(v[15] == want, "cycle." + std::to_string(t) + " round " + std::to_string(round));
    }
  }
  const hvd::EngineStats c1 = hvd::engine_stats();
  std::printf("rank %d: cycling 10 names: hits %llu negotiated %llu\n", g_rank,
              static_cast<unsigned long long>(c1.cache_hits - c0.cache_hits),
              static_cast<unsigned long long>(c1.negotiated - c0.negotiated));

  // Contributions of every size through the negotiation's allgather, whose slot follows them
  // (128 bytes to 1 KiB, mpi_cycle_transport.cpp): 60 synchronous calls (about 90 bytes each and
  // 32 of eager data: the slot shrinks to 256), then names that need 512 bytes, then more than 1
  // KiB (the second round; with eager data the slot then grows past 1 KiB), then small again.
  const auto sync_sum = [&](const std::string& name, int salt) {
    std::vector<float> v(8, static_cast<float>(g_rank + salt));
    if (name.empty()) {
      hvd::allreduce(hvd::tensor(v.data(), v.size()), {ReduceOp::kSum});
    } else {
      hvd::allreduce_async(name, hvd::tensor(v.data(), v.size()), {ReduceOp::kSum}).wait();
    }
    float want = 0;
    for (int r = 0; r < g_size; ++r) want += static_cast<float>(r + salt);
    expect(v[7] == want, "negotiation sizes: " + std::to_string(name.size()) + "-byte name, call " +
                             std::to_string(salt));
  };
  const std::uint64_t eager_before = hvd::engine_stats().eager;
  for (int i = 0; i < 60; ++i) sync_sum("", i);
  for (int i = 0; i < 3; ++i) sync_sum("long." + std::string(400, 'x') + std::to_string(i), i);
  for (int i = 0; i < 3; ++i) sync_sum("longer." + std::string(3000, 'y') + std::to_string(i), i);
  for (int i = 0; i < 20; ++i) sync_sum("", i);
  std::printf("rank %d: negotiation sizes: %s\n", g_rank, g_failures == 0 ? "ok" : "WRONG");
  // How many of those 86 calls (32 bytes of data each) ran from the inputs gathered with their
  // negotiation (HOROVOD_EAGER_BYTES): all but those a rank brought late, when one was rung.
  std::printf("rank %d: eager: %llu of 86 synchronous calls\n", g_rank,
              static_cast<unsigned long long>(hvd::engine_stats().eager - eager_before));

  // 1000 cached tensors: the AND round's words (one bit per slot in use, from every rank
  // together) are now over the size that goes by allgather, so the AND round of the 100-tensor
  // steps that follow is an MPI_Iallreduce (mpi_cycle_transport.cpp); above it was the
  // allgather. Results checked every step.
  std::vector<std::vector<float>> many(1000, std::vector<float>(kCount));
  for (int s = 10; s < 12; ++s) step(s, many.size(), many, nullptr);
  hvd::barrier();
  const hvd::EngineStats m0 = hvd::engine_stats();
  for (int s = 12; s < 18; ++s) step(s, kTensors, many, nullptr);
  std::printf(
      "rank %d: 1000 tensors: %s (then 6 steps of 100, cycles decided by cache bits: %llu)\n",
      g_rank, g_failures == 0 ? "ok" : "WRONG",
      static_cast<unsigned long long>(hvd::engine_stats().decided_by_bits - m0.decided_by_bits));

  if (g_failures == 0) std::printf("rank %d: all checks passed\n", g_rank);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace libhvd_check
