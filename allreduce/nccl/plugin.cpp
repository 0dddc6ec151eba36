// libhvd_nccl.so: NCCL collectives on CUDA device buffers behind the C ABI of plugin_api.h.
// Linked against the CUDA runtime and NCCL; libhvd itself is not (it dlopens this file).
// Every CUDA and NCCL call is checked; the message names the call and the library's own text.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "allreduce/nccl/nccl_types.h"
#include "allreduce/nccl/plugin_api.h"

struct hvd_nccl_comm {
  ncclComm_t comm = nullptr;
  int device = -1;
  int nranks = 0;
};

namespace {

void say(char* err, size_t len, const char* fmt, const char* a, const char* b = "") {
  if (err != nullptr && len > 0) std::snprintf(err, len, fmt, a, b);
}

bool cuda_ok(cudaError_t rc, const char* call, char* err, size_t len) {
  if (rc == cudaSuccess) return true;
  say(err, len, "%s failed: %s", call, cudaGetErrorString(rc));
  return false;
}

bool nccl_ok(ncclResult_t rc, const char* call, char* err, size_t len) {
  if (rc == ncclSuccess) return true;
  say(err, len, "%s failed: %s", call, ncclGetErrorString(rc));
  return false;
}

int nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : -1;
}

int cuda_runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : -1;
}

// "No driver" (35, cudaErrorInsufficientDriver) and "no device" (100) both mean no usable GPU.
int device_count(char* why, size_t len) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    say(why, len, "%s (%s)", cudaGetErrorString(rc), cudaGetErrorName(rc));
    return -1;
  }
  if (n == 0) say(why, len, "%s%s", "the CUDA driver sees no device");
  return n;
}

int unique_id(void* id, char* err, size_t len) {
  ncclUniqueId u;
  if (!nccl_ok(ncclGetUniqueId(&u), "ncclGetUniqueId", err, len)) return 1;
  static_assert(sizeof u == HVD_NCCL_UNIQUE_ID_BYTES);
  std::memcpy(id, &u, sizeof u);
  return 0;
}

hvd_nccl_comm* comm_create(const void* id, int nranks, int rank, int device, char* err,
                           size_t len) {
  if (!cuda_ok(cudaSetDevice(device), "cudaSetDevice", err, len)) return nullptr;
  ncclUniqueId u;
  std::memcpy(&u, id, sizeof u);
  auto* c = new hvd_nccl_comm;
  c->device = device;
  c->nranks = nranks;
  if (!nccl_ok(ncclCommInitRank(&c->comm, nranks, u, rank), "ncclCommInitRank", err, len)) {
    delete c;
    return nullptr;
  }
  return c;
}

void comm_destroy(hvd_nccl_comm* c) {
  if (c == nullptr) return;
  if (c->comm != nullptr) ncclCommDestroy(c->comm);
  delete c;
}

void comm_abort(hvd_nccl_comm* c) {
  if (c == nullptr) return;
  if (c->comm != nullptr) ncclCommAbort(c->comm);
  c->comm = nullptr;
}

// `nranks` picks the op (nccl_types.h: one rank sums instead of averaging).
bool types(int dtype, int op, int nranks, ncclDataType_t& t, ncclRedOp_t* o, char* err,
           size_t len) {
  const auto nt = hvd::nccl::nccl_dtype(dtype);
  if (!nt) {
    say(err, len, "%s", dtype == HVD_INT16 ? hvd::nccl::kNcclNoInt16 : "unknown dtype");
    return false;
  }
  t = *nt;
  if (o != nullptr) {
    const auto no = hvd::nccl::nccl_op(op, nranks);
    if (!no) {
      say(err, len, "%s", "unknown reduce op");
      return false;
    }
    *o = *no;
  }
  return true;
}

int allreduce(hvd_nccl_comm* c, const void* in, void* out, size_t count, int dtype, int op,
              void* stream, char* err, size_t len) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!types(dtype, op, c->nranks, t, &o, err, len)) return 1;
  return nccl_ok(ncclAllReduce(in, out, count, t, o, c->comm, static_cast<cudaStream_t>(stream)),
                 "ncclAllReduce", err, len)
             ? 0
             : 1;
}

// Data movement: every hvd dtype, int16 as bytes (nccl_types.h).
bool move_type(int dtype, size_t count, hvd::nccl::NcclMove& m, char* err, size_t len) {
  const auto nm = hvd::nccl::nccl_move(dtype, count);
  if (!nm) {
    say(err, len, "%s", "unknown dtype");
    return false;
  }
  m = *nm;
  return true;
}

int broadcast(hvd_nccl_comm* c, void* data, size_t count, int dtype, int root, void* stream,
              char* err, size_t len) {
  hvd::nccl::NcclMove m;
  if (!move_type(dtype, count, m, err, len)) return 1;
  return nccl_ok(ncclBroadcast(data, data, m.count, m.type, root, c->comm,
                               static_cast<cudaStream_t>(stream)),
                 "ncclBroadcast", err, len)
             ? 0
             : 1;
}

int allgather(hvd_nccl_comm* c, const void* in, void* out, size_t count, int dtype, void* stream,
              char* err, size_t len) {
  hvd::nccl::NcclMove m;
  if (!move_type(dtype, count, m, err, len)) return 1;
  return nccl_ok(
             ncclAllGather(in, out, m.count, m.type, c->comm, static_cast<cudaStream_t>(stream)),
             "ncclAllGather", err, len)
             ? 0
             : 1;
}

int reducescatter(hvd_nccl_comm* c, const void* in, void* out, size_t count, int dtype, int op,
                  void* stream, char* err, size_t len) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!types(dtype, op, c->nranks, t, &o, err, len)) return 1;
  return nccl_ok(
             ncclReduceScatter(in, out, count, t, o, c->comm, static_cast<cudaStream_t>(stream)),
             "ncclReduceScatter", err, len)
             ? 0
             : 1;
}

// How long synchronize() polls without sleeping. cudaStreamSynchronize spins too (CUDA's default
// schedule with fewer busy contexts than cores); a sleep of 50 us is about 100 us with the
// kernel's timer slack, which made a 10 us allreduce take 116 us on an H200 (tests/gpu/README.md).
constexpr auto kSpin = std::chrono::milliseconds(2);

// Polls the stream and NCCL's asynchronous error, so a failed peer aborts instead of hanging:
// yielding the core between polls for the first kSpin, then sleeping 50 us between them (an op
// that long loses at most a few percent to the sleep's granularity).
int synchronize(hvd_nccl_comm* c, void* stream, int timeout_ms, char* err, size_t len) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  auto* s = static_cast<cudaStream_t>(stream);
  for (;;) {
    const cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return 0;
    if (q != cudaErrorNotReady) return cuda_ok(q, "cudaStreamQuery", err, len) ? 0 : 1;
    ncclResult_t async = ncclSuccess;
    if (!nccl_ok(ncclCommGetAsyncError(c->comm, &async), "ncclCommGetAsyncError", err, len)) {
      return 1;
    }
    if (async != ncclSuccess) {
      say(err, len, "NCCL reported an asynchronous error: %s; the communicator was aborted",
          ncclGetErrorString(async));
      comm_abort(c);
      return 1;
    }
    const auto now = std::chrono::steady_clock::now();
    if (timeout_ms > 0 && now > deadline) {
      say(err, len, "%s",
          "the NCCL operation did not finish in time; the communicator was "
          "aborted");
      comm_abort(c);
      return 1;
    }
    if (now - start < kSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

const hvd_nccl_plugin kPlugin = {
    HVD_NCCL_PLUGIN_ABI, nccl_version,  cuda_runtime_version, device_count, unique_id,
    comm_create,         comm_destroy,  comm_abort,           allreduce,    broadcast,
    allgather,           reducescatter, synchronize};

}  // namespace

extern "C" __attribute__((visibility("default"))) const hvd_nccl_plugin* hvd_nccl_plugin_v1() {
  return &kPlugin;
}
