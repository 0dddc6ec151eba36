// GPU support without a GPU: device choice, version texts, the no-device error, the dtype/op
// mapping to NCCL and the NCCL unique id the control plane exchanges (the plugin makes one
// without a device).
#include <dlfcn.h>

#include <cstring>
#include <string>
#include "tests/support/catch.h"

#include "allreduce/backends/gpu.h"

using hvd::runtime::GpuFacts;

TEST_CASE("gpu: a rank's device is its local rank modulo the visible devices", "[libhvd]") {
  CHECK(hvd::runtime::choose_device(0, 4) == 0);
  CHECK(hvd::runtime::choose_device(3, 4) == 3);
  CHECK(hvd::runtime::choose_device(5, 4) == 1);
  CHECK(hvd::runtime::choose_device(2, 1) == 0);
  CHECK(hvd::runtime::choose_device(0, 0) == -1);  // no GPU
}

TEST_CASE("gpu: NCCL and CUDA version codes read as people write them", "[libhvd]") {
  CHECK(hvd::runtime::nccl_version_text(22809) == "2.28.9");
  CHECK(hvd::runtime::nccl_version_text(21803) == "2.18.3");
  CHECK(hvd::runtime::cuda_version_text(13000) == "13.0");
  CHECK(hvd::runtime::cuda_version_text(12040) == "12.4");
  CHECK(hvd::runtime::nccl_version_text(-1) == "unknown");
}

TEST_CASE("gpu: why a CUDA tensor cannot run names the host and the cause", "[libhvd]") {
  GpuFacts none;
  none.load_error = "this libhvd was built without the NCCL plugin";
  CHECK(hvd::runtime::gpu_unavailable_reason(none, "h1") ==
        "no NCCL on host h1: this libhvd was built without the NCCL plugin");
  static const hvd_nccl_plugin fake{};
  GpuFacts no_device;
  no_device.api = &fake;
  no_device.devices = 0;
  no_device.no_device_reason = "CUDA driver version is insufficient (cudaErrorInsufficientDriver)";
  CHECK(hvd::runtime::gpu_unavailable_reason(no_device, "h2") ==
        "no CUDA device visible on host h2: CUDA driver version is insufficient "
        "(cudaErrorInsufficientDriver)");
  GpuFacts ok;
  ok.api = &fake;
  ok.devices = 2;
  CHECK(hvd::runtime::gpu_unavailable_reason(ok, "h3").empty());
}

#if HVD_TEST_HAS_NCCL
#include "allreduce/nccl/nccl_types.h"

TEST_CASE("gpu: every hvd dtype and reduce op has its NCCL counterpart", "[libhvd]") {
  using hvd::nccl::nccl_dtype;
  using hvd::nccl::nccl_op;
  CHECK(nccl_dtype(HVD_UINT8) == ncclUint8);
  CHECK(nccl_dtype(HVD_INT8) == ncclInt8);
  CHECK(nccl_dtype(HVD_INT32) == ncclInt32);
  CHECK(nccl_dtype(HVD_INT64) == ncclInt64);
  CHECK(nccl_dtype(HVD_FLOAT16) == ncclFloat16);
  CHECK(nccl_dtype(HVD_BFLOAT16) == ncclBfloat16);
  CHECK(nccl_dtype(HVD_FLOAT32) == ncclFloat32);
  CHECK(nccl_dtype(HVD_FLOAT64) == ncclFloat64);
  CHECK_FALSE(nccl_dtype(HVD_INT16).has_value());  // NCCL has no int16: nothing to reduce with
  CHECK_FALSE(nccl_dtype(99).has_value());
  CHECK(nccl_op(HVD_SUM) == ncclSum);
  CHECK(nccl_op(HVD_AVERAGE) == ncclAvg);  // native average: no postscale pass
  CHECK(nccl_op(HVD_MIN) == ncclMin);
  CHECK(nccl_op(HVD_MAX) == ncclMax);
  CHECK(nccl_op(HVD_PRODUCT) == ncclProd);
  CHECK_FALSE(nccl_op(-1).has_value());
}

TEST_CASE("gpu: int16 moves as bytes, every other dtype as its own NCCL type", "[libhvd]") {
  using hvd::nccl::nccl_move;
  const auto i16 = nccl_move(HVD_INT16, 5);
  REQUIRE(i16.has_value());
  CHECK(i16->type == ncclUint8);
  CHECK(i16->count == 10);
  for (const int t : {HVD_UINT8, HVD_INT8, HVD_INT32, HVD_INT64, HVD_FLOAT16, HVD_BFLOAT16,
                      HVD_FLOAT32, HVD_FLOAT64}) {
    INFO("dtype " << t);
    const auto m = nccl_move(t, 7);
    REQUIRE(m.has_value());
    CHECK(m->type == *hvd::nccl::nccl_dtype(t));
    CHECK(m->count == 7);
  }
  CHECK_FALSE(nccl_move(HVD_INT16 + 1, 1).has_value());
  CHECK_FALSE(nccl_move(-1, 1).has_value());
  CHECK(std::string(hvd::nccl::kNcclNoInt16).find("int16") != std::string::npos);
}

TEST_CASE("gpu: one rank sums instead of averaging (NCCL's one-rank average drops a tail)",
          "[libhvd]") {
  using hvd::nccl::nccl_op;
  CHECK(nccl_op(HVD_AVERAGE, 1) == ncclSum);  // NVIDIA/nccl#1950: a sum of one is a copy
  CHECK(nccl_op(HVD_AVERAGE, 2) == ncclAvg);
  CHECK(nccl_op(HVD_AVERAGE, 64) == ncclAvg);
  for (const int op : {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT}) {
    CHECK(nccl_op(op, 1) == nccl_op(op));
    CHECK(nccl_op(op, 8) == nccl_op(op));
  }
  CHECK_FALSE(nccl_op(-1, 1).has_value());
}

TEST_CASE("gpu: the plugin loads without a GPU and makes distinct NCCL unique ids", "[libhvd]") {
  void* handle = ::dlopen(HVD_TEST_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  INFO((handle == nullptr ? ::dlerror() : "loaded"));
  REQUIRE(handle != nullptr);
  auto entry = reinterpret_cast<hvd_nccl_plugin_entry>(::dlsym(handle, HVD_NCCL_PLUGIN_SYMBOL));
  REQUIRE(entry != nullptr);
  const hvd_nccl_plugin* api = entry();
  REQUIRE(api->abi == HVD_NCCL_PLUGIN_ABI);
  CHECK(api->nccl_version() >= 21000);  // ncclAvg needs 2.10
  char a[HVD_NCCL_UNIQUE_ID_BYTES] = {}, b[HVD_NCCL_UNIQUE_ID_BYTES] = {}, err[256] = {};
  REQUIRE(api->unique_id(a, err, sizeof err) == 0);
  REQUIRE(api->unique_id(b, err, sizeof err) == 0);
  CHECK(std::memcmp(a, b, sizeof a) != 0);
  char zero[HVD_NCCL_UNIQUE_ID_BYTES] = {};
  CHECK(std::memcmp(a, zero, sizeof a) != 0);
  char why[256] = {};
  if (api->device_count(why, sizeof why) <= 0) CHECK(std::strlen(why) > 0);  // a reason
}
#endif

#if HVD_TEST_HAS_GLOO
#include <gloo/rendezvous/hash_store.h>

#include <future>

#include "allreduce/api/status_error.h"
#include "allreduce/backends/gloo_backend.h"

namespace {

using hvd::runtime::MakeUniqueId;
using hvd::runtime::NcclUniqueId;

// Runs exchange_unique_id on two real Gloo ranks (threads of this process, connected over
// loopback through an in-process store); returns each rank's id, or its error text.
std::array<std::string, 2> exchange_on_two_ranks(const MakeUniqueId& make) {
  gloo::rendezvous::HashStore store;
  auto rank = [&](int r) -> std::string {
    hvd::runtime::GlooBackend gloo({.rank = r,
                                    .size = 2,
                                    .bind_address = "127.0.0.1",
                                    .timeout = std::chrono::milliseconds(10000)},
                                   store, "an in-process store");
    try {
      const NcclUniqueId id = hvd::runtime::exchange_unique_id(gloo, r, make);
      return std::string(id.begin(), id.end());
    } catch (const hvd::runtime::StatusError& e) {
      return std::string("error: ") + e.what();
    }
  };
  auto one = std::async(std::launch::async, rank, 1);
  const std::string zero = rank(0);
  return {zero, one.get()};
}

}  // namespace

TEST_CASE("gpu: rank 0's NCCL unique id reaches every rank over the CPU backend", "[libhvd]") {
  int made = 0;
  const auto result = exchange_on_two_ranks([&](void* id, char*, std::size_t) {
    ++made;  // only rank 0 makes one
    std::memset(id, 0x5a, HVD_NCCL_UNIQUE_ID_BYTES);
    static_cast<char*>(id)[7] = 1;
    return 0;
  });
  CHECK(made == 1);
  REQUIRE(result[0].size() == HVD_NCCL_UNIQUE_ID_BYTES);
  CHECK(result[1] == result[0]);
  CHECK(result[1][7] == 1);
}

TEST_CASE("gpu: rank 0 failing to make the NCCL id fails every rank, none waits", "[libhvd]") {
  const auto result = exchange_on_two_ranks([](void*, char* err, std::size_t len) {
    std::snprintf(err, len, "ncclGetUniqueId: unhandled system error");
    return 1;
  });
  CHECK(result[0] ==
        "error: rank 0 could not create the NCCL unique id: ncclGetUniqueId: unhandled system "
        "error");
  CHECK(result[1] == "error: rank 0 could not create the NCCL unique id: see rank 0's error");
}

#if HVD_TEST_HAS_NCCL
TEST_CASE("gpu: the real plugin's unique id (no GPU needed) travels intact", "[libhvd]") {
  void* handle = ::dlopen(HVD_TEST_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  auto entry = reinterpret_cast<hvd_nccl_plugin_entry>(::dlsym(handle, HVD_NCCL_PLUGIN_SYMBOL));
  REQUIRE(entry != nullptr);
  const auto result = exchange_on_two_ranks(entry()->unique_id);
  REQUIRE(result[0].size() == HVD_NCCL_UNIQUE_ID_BYTES);
  CHECK(result[1] == result[0]);
  CHECK(result[0] != std::string(HVD_NCCL_UNIQUE_ID_BYTES, '\0'));
}
#endif
#endif
