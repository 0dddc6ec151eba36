// libhvd's C++ API: Horovod's collectives for a C++ training program.
//
//   hvd::init();                                   // reads hvdrun's or mpirun's environment
//   std::vector<float> grad = ...;
//   hvd::allreduce(std::span<float>(grad));        // average across ranks, in place
//   hvd::shutdown();
//
// Every op takes a Tensor: a non-owning view of a buffer (data, dtype, shape, device, stream).
// Ops whose output size is known only during the call (allgather, reducescatter, alltoall) take
// an Allocator, or return an owning Buffer. Errors are thrown as hvd::RuntimeError with a
// status (hvd_status in hvd/hvd.h) and a message that says what to do.
//
// Named async ops (allreduce_async(name, ...) -> Handle) may be submitted in any order on each
// rank, from any thread: a coordinator agrees on one order, fuses small allreduces, and checks
// that every rank submitted the same thing. The synchronous calls are submit + wait, named
// automatically ("hvd.allreduce.N"), so every rank must make them in the same order.
// This header includes only the C++ standard library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "hvd/hvd.h"

namespace hvd {

enum class DataType : int {
  kUInt8 = HVD_UINT8,
  kInt8 = HVD_INT8,
  kInt32 = HVD_INT32,
  kInt64 = HVD_INT64,
  kFloat16 = HVD_FLOAT16,
  kBFloat16 = HVD_BFLOAT16,
  kFloat32 = HVD_FLOAT32,
  kFloat64 = HVD_FLOAT64,
  kInt16 = HVD_INT16,
};

enum class ReduceOp : int {
  kSum = HVD_SUM,
  kAverage = HVD_AVERAGE,  // sum / size; integer types truncate toward zero
  kMin = HVD_MIN,
  kMax = HVD_MAX,
  kProduct = HVD_PRODUCT,
};

// 16-bit floating-point storage types. Convert with to_float()/from_float().
struct float16 {
  std::uint16_t bits = 0;
};
struct bfloat16 {
  std::uint16_t bits = 0;
};
HVD_API float to_float(float16 value);
HVD_API float to_float(bfloat16 value);
HVD_API float16 float16_from(float value);    // round to nearest even
HVD_API bfloat16 bfloat16_from(float value);  // round to nearest even

HVD_API std::size_t element_size(DataType dtype);
HVD_API const char* dtype_name(DataType dtype);  // "float32", ...
HVD_API const char* op_name(ReduceOp op);        // "sum", ...

// Where a tensor's memory lives.
struct Device {
  enum class Kind : int { kCPU = 0, kCUDA = 1 };
  Kind kind = Kind::kCPU;
  int id = -1;  // CUDA device ordinal; -1 for the CPU
  static Device cpu() { return {}; }
  static Device cuda(int ordinal) { return {Kind::kCUDA, ordinal}; }
  bool operator==(const Device&) const = default;
};

// A non-owning view of a dense, row-major buffer. The caller keeps the memory alive (and, for
// CUDA tensors, ordered on `stream`) until the op that uses it has completed.
struct Tensor {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<std::int64_t> shape;  // empty: a scalar (one element)
  Device device{};
  void* stream = nullptr;  // cudaStream_t for CUDA tensors; nullptr: the default stream

  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
  std::size_t byte_size() const {
    return static_cast<std::size_t>(num_elements()) * element_size(dtype);
  }
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<std::uint8_t> : std::integral_constant<DataType, DataType::kUInt8> {};
template <>
struct dtype_of<std::int8_t> : std::integral_constant<DataType, DataType::kInt8> {};
template <>
struct dtype_of<std::int16_t> : std::integral_constant<DataType, DataType::kInt16> {};
template <>
struct dtype_of<std::int32_t> : std::integral_constant<DataType, DataType::kInt32> {};
template <>
struct dtype_of<std::int64_t> : std::integral_constant<DataType, DataType::kInt64> {};
template <>
struct dtype_of<float16> : std::integral_constant<DataType, DataType::kFloat16> {};
template <>
struct dtype_of<bfloat16> : std::integral_constant<DataType, DataType::kBFloat16> {};
template <>
struct dtype_of<float> : std::integral_constant<DataType, DataType::kFloat32> {};
template <>
struct dtype_of<double> : std::integral_constant<DataType, DataType::kFloat64> {};

// A 1-D CPU tensor over `count` elements at `data`.
template <class T>
Tensor tensor(T* data, std::size_t count) {
  using U = std::remove_const_t<T>;
  return Tensor{const_cast<U*>(data), dtype_of<U>::value, {static_cast<std::int64_t>(count)}};
}
template <class T>
Tensor tensor(std::span<T> data) {
  return tensor(data.data(), data.size());
}

// The error every call throws. status() is the same code the C API returns.
class HVD_API RuntimeError : public std::runtime_error {
 public:
  RuntimeError(hvd_status status, const std::string& message);
  hvd_status status() const noexcept { return status_; }

 private:
  hvd_status status_;
};

// An owning result for ops whose output size is known only during the call.
struct Buffer {
  DataType dtype = DataType::kFloat32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;

  Tensor view() { return Tensor{bytes.data(), dtype, shape}; }
  template <class T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
};

// Returns `bytes` bytes of storage for an output of `shape` (on the input's device).
using Allocator = std::function<void*(const std::vector<std::int64_t>& shape, std::size_t bytes)>;

// ---- Process sets ----
// A process set is a sorted list of global ranks that run collectives among themselves
// (Horovod's process sets): every op takes one, the global set (id 0, every rank) by default.
// Each set has its own negotiation, fusion, response cache and stall inspector, and its own
// connections: a Gloo context (native launch) or an MPI communicator (--mpi), plus its control
// plane. A rank outside a set that submits to it gets HVD_ERR_INVALID_ARGUMENT at once.
// Broadcast roots stay global ranks (Horovod's rule); ranks in an op's output (allgather's order,
// alltoall's splits, reducescatter's blocks) follow the set's order.
class HVD_API ProcessSet {
 public:
  ProcessSet() = default;  // the global set
  explicit ProcessSet(int id) : id_(id) {}
  int id() const { return id_; }
  // Throw RuntimeError (HVD_ERR_INVALID_ARGUMENT) for a set that does not exist (removed).
  std::vector<int> ranks() const;  // global ranks, sorted
  int size() const;
  bool included() const;  // this process is one of ranks()
  int rank() const;       // this process's rank in the set; throws when not included()
  bool operator==(const ProcessSet&) const = default;

 private:
  int id_ = 0;
};
inline ProcessSet global_process_set() { return ProcessSet(); }

struct InitOptions {
  // Static sets, made at init in this order (ids 1, 2, ...; a list met twice is made once).
  // Every rank passes the same lists.
  std::vector<std::vector<int>> process_sets;
  // add_process_set / remove_process_set allowed after init (or HOROVOD_DYNAMIC_PROCESS_SETS=1).
  bool dynamic_process_sets = false;
};

// ---- Lifecycle and topology ----
HVD_API void init();  // idempotent; throws RuntimeError on a bad environment or engine
// init() with process sets (the options count only when this call initialises).
HVD_API void init(const InitOptions& options);
// Collective over every rank of the job, in the same order with the same ranks everywhere (a
// difference is HVD_ERR_INVALID_ARGUMENT on every rank, naming what each passed); only in dynamic
// mode (HVD_ERR_INVALID_ARGUMENT otherwise). The ranks need not be sorted; a duplicate or
// out-of-range rank, an empty list, or the ranks of an existing set are errors.
HVD_API ProcessSet add_process_set(std::span<const int> ranks);
// Collective over every rank; ops submitted to the set afterwards fail. The global set cannot be
// removed.
HVD_API void remove_process_set(const ProcessSet& set);
// The same calls with a way out, for a caller that must stay responsive (a language binding's
// Ctrl-C): `interrupted` is called about every 100 ms while this rank waits for the others to
// make the same call, and when it returns true the call gives up. A process-set call cannot be
// taken back once made, and the ranks' sets would no longer agree, so giving up shuts libhvd
// down on this rank (as shutdown() does) and throws RuntimeError(HVD_ERR_NOT_INITIALIZED); the
// other ranks' process-set calls and ops then fail with an error that names this rank, instead
// of waiting for it. init() may be called again afterwards, on every rank.
using Interrupted = std::function<bool()>;
HVD_API ProcessSet add_process_set(std::span<const int> ranks, const Interrupted& interrupted);
HVD_API void remove_process_set(const ProcessSet& set, const Interrupted& interrupted);
HVD_API std::vector<ProcessSet> process_sets();  // every set, by id (the global one first)
HVD_API void shutdown();  // idempotent; nothing but init() may be called after it
HVD_API bool is_initialized();
HVD_API int rank();
HVD_API int size();
HVD_API int local_rank();
HVD_API int local_size();
HVD_API int cross_rank();
HVD_API int cross_size();
HVD_API std::string backend_name();  // "mpi" or "gloo"
// The CUDA device this rank should use: local_rank() modulo the visible devices (Horovod's
// rule; hvdrun --gpus-per-rank narrows what each rank sees). -1 when no GPU is usable here.
HVD_API int gpu_device();

// The timeline (hvd_start_timeline in hvd/hvd.h says the rules): rank 0 records a Chrome trace
// with Horovod's names into `file_path` until stop_timeline(), which returns once the file is
// valid JSON. Not collective; throws RuntimeError (HVD_ERR_INVALID_ARGUMENT) where rank 0 cannot
// write the file, HVD_ERR_NOT_INITIALIZED before init().
HVD_API void start_timeline(const std::string& file_path, bool mark_cycles = false);
HVD_API void stop_timeline();

// What libhvd's engine did on this rank since init(): for benchmarks and tests.
struct EngineStats {
  std::uint64_t cycles = 0;      // negotiation cycles (MPI, size 1); 0 on the TCP control plane
  std::uint64_t cache_hits = 0;  // submissions agreed as a response-cache slot (under MPI)
  std::uint64_t negotiated = 0;  // submissions negotiated in full (name, dtype, shape, ...)
  std::uint64_t doorbells = 0;   // times this rank asked the others to join a cycle
  // Cycles decided by their first round, a bitwise AND of the ranks' cache hits (under MPI; the
  // steady state of a training loop), with no allgather of requests.
  std::uint64_t decided_by_bits = 0;
  // Small allreduces run from every rank's input, sent with their negotiation and reduced by
  // every rank (cycles) or by rank 0 (the TCP engine), with no collective of their own
  // (HOROVOD_EAGER_BYTES).
  std::uint64_t eager = 0;
  // Responses that ran on this rank: collectives (one for a fused batch or a whole group of a
  // grouped call) and eager allreduces; failed ops not counted.
  std::uint64_t responses = 0;
};
// The global set's engine, or process set `set`'s (each set has its own).
HVD_API EngineStats engine_stats(const ProcessSet& set = {});

// ---- Collectives ----
struct AllreduceOptions {
  ReduceOp op = ReduceOp::kAverage;  // Horovod's default
  double prescale = 1.0;             // floating-point types only
  double postscale = 1.0;
};

// out = reduce over ranks of (prescale * in), times postscale. `out` may be `in` (in place);
// both must have the same dtype, element count and device.
HVD_API void allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options = {},
                       const ProcessSet& set = {});
inline void allreduce(const Tensor& inout, const AllreduceOptions& options = {},
                      const ProcessSet& set = {}) {
  allreduce(inout, inout, options, set);
}
template <class T>
void allreduce(std::span<T> data, ReduceOp op = ReduceOp::kAverage) {
  allreduce(tensor(data), AllreduceOptions{op});
}

// Root's data to every rank, in place. Every rank passes the same root, dtype and shape.
HVD_API void broadcast(const Tensor& inout, int root, const ProcessSet& set = {});
template <class T>
void broadcast(std::span<T> data, int root) {
  broadcast(tensor(data), root);
}

// Every rank's tensor concatenated along the first dimension, in rank order. The first
// dimension may differ between ranks; the others must match.
HVD_API void allgather(const Tensor& in, const Allocator& allocate, const ProcessSet& set = {});
HVD_API Buffer allgather(const Tensor& in, const ProcessSet& set = {});
template <class T>
std::vector<T> allgather(std::span<const T> data) {
  std::vector<T> out;
  allgather(tensor(data), [&out](const std::vector<std::int64_t>& shape, std::size_t) -> void* {
    out.resize(static_cast<std::size_t>(shape.at(0)));
    return out.data();
  });
  return out;
}

// The reduction (kSum or kAverage) of every rank's tensor (same shape everywhere), split along
// the first dimension into size() blocks, the first (dim0 % size) one row longer; rank r gets
// block r. As allreduce's options: the input is multiplied by `prescale` before the reduction (in
// a copy: `in` is never written) and the block by `postscale` after it; floating-point types
// only, and every rank passes the same factors.
HVD_API void reducescatter(const Tensor& in, const Allocator& allocate,
                           ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                           double postscale = 1.0, const ProcessSet& set = {});
HVD_API Buffer reducescatter(const Tensor& in, ReduceOp op = ReduceOp::kAverage,
                             double prescale = 1.0, double postscale = 1.0,
                             const ProcessSet& set = {});

// Rows [offset_i, offset_i + splits[i]) of `in` go to rank i (empty splits: dim0 / size each).
// Received blocks are concatenated in rank order; returns the rows received from each rank.
HVD_API std::vector<std::int64_t> alltoall(const Tensor& in, std::span<const std::int64_t> splits,
                                           const Allocator& allocate, const ProcessSet& set = {});
struct AlltoallResult {
  Buffer output;
  std::vector<std::int64_t> received_splits;
};
HVD_API AlltoallResult alltoall(const Tensor& in, std::span<const std::int64_t> splits = {},
                                const ProcessSet& set = {});

HVD_API void barrier(const ProcessSet& set = {});

// Horovod's join, for ranks with uneven data: this rank has no more to submit. Until every rank
// has joined, it takes part in the others' allreduces with zeros (Average still divides by the
// full size); any other collective submitted meanwhile fails on the ranks that submitted it
// (HVD_ERR_INVALID_ARGUMENT) and the job goes on. Returns, on every rank, the last rank to join.
// The global set only; HVD_ERR_INVALID_ARGUMENT when this rank already waits in join();
// HVD_ERR_UNSUPPORTED with the negotiation cycles turned off (HOROVOD_*_CYCLES=0).
HVD_API int join();

// ---- Named asynchronous ops ----
namespace detail {
struct OpState;
}

// The pending result of an async op. Copies share the op. The tensors it was given must stay
// alive until it finished.
class HVD_API Handle {
 public:
  Handle() = default;
  const std::string& name() const;
  bool poll() const;  // finished (successfully or not)?
  // Blocks until finished; rethrows the op's RuntimeError.
  void wait() const;
  // false if not finished within `timeout`; rethrows the op's RuntimeError if it failed.
  bool wait(std::chrono::milliseconds timeout) const;
  // The output of allgather_async / reducescatter_async / alltoall_async (after wait()).
  const Buffer& output() const;
  // The same output moved out of the op, for a caller that keeps it without a copy (a language
  // binding handing it to its own array type); output() is empty afterwards. After wait().
  Buffer take_output() const;
  // alltoall_async: the rows received from each rank (after wait()).
  const std::vector<std::int64_t>& received_splits() const;

 private:
  friend struct HandleAccess;
  std::shared_ptr<detail::OpState> state_;
};

// `name` identifies the op across ranks: every rank submits the same names (in any order), and
// a name cannot be submitted again until its op finished.
// Names are per process set: the same name may be in flight on two sets at once.
HVD_API Handle allreduce_async(const std::string& name, const Tensor& in, const Tensor& out,
                               const AllreduceOptions& options = {}, const ProcessSet& set = {});
inline Handle allreduce_async(const std::string& name, const Tensor& inout,
                              const AllreduceOptions& options = {}, const ProcessSet& set = {}) {
  return allreduce_async(name, inout, inout, options, set);
}
HVD_API Handle broadcast_async(const std::string& name, const Tensor& inout, int root,
                               const ProcessSet& set = {});
HVD_API Handle allgather_async(const std::string& name, const Tensor& in,
                               const ProcessSet& set = {});
HVD_API Handle reducescatter_async(const std::string& name, const Tensor& in,
                                   ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                                   double postscale = 1.0, const ProcessSet& set = {});
HVD_API Handle alltoall_async(const std::string& name, const Tensor& in,
                              std::span<const std::int64_t> splits = {},
                              const ProcessSet& set = {});

// ---- Grouped ops: several tensors as one unit (Horovod's grouped_allreduce, ...) ----
// The tensors of a group are negotiated and run as one unit: the coordinator waits until every
// tensor of the group is ready on every rank of the set, then schedules all of them in one
// response of their own, never split by HOROVOD_FUSION_THRESHOLD and never mixed with other
// tensors; every handle of the group finishes at the same time, with the same error when one
// fails. A grouped allreduce runs as fused collectives (per dtype, in batches of at most the
// fusion threshold: the fusion buffer stays that size); grouped allgathers and reducescatters
// run one after the other inside the response. Member i of a group of n under `name` is the
// named op "<name>_<i+1>of<n>"; with an empty name (the synchronous forms) the group is named
// automatically like a synchronous call. A mismatch between ranks (a tensor in a group on one
// rank and alone or in a group with other members on another, a different dtype or shape of a
// member) fails the whole group on every rank concerned (HVD_ERR_INVALID_ARGUMENT). All tensors
// of a group are on one device; names must not repeat within a group or be in flight already
// (then nothing of the group is submitted).
HVD_API std::vector<Handle> grouped_allreduce_async(const std::string& name,
                                                    std::span<const Tensor> in,
                                                    std::span<const Tensor> out,
                                                    const AllreduceOptions& options = {},
                                                    const ProcessSet& set = {});
inline std::vector<Handle> grouped_allreduce_async(const std::string& name,
                                                   std::span<const Tensor> inout,
                                                   const AllreduceOptions& options = {},
                                                   const ProcessSet& set = {}) {
  return grouped_allreduce_async(name, inout, inout, options, set);
}
HVD_API std::vector<Handle> grouped_allgather_async(const std::string& name,
                                                    std::span<const Tensor> in,
                                                    const ProcessSet& set = {});
HVD_API std::vector<Handle> grouped_reducescatter_async(
    const std::string& name, std::span<const Tensor> in, ReduceOp op = ReduceOp::kAverage,
    double prescale = 1.0, double postscale = 1.0, const ProcessSet& set = {});
// The synchronous forms (in place for allreduce; one Buffer per input for the others).
HVD_API void grouped_allreduce(std::span<const Tensor> inout, const AllreduceOptions& options = {},
                               const ProcessSet& set = {});
HVD_API std::vector<Buffer> grouped_allgather(std::span<const Tensor> in,
                                              const ProcessSet& set = {});
HVD_API std::vector<Buffer> grouped_reducescatter(std::span<const Tensor> in,
                                                  ReduceOp op = ReduceOp::kAverage,
                                                  double prescale = 1.0, double postscale = 1.0,
                                                  const ProcessSet& set = {});

}  // namespace hvd
