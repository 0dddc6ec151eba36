// What the benchmarks share: the raw engine under libhvd, driven from the same processes
// (MPI_Allreduce on MPI_COMM_WORLD under mpirun; gloo::allreduce on the bench's own Gloo context
// under native hvdrun, connected like libhvd's own through hvdrun's rendezvous), and timing
// helpers. Header-only: each benchmark is one executable.
#pragma once

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <hvd/hvd.hpp>

#if HVD_BENCH_HAS_MPI
#include <mpi.h>
#endif
#if HVD_BENCH_HAS_GLOO
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <httplib.h>

#include "common/thread_policy.h"
#include "contract/rendezvous.h"
#endif

namespace hvd_bench {

using Clock = std::chrono::steady_clock;

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// libhvd's float32 scale kernel (allreduce/kernels/kernels.cpp: x *= f in 64-byte blocks,
// vectorized at -O2): what a caller averaging by hand after a raw allreduce runs.
inline void scale_floats(float* x, std::size_t count, float f) {
  constexpr std::size_t kBlock = 16;
  std::size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (std::size_t k = 0; k < kBlock; ++k) x[i + k] *= f;
  }
  for (; i < count; ++i) x[i] *= f;
}

// The raw engine: an in-place float32 sum over all ranks.
struct RawEngine {
  virtual ~RawEngine() = default;
  virtual void allreduce(float* data, std::size_t count) = 0;
  std::string name;
};

#if HVD_BENCH_HAS_MPI
struct MpiRaw : RawEngine {
  MpiRaw() { name = "MPI_Allreduce"; }
  void allreduce(float* data, std::size_t count) override {
    if (MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD) != MPI_SUCCESS) {
      throw std::runtime_error("MPI_Allreduce failed");
    }
  }
};
#endif

#if HVD_BENCH_HAS_GLOO
// gloo::rendezvous::Store over hvdrun's rendezvous server (contract/rendezvous.h): PUT/GET
// /<scope>/<key> with the job's bearer token; 404 = not there yet, so get/wait poll until the key
// appears.
class BenchStore : public gloo::rendezvous::Store {
 public:
  BenchStore(const std::string& address, const std::string& token, std::string scope, int rank,
             std::chrono::milliseconds timeout)
      : scope_(std::move(scope)), timeout_(timeout) {
    namespace protocol = hvd::contract::rendezvous;
    const auto parts = protocol::split_address(address);
    if (!parts) throw std::runtime_error("HVD_RENDEZVOUS_ADDR: not host:port");
    client_ = std::make_unique<httplib::Client>(parts->first, parts->second);
    client_->set_keep_alive(true);
    client_->set_default_headers(
        {{std::string(protocol::kAuthorizationHeader), protocol::bearer(token)},
         {std::string(protocol::kRankHeader), std::to_string(rank)}});
  }
  void set(const std::string& key, const std::vector<char>& data) override {
    auto res = client_->Put(path(key), data.data(), data.size(), "application/octet-stream");
    if (!res || res->status != 200) {
      throw std::runtime_error("rendezvous PUT " + path(key) + " failed");
    }
  }
  std::vector<char> get(const std::string& key) override { return get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) get(key, timeout);
  }

 private:
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (auto pause = std::chrono::milliseconds(1);;
         pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
      auto res = client_->Get(path(key));
      if (res && res->status == 200) return std::vector<char>(res->body.begin(), res->body.end());
      if (res && res->status != 404) {
        throw std::runtime_error("rendezvous GET " + path(key) + ": HTTP " +
                                 std::to_string(res->status));
      }
      if (Clock::now() >= deadline) throw std::runtime_error("rendezvous timeout on " + path(key));
      std::this_thread::sleep_for(pause);
    }
  }
  std::string path(const std::string& key) const {
    return hvd::contract::rendezvous::key_path(scope_, key);
  }
  std::string scope_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<httplib::Client> client_;
};

// libhvd's float32 sum kernel (allreduce/kernels/kernels.cpp: 64-byte blocks, vectorized at -O2),
// as a plain function like libhvd's ReduceFn, so that both columns reduce with the same code.
void sum_floats(void* out, const void* a, const void* b, std::size_t n) {
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  constexpr std::size_t kBlock = 16;
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float block[kBlock];
    for (std::size_t k = 0; k < kBlock; ++k) block[k] = x[i + k] + y[i + k];
    std::memcpy(o + i, block, sizeof block);
  }
  for (; i < n; ++i) o[i] = x[i] + y[i];
}

// BENCH_GLOO_RAW=sync: the raw column runs what libhvd runs for allreduces of up to
// HOROVOD_GLOO_SYNC_BYTES (gloo_backend.h): gloo::AllreduceHalvingDoubling on pairs in Gloo's
// synchronous mode, in pieces of HOROVOD_GLOO_SYNC_PIECE_BYTES (default net.core.wmem_max), so
// the ratio is the engine's own overhead over the same algorithm rather than the gain over
// gloo::allreduce.
struct GlooRaw : RawEngine {
  GlooRaw(int rank, int size, const std::string& scope) {
    sync_ = env("BENCH_GLOO_RAW") == "sync" && size > 1;
    name = sync_ ? "gloo::AllreduceHalvingDoubling, synchronous pairs" : "gloo::allreduce";
    const std::string timeout_s = env("HOROVOD_GLOO_TIMEOUT_SECONDS");
    const std::chrono::milliseconds timeout(1000LL *
                                            (timeout_s.empty() ? 30 : std::stoi(timeout_s)));
    gloo::transport::tcp::attr attr;
    attr.hostname = env("HVD_ADVERTISE_ADDR");
    // Gloo's event loop under the policy libhvd gives its own (HOROVOD_GLOO_LOOP_POLICY), so
    // the raw column measures the collective as libhvd runs it.
    const auto policy = hvd::parse_thread_policy(env("HOROVOD_GLOO_LOOP_POLICY"));
    std::shared_ptr<gloo::transport::Device> device;
    hvd::run_with_thread_policy(policy.value_or(hvd::ThreadPolicy::kNormal),
                                [&] { device = gloo::transport::tcp::CreateDevice(attr); });
    BenchStore store(env("HVD_RENDEZVOUS_ADDR"), env("HVD_RENDEZVOUS_TOKEN"),
                     env("HVD_JOB_ID") + "." + scope, rank, timeout);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    context_ = std::move(context);
    if (sync_) {
      for (int r = 0; r < size; ++r) {
        if (r != rank) context_->getPair(r)->setSync(true, false);
      }
      const std::string piece = env("HOROVOD_GLOO_SYNC_PIECE_BYTES");
      long long bytes = piece.empty() ? -1 : std::stoll(piece);
      if (bytes <= 0) {
        std::ifstream in("/proc/sys/net/core/wmem_max");
        if (!(in >> bytes) || bytes < 4096) bytes = 212992;
      }
      piece_ = static_cast<std::size_t>(bytes) / sizeof(float);
    }
  }
  void allreduce(float* data, std::size_t count) override {
    if (sync_) {
      for (std::size_t done = 0; done < count; done += piece_) {
        const std::size_t n = std::min(piece_, count - done);
        gloo::AllreduceHalvingDoubling<float> algorithm(context_, {data + done},
                                                        static_cast<int>(n));
        algorithm.run();
      }
      return;
    }
    gloo::AllreduceOptions opts(context_);
    // libhvd passes the same bytes as std::uint32_t (Gloo uses only sizeof(T)); same size here.
    opts.setOutput(data, count);
    opts.setReduceFunction(sum_floats);
    opts.setTag(next_tag_++);
    gloo::allreduce(opts);
  }
  std::shared_ptr<gloo::Context> context_;
  std::uint32_t next_tag_ = 0;
  bool sync_ = false;
  std::size_t piece_ = 0;  // elements
};
#endif

// `scope`: the rendezvous scope of the bench's own Gloo context ("<job>.<scope>").
inline std::unique_ptr<RawEngine> make_raw_engine(const std::string& scope) {
  const std::string backend = hvd::backend_name();
#if HVD_BENCH_HAS_MPI
  if (backend == "mpi") {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) throw std::runtime_error("libhvd uses MPI but MPI is not initialised");
    return std::make_unique<MpiRaw>();
  }
#endif
#if HVD_BENCH_HAS_GLOO
  if (backend == "gloo") {
    if (env("HVD_RENDEZVOUS_ADDR").empty()) {
      throw std::runtime_error("libhvd uses Gloo without hvdrun's rendezvous: start with hvdrun");
    }
    return std::make_unique<GlooRaw>(hvd::rank(), hvd::size(), scope);
  }
#endif
  throw std::runtime_error("libhvd's backend " + backend + " is not built into this benchmark");
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace hvd_bench
