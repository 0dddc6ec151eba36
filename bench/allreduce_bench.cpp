// Allreduce bus bandwidth (BRIEF section 6): libhvd's hvd::allreduce (float32, sum, in place)
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

#if HVD_BENCH_HAS_MPI
#include <mpi.h>
#endif
#if HVD_BENCH_HAS_GLOO
#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <httplib.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
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
// gloo::rendezvous::Store over hvdrun's rendezvous server: PUT/GET http://ADDR/<scope>/<key>
// with the job's bearer token; 404 = not there yet, so get/wait poll until the key appears.
class BenchStore : public gloo::rendezvous::Store {
 public:
  BenchStore(const std::string& address, const std::string& token, std::string scope, int rank,
             std::chrono::milliseconds timeout)
      : scope_(std::move(scope)), timeout_(timeout) {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) throw std::runtime_error("HVD_RENDEZVOUS_ADDR: no port");
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    client_ = std::make_unique<httplib::Client>(host, std::stoi(address.substr(colon + 1)));
    client_->set_keep_alive(true);
    client_->set_default_headers(
        {{"Authorization", "Bearer " + token}, {"X-Hvd-Rank", std::to_string(rank)}});
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
  std::string path(const std::string& key) const {  // keys outside [A-Za-z0-9._-]: hex
    bool plain = !key.empty();
    for (unsigned char c : key) {
      plain = plain && (std::isalnum(c) || c == '.' || c == '_' || c == '-');
    }
    if (plain) return "/" + scope_ + "/" + key;
    std::string out = "/" + scope_ + "/x-";
    for (unsigned char c : key) {
      out += "0123456789abcdef"[c >> 4];
      out += "0123456789abcdef"[c & 15];
    }
    return out;
  }
  std::string scope_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<httplib::Client> client_;
};

// libhvd's float32 sum kernel, as a plain function like libhvd's ReduceFn.
void sum_floats(void* out, const void* a, const void* b, std::size_t n) {
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

struct GlooRaw : RawEngine {
  GlooRaw(int rank, int size) {
    name = "gloo::allreduce";
    const std::string timeout_s = env("HOROVOD_GLOO_TIMEOUT_SECONDS");
    const std::chrono::milliseconds timeout(1000LL *
                                            (timeout_s.empty() ? 30 : std::stoi(timeout_s)));
    gloo::transport::tcp::attr attr;
    attr.hostname = env("HVD_ADVERTISE_ADDR");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    BenchStore store(env("HVD_RENDEZVOUS_ADDR"), env("HVD_RENDEZVOUS_TOKEN"),
                     env("HVD_JOB_ID") + ".bench", rank, timeout);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    context_ = std::move(context);
  }
  void allreduce(float* data, std::size_t count) override {
    gloo::AllreduceOptions opts(context_);
    // libhvd passes the same bytes as std::uint32_t (Gloo uses only sizeof(T)); same size here.
    opts.setOutput(data, count);
    opts.setReduceFunction(sum_floats);
    opts.setTag(next_tag_++);
    gloo::allreduce(opts);
  }
  std::shared_ptr<gloo::Context> context_;
  std::uint32_t next_tag_ = 0;
};
#endif

std::unique_ptr<RawEngine> make_raw_engine() {
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
    return std::make_unique<GlooRaw>(hvd::rank(), hvd::size());
  }
#endif
  throw std::runtime_error("libhvd's backend " + backend + " is not built into this benchmark");
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

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
  std::unique_ptr<RawEngine> raw = make_raw_engine();
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
