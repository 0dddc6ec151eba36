#include "allreduce/backends/mpi_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "allreduce/kernels/kernels.h"

namespace hvd::runtime {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw StatusError(HVD_ERR_BACKEND, fmt::format("{} failed on the MPI backend: {}", what, text),
                    "a peer probably died; see the other ranks' output and mpirun's");
}

int to_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw StatusError(HVD_ERR_INVALID_ARGUMENT,
                      fmt::format("{} of {} bytes exceeds MPI's int count limit", what, n),
                      "split the tensor into pieces under 2 GiB");
  }
  return static_cast<int>(n);
}

MPI_Datatype mpi_type(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return MPI_UINT16_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

// MPI user functions: inout = in (op) inout.
template <DataType D, ReduceOp O>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_fn(D, O)(inout, in, inout, static_cast<std::size_t>(*len));
}

template <DataType D>
std::array<MPI_Op, 4> make_half_ops() {
  std::array<MPI_Op, 4> ops{};
  check(MPI_Op_create(half_op<D, ReduceOp::kSum>, 1, &ops[0]), "MPI_Op_create");
  check(MPI_Op_create(half_op<D, ReduceOp::kMin>, 1, &ops[1]), "MPI_Op_create");
  check(MPI_Op_create(half_op<D, ReduceOp::kMax>, 1, &ops[2]), "MPI_Op_create");
  check(MPI_Op_create(half_op<D, ReduceOp::kProduct>, 1, &ops[3]), "MPI_Op_create");
  return ops;
}

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
    default:
      return 0;
  }
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > INT_MAX) {
    throw StatusError(HVD_ERR_CONFIG, fmt::format("{}={:?} is not a number", name, v),
                      "this variable is mpirun's: start the program with mpirun or hvdrun --mpi");
  }
  return static_cast<int>(n);
}

}  // namespace

namespace {
// Whether Open MPI's byte transfer layers include shared memory, from its MCA parameters `btl`
// and `btl_base_exclude` (control variables of the MPI tool interface), read once per process:
// MPI_T_init_thread costs 220-250 ms here each time (Open MPI 4.1, even with MPI initialised;
// it was two of them in every init and every process set's creation, most of a set's ~0.6-1.6 s
// under MPI: bench/README.md), and the parameters do not change while the process runs.
bool btl_shared_memory() {
  static const bool shared = [] {
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
      return open_mpi_btl_shared_memory({}, {});
    }
    const auto read = [](const char* name) {
      std::string value;
      int index = 0, count = 0;
      MPI_T_cvar_handle handle;
      if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS &&
          MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
        std::vector<char> text(static_cast<std::size_t>(std::max(count, 0)) + 4096, '\0');
        if (MPI_T_cvar_read(handle, text.data()) == MPI_SUCCESS) value = text.data();
        MPI_T_cvar_handle_free(&handle);
      }
      return value;
    };
    const std::string btl = read("btl"), exclude = read("btl_base_exclude");
    MPI_T_finalize();
    return open_mpi_btl_shared_memory(btl, exclude);
  }();
  return shared;
}
}  // namespace

namespace {
// At exit, when libhvd initialised MPI: finalise it unless the program did, or a broken job
// abandoned it (mpirun ends the job then).
std::atomic<bool> g_abandoned{false};
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_abandoned.load()) MPI_Finalize();
}
}  // namespace

MpiBackend::MpiBackend() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    // MPI cannot be initialised twice in a process, and a program may call hvd::init() again
    // after hvd::shutdown() (Horovod's test suite does, every test): MPI stays initialised until
    // the process exits, and is finalised then.
    std::atexit(finalize_at_exit);
    if (provided < MPI_THREAD_MULTIPLE) {
      logger().warn(
          "MPI gave thread level {} instead of MPI_THREAD_MULTIPLE: do not call MPI from other "
          "threads while libhvd runs a collective",
          provided);
    }
  }
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  create_half_ops();
  compute_topology(true);
  shared_memory_ = topology_.local_size == topology_.size && btl_shared_memory();
}

MpiBackend::MpiBackend(const std::vector<int>& world_ranks, int tag) {
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  const int rc =
      MPI_Group_incl(world, static_cast<int>(world_ranks.size()), world_ranks.data(), &group);
  MPI_Group_free(&world);
  check(rc, "MPI_Group_incl");
  const int created = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm_);
  MPI_Group_free(&group);
  check(created, "MPI_Comm_create_group");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  create_half_ops();
  compute_topology(false);
  shared_memory_ = topology_.local_size == topology_.size && btl_shared_memory();
}

void MpiBackend::create_half_ops() {
  half_ops_[0] = make_half_ops<DataType::kFloat16>();
  half_ops_[1] = make_half_ops<DataType::kBFloat16>();
}

void MpiBackend::abandon() {
  abandoned_ = true;
  g_abandoned = true;
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // the program finalised MPI itself: nothing left to free
  if (abandoned_) {
    logger().debug("the job broke: leaving MPI without MPI_Finalize (mpirun ends the job)");
    return;
  }
  for (auto& ops : half_ops_) {
    for (MPI_Op& op : ops) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiBackend::compute_topology(bool world) {
  MPI_Comm_rank(comm_, &topology_.rank);
  MPI_Comm_size(comm_, &topology_.size);
  // mpirun knows the "hosts" by the names it was given, which the shared-memory split cannot
  // tell apart on loopback test hosts: prefer its local numbering (the world's only).
  topology_.local_rank = world ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1) : -1;
  topology_.local_size = world ? env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -1) : -1;
  if (topology_.local_rank < 0 || topology_.local_size < 1) {
    MPI_Comm local;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_rank(local, &topology_.local_rank);
    MPI_Comm_size(local, &topology_.local_size);
    MPI_Comm_free(&local);
  }
  MPI_Comm cross;
  check(MPI_Comm_split(comm_, topology_.local_rank, topology_.rank, &cross), "MPI_Comm_split");
  MPI_Comm_rank(cross, &topology_.cross_rank);
  MPI_Comm_size(cross, &topology_.cross_size);
  MPI_Comm_free(&cross);
}

MPI_Op MpiBackend::op_for(DataType dtype, ReduceOp op) const {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    return half_ops_[dtype == DataType::kBFloat16 ? 1 : 0][static_cast<std::size_t>(op_index(op))];
  }
  switch (op) {
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    default:
      return MPI_SUM;
  }
}

void MpiBackend::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op) {
  allreduce_into(MPI_IN_PLACE, data, count, dtype, op);
}

void MpiBackend::allreduce_into(const void* in, void* out, std::size_t count, DataType dtype,
                                ReduceOp op) {
  // MPI counts are ints: reduce in chunks of at most 1 Gi elements.
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  const std::size_t width = element_size(dtype);
  auto* o = static_cast<std::byte*>(out);
  for (std::size_t done = 0; done < count; done += kChunk) {
    const std::size_t n = std::min(kChunk, count - done);
    const void* send =
        in == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const std::byte*>(in) + done * width;
    check(MPI_Allreduce(send, o + done * width, static_cast<int>(n), mpi_type(dtype),
                        op_for(dtype, op), comm_),
          "allreduce (MPI_Allreduce)");
  }
}

void MpiBackend::broadcast(void* data, std::size_t bytes, int root) {
  check(MPI_Bcast(data, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_),
        "broadcast (MPI_Bcast)");
}

namespace {
std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size());
  long long at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    displs[i] = static_cast<int>(at);
    at += counts[i];
  }
  if (at > INT_MAX) {
    throw StatusError(HVD_ERR_INVALID_ARGUMENT,
                      fmt::format("a result of {} bytes exceeds MPI's int count limit", at),
                      "split the tensor into pieces under 2 GiB in total");
  }
  return displs;
}
std::vector<int> int_counts(const std::vector<std::size_t>& v, const char* what) {
  std::vector<int> out;
  for (std::size_t n : v) out.push_back(to_int(n, what));
  return out;
}
}  // namespace

void MpiBackend::allgatherv(const void* in, void* out,
                            const std::vector<std::size_t>& bytes_per_rank) {
  const auto counts = int_counts(bytes_per_rank, "allgather");
  const auto displs = displacements(counts);
  check(MPI_Allgatherv(in, counts[static_cast<std::size_t>(topology_.rank)], MPI_BYTE, out,
                       counts.data(), displs.data(), MPI_BYTE, comm_),
        "allgather (MPI_Allgatherv)");
}

void MpiBackend::alltoallv(const void* in, const std::vector<std::size_t>& send_bytes, void* out,
                           const std::vector<std::size_t>& recv_bytes) {
  const auto scounts = int_counts(send_bytes, "alltoall");
  const auto rcounts = int_counts(recv_bytes, "alltoall");
  const auto sdispls = displacements(scounts);
  const auto rdispls = displacements(rcounts);
  check(MPI_Alltoallv(in, scounts.data(), sdispls.data(), MPI_BYTE, out, rcounts.data(),
                      rdispls.data(), MPI_BYTE, comm_),
        "alltoall (MPI_Alltoallv)");
}

void MpiBackend::reducescatter(const void* in, void* out, const std::vector<std::size_t>& counts,
                               DataType dtype, ReduceOp op) {
  const auto c = int_counts(counts, "reducescatter");
  check(MPI_Reduce_scatter(in, out, c.data(), mpi_type(dtype), op_for(dtype, op), comm_),
        "reducescatter (MPI_Reduce_scatter)");
}

void MpiBackend::barrier() { check(MPI_Barrier(comm_), "barrier (MPI_Barrier)"); }

}  // namespace hvd::runtime
