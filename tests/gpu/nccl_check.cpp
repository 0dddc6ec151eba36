// The GPU check of the NCCL plugin (allreduce/nccl/plugin.cpp, compiled into this binary): one
// process, one rank on device 0. Needs only the CUDA runtime and NCCL; built and run by
// tests/gpu/nccl_check.sh (tests/gpu/README.md).
//
//   1. Correctness: every hvd dtype x reduce op through the plugin's allreduce (out of place and in
//      place) and reducescatter, and every dtype through broadcast and allgather, on device buffers
//      with known contents, compared bit for bit. With one rank every collective is the identity,
//      so an out-of-place output starts as the bitwise complement of the input (it must become
//      the input) and a guard after it must stay untouched (no element too many or too few).
//      Also the default (NULL) stream, int16 (no NCCL type: moved as bytes, its reductions
//      refused with a message), and the plugin's own argument errors (unknown dtype or op) must
//      come back as errors with a message.
//   2. Performance: float32 sum allreduce, 1 MiB .. 1 GiB (powers of 4), through the plugin next
//      to a raw ncclAllReduce on a second communicator made directly, timed with CUDA events in the
//      same run: time per call, algorithm bandwidth (bytes / time) and the ratio plugin/raw.
//
// Usage: nccl_check [--no-perf] [--max-mib N]
// Exit: 0 all correct ("nccl check: OK"), 1 a check failed, 2 cannot run (no CUDA device).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/gpu/nccl_check.h"

extern "C" const hvd_nccl_plugin* hvd_nccl_plugin_v1();

namespace {

using namespace nccl_check;

constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuardByte = 0x5A;

std::string version_text(int code) {  // NCCL >= 2.9: major*10000 + minor*100 + patch
  if (code < 0) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  return buf;
}

std::string cuda_version_text(int code) {  // e.g. 13000 -> 13.0
  if (code <= 0) return "none";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d.%d", code / 1000, code % 1000 / 10);
  return buf;
}

struct Dtype {
  int id;
  const char* name;
  size_t size;
};
constexpr Dtype kDtypes[] = {
    {HVD_UINT8, "uint8", 1},     {HVD_INT8, "int8", 1},       {HVD_INT32, "int32", 4},
    {HVD_INT64, "int64", 8},     {HVD_FLOAT16, "float16", 2}, {HVD_BFLOAT16, "bfloat16", 2},
    {HVD_FLOAT32, "float32", 4}, {HVD_FLOAT64, "float64", 8},
};
struct Op {
  int id;
  const char* name;
};
constexpr Op kOps[] = {{HVD_SUM, "sum"},
                       {HVD_AVERAGE, "average"},
                       {HVD_MIN, "min"},
                       {HVD_MAX, "max"},
                       {HVD_PRODUCT, "product"}};

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Pseudo-random bits; floating-point elements get a normal exponent (no NaN, infinity, zero or
// subnormal), so that any correct one-rank reduction, including x * (1/1) for an average, gives
// back exactly the input bits. Integers take any bits.
template <typename T>
T with_normal_exponent(T bits, int shift, unsigned width) {
  const T field_mask = static_cast<T>(((T{1} << width) - 1) << shift);
  const T max_exp = (T{1} << width) - 2;  // 1 .. all-ones - 1
  const T exp = 1 + ((bits >> shift) & ((T{1} << width) - 1)) % max_exp;
  return static_cast<T>((bits & static_cast<T>(~field_mask)) | static_cast<T>(exp << shift));
}

std::vector<unsigned char> make_input(const Dtype& dt, size_t n, uint64_t seed) {
  std::vector<unsigned char> out(n * dt.size);
  uint64_t s = seed * 1000003u + static_cast<uint64_t>(dt.id);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix64(s);
    unsigned char* p = out.data() + i * dt.size;
    switch (dt.id) {
      case HVD_FLOAT16: {
        const auto v = with_normal_exponent<uint16_t>(static_cast<uint16_t>(r), 10, 5);
        std::memcpy(p, &v, 2);
        break;
      }
      case HVD_BFLOAT16: {
        const auto v = with_normal_exponent<uint16_t>(static_cast<uint16_t>(r), 7, 8);
        std::memcpy(p, &v, 2);
        break;
      }
      case HVD_FLOAT32: {
        const auto v = with_normal_exponent<uint32_t>(static_cast<uint32_t>(r), 23, 8);
        std::memcpy(p, &v, 4);
        break;
      }
      case HVD_FLOAT64: {
        const auto v = with_normal_exponent<uint64_t>(r, 52, 11);
        std::memcpy(p, &v, 8);
        break;
      }
      default:
        std::memcpy(p, &r, dt.size);  // little-endian: the low bytes
    }
  }
  return out;
}

struct Checker {
  const hvd_nccl_plugin* p = nullptr;
  hvd_nccl_comm* comm = nullptr;
  cudaStream_t stream = nullptr;
  unsigned char* d_in = nullptr;
  unsigned char* d_out = nullptr;
  size_t capacity = 0;  // bytes of d_in and of d_out, guard included
  int cases = 0;
  int failures = 0;

  void fail(const std::string& what, const std::string& why) {
    ++failures;
    std::printf("FAIL %s: %s\n", what.c_str(), why.c_str());
  }

  // Fills d_out with the complement of `input` and a guard behind it.
  void poison_output(const std::vector<unsigned char>& input) {
    std::vector<unsigned char> garbage(input.size() + kGuardBytes, kGuardByte);
    for (size_t i = 0; i < input.size(); ++i) garbage[i] = static_cast<unsigned char>(~input[i]);
    to_device(d_out, garbage.data(), garbage.size());
  }

  // d_out must hold `expected` followed by the untouched guard.
  void expect_output(const std::string& what, const std::vector<unsigned char>& expected,
                     size_t elem_size) {
    std::vector<unsigned char> got(expected.size() + kGuardBytes);
    CUDA(cudaMemcpy(got.data(), d_out, got.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < expected.size(); ++i) {
      if (got[i] != expected[i]) {
        const size_t e = i / elem_size;
        size_t bad = 0;
        for (size_t j = 0; j < expected.size(); ++j) bad += got[j] != expected[j] ? 1 : 0;
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "element %zu of %zu differs (byte %zu: got 0x%02x, want 0x%02x); %zu of "
                      "%zu bytes differ",
                      e, expected.size() / elem_size, i, got[i], expected[i], bad, expected.size());
        fail(what, buf);
        return;
      }
    }
    for (size_t i = expected.size(); i < got.size(); ++i) {
      if (got[i] != kGuardByte) {
        fail(what, "wrote past the end of the output (guard byte " +
                       std::to_string(i - expected.size()) + " changed)");
        return;
      }
    }
  }

  bool call_ok(const std::string& what, int rc, const char* err) {
    if (rc != 0) {
      fail(what, std::string("the plugin call returned ") + std::to_string(rc) + ": " + err);
      return false;
    }
    char serr[512] = "";
    if (p->synchronize(comm, stream, kSyncTimeoutMs, serr, sizeof serr) != 0) {
      fail(what, std::string("synchronize failed: ") + serr);
      return false;
    }
    return true;
  }

  void upload_input(const std::vector<unsigned char>& input) {
    to_device(d_in, input.data(), input.size());
  }

  void run_dtype(const Dtype& dt, size_t n) {
    const auto input = make_input(dt, n, n);
    const std::string tag = std::string(dt.name) + " n=" + std::to_string(n);
    char err[512];

    for (const Op& op : kOps) {
      // allreduce, out of place
      std::string what = "allreduce " + std::string(op.name) + " " + tag;
      upload_input(input);
      poison_output(input);
      err[0] = '\0';
      ++cases;
      if (call_ok(what, p->allreduce(comm, d_in, d_out, n, dt.id, op.id, stream, err, sizeof err),
                  err)) {
        expect_output(what, input, dt.size);
      }

      // allreduce, in place (in == out)
      what = "allreduce in-place " + std::string(op.name) + " " + tag;
      poison_output(input);  // sets the guard
      to_device(d_out, input.data(), input.size());
      err[0] = '\0';
      ++cases;
      if (call_ok(what, p->allreduce(comm, d_out, d_out, n, dt.id, op.id, stream, err, sizeof err),
                  err)) {
        expect_output(what, input, dt.size);
      }

      // reducescatter: one rank's share is all of it
      what = "reducescatter " + std::string(op.name) + " " + tag;
      upload_input(input);
      poison_output(input);
      err[0] = '\0';
      ++cases;
      if (call_ok(what,
                  p->reducescatter(comm, d_in, d_out, n, dt.id, op.id, stream, err, sizeof err),
                  err)) {
        expect_output(what, input, dt.size);
      }
    }

    run_moves(dt, n, input, tag);
  }

  // allgather and broadcast: bytes in, the same bytes out (int16 too, which NCCL moves as bytes).
  void run_moves(const Dtype& dt, size_t n, const std::vector<unsigned char>& input,
                 const std::string& tag) {
    char err[512];
    // allgather: rank 0's block is the input
    std::string what = "allgather " + tag;
    upload_input(input);
    poison_output(input);
    err[0] = '\0';
    ++cases;
    if (call_ok(what, p->allgather(comm, d_in, d_out, n, dt.id, stream, err, sizeof err), err)) {
      expect_output(what, input, dt.size);
    }

    // broadcast from root 0 (in place): the data stays
    what = "broadcast " + tag;
    poison_output(input);
    to_device(d_out, input.data(), input.size());
    err[0] = '\0';
    ++cases;
    if (call_ok(what, p->broadcast(comm, d_out, n, dt.id, 0, stream, err, sizeof err), err)) {
      expect_output(what, input, dt.size);
    }
  }

  // The default stream (NULL) is allowed too.
  void run_default_stream(size_t n) {
    const Dtype& dt = kDtypes[6];  // float32
    const auto input = make_input(dt, n, 7);
    const std::string what = "allreduce sum float32 on the default stream n=" + std::to_string(n);
    upload_input(input);
    poison_output(input);
    char err[512] = "";
    ++cases;
    const int rc = p->allreduce(comm, d_in, d_out, n, dt.id, HVD_SUM, nullptr, err, sizeof err);
    if (rc != 0) {
      fail(what, std::string("the plugin call failed: ") + err);
      return;
    }
    char serr[512] = "";
    if (p->synchronize(comm, nullptr, kSyncTimeoutMs, serr, sizeof serr) != 0) {
      fail(what, std::string("synchronize failed: ") + serr);
      return;
    }
    expect_output(what, input, dt.size);
  }

  // int16: NCCL has no such type. The plugin moves it as bytes and refuses to reduce it.
  void run_int16(size_t n) {
    constexpr Dtype kInt16{HVD_INT16, "int16", 2};
    const auto input = make_input(kInt16, n, n);
    run_moves(kInt16, n, input, "int16 n=" + std::to_string(n));
    char err[512] = "";
    expect_error("allreduce int16",
                 p->allreduce(comm, d_in, d_out, n, HVD_INT16, HVD_SUM, stream, err, sizeof err),
                 err, "NCCL has no int16 type");
    err[0] = '\0';
    expect_error(
        "reducescatter int16",
        p->reducescatter(comm, d_in, d_out, n, HVD_INT16, HVD_MAX, stream, err, sizeof err), err,
        "NCCL has no int16 type");
  }

  // Arguments the plugin must refuse with a message (no NCCL call for dtype / op).
  void expect_error(const std::string& what, int rc, const char* err, const char* needle) {
    ++cases;
    if (rc == 0) {
      fail(what, "the plugin accepted it");
    } else if (err[0] == '\0' || (needle != nullptr && std::strstr(err, needle) == nullptr)) {
      fail(what, std::string("no or an unexpected message: '") + err + "'");
    } else {
      std::printf("ok   %s: refused (%s)\n", what.c_str(), err);
    }
  }

  void run_errors() {
    char err[512] = "";
    expect_error("allreduce with dtype 99",
                 p->allreduce(comm, d_in, d_out, 16, 99, HVD_SUM, stream, err, sizeof err), err,
                 "dtype");
    err[0] = '\0';
    expect_error("allreduce with op 99",
                 p->allreduce(comm, d_in, d_out, 16, HVD_FLOAT32, 99, stream, err, sizeof err), err,
                 "op");
    err[0] = '\0';
    expect_error("reducescatter with op 99",
                 p->reducescatter(comm, d_in, d_out, 16, HVD_INT32, 99, stream, err, sizeof err),
                 err, "op");
    err[0] = '\0';
    expect_error("allgather with dtype -1",
                 p->allgather(comm, d_in, d_out, 16, -1, stream, err, sizeof err), err, "dtype");
    err[0] = '\0';
    expect_error("broadcast with dtype 9 (one past int16)",
                 p->broadcast(comm, d_out, 16, HVD_INT16 + 1, 0, stream, err, sizeof err), err,
                 "dtype");
  }
};

}  // namespace

int main(int argc, char** argv) {
  bool perf = true;
  size_t max_mib = 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-perf") {
      perf = false;
    } else if (a == "--max-mib" && i + 1 < argc) {
      max_mib = std::strtoull(argv[++i], nullptr, 10);
      if (max_mib == 0) {
        std::fprintf(stderr, "nccl check: --max-mib wants a positive number of MiB\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: nccl_check [--no-perf] [--max-mib N]\n");
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  const hvd_nccl_plugin* p = hvd_nccl_plugin_v1();
  if (p == nullptr || p->abi != HVD_NCCL_PLUGIN_ABI) {
    die(1, "the plugin's entry point gave no table or the wrong ABI");
  }
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  std::printf("NCCL %s (library; headers %s)\n", version_text(p->nccl_version()).c_str(),
              version_text(NCCL_VERSION_CODE).c_str());
  std::printf("CUDA runtime %s, driver supports CUDA %s\n",
              cuda_version_text(p->cuda_runtime_version()).c_str(),
              cuda_version_text(driver).c_str());

  char why[512] = "";
  const int devices = p->device_count(why, sizeof why);
  if (devices <= 0) {
    std::fprintf(stderr, "no CUDA device: %s\n", why[0] != '\0' ? why : "none visible");
    std::printf("nccl check: cannot run here (no CUDA device)\n");
    return 2;
  }
  cudaDeviceProp prop{};
  CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0 of %d: %s (compute %d.%d, %.1f GiB, PCI %04x:%02x:%02x)\n", devices,
              prop.name, prop.major, prop.minor,
              static_cast<double>(prop.totalGlobalMem) / (1024.0 * kMiB), prop.pciDomainID,
              prop.pciBusID, prop.pciDeviceID);

  // The plugin's communicator: unique id + comm_create on device 0, one rank.
  unsigned char id[HVD_NCCL_UNIQUE_ID_BYTES];
  char err[512] = "";
  if (p->unique_id(id, err, sizeof err) != 0) die(1, std::string("unique_id: ") + err);
  hvd_nccl_comm* comm = p->comm_create(id, 1, 0, 0, err, sizeof err);
  if (comm == nullptr) die(1, std::string("comm_create: ") + err);

  Checker c;
  c.p = p;
  c.comm = comm;
  CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  // One element; an odd count of up to 8 MB; and 32 * 31256 + 5, whose tail NCCL's one-rank
  // average kernel (before 2.29.7) drops for every float type (kRawAverageCount, nccl_check.h).
  const size_t counts[] = {1, 1000003, kRawAverageCount};
  c.capacity = *std::max_element(std::begin(counts), std::end(counts)) * 8 + kGuardBytes;
  CUDA(cudaMalloc(&c.d_in, c.capacity));
  CUDA(cudaMalloc(&c.d_out, c.capacity));

  for (const size_t n : counts) {
    for (const Dtype& dt : kDtypes) {
      const int before = c.failures;
      const int cases_before = c.cases;
      c.run_dtype(dt, n);
      std::printf(
          "%s %-8s n=%-8zu allreduce x5 ops (out of place, in place), reducescatter x5, "
          "allgather, broadcast (%d cases)\n",
          c.failures == before ? "ok  " : "FAIL", dt.name, n, c.cases - cases_before);
    }
  }
  for (const size_t n : {size_t{1}, size_t{1000003}}) {
    const int before = c.failures;
    const int cases_before = c.cases;
    c.run_int16(n);
    std::printf(
        "%s int16    n=%-8zu allgather, broadcast (as bytes), reductions refused (%d "
        "cases)\n",
        c.failures == before ? "ok  " : "FAIL", n, c.cases - cases_before);
  }
  {
    const int before = c.failures;
    c.run_default_stream(4099);
    std::printf("%s allreduce on the default stream\n", c.failures == before ? "ok  " : "FAIL");
  }
  c.run_errors();
  std::printf("correctness: %d cases, %d failed\n", c.cases, c.failures);
  report_raw_one_rank_average(c.stream);

  CUDA(cudaFree(c.d_in));
  CUDA(cudaFree(c.d_out));
  c.d_in = c.d_out = nullptr;

  if (perf) run_perf(p, comm, c.stream, max_mib * kMiB);

  CUDA(cudaStreamDestroy(c.stream));
  p->comm_destroy(comm);

  if (c.failures != 0) {
    std::printf("nccl check: FAILED (%d of %d cases)\n", c.failures, c.cases);
    return 1;
  }
  std::printf("nccl check: OK\n");
  return 0;
}
