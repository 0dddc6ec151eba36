// A rank program that checks libhvd's collectives against exact expected values. The same binary
// runs alone, under `hvdrun` (Gloo), under `hvdrun --mpi` / mpirun (MPI): tests/e2e/test_libhvd.cpp
// launches it at 1 to 4 ranks.
//
//   libhvd_check collectives   every op x dtype x count; prints "rank R: N checks passed"
//   libhvd_check die RANK      allreduces in a loop; rank RANK SIGKILLs itself after 3 rounds;
//                              the others print how long their error took, and the error
//   libhvd_check info          prints the topology and backend
//   libhvd_check async         50 named allreduces of mixed dtypes and sizes, submitted in a
//                              different random order on every rank, then broadcasts, checked
//   libhvd_check delayed       rank 0 submits A, then B 2 s later; rank 1 submits B then A
//   libhvd_check mismatch F    rank 1 submits a tensor that differs in field F (dtype, shape,
//                              op, root, prescale, postscale, kind): every rank's handle fails
//   libhvd_check stall S       rank 1 sleeps S seconds before submitting its tensor
//   libhvd_check noshutdown    one allreduce, then returns from main() without hvd::shutdown()
//   libhvd_check gpu           on a host without a usable GPU: a CUDA tensor is a clear
//                              HVD_ERR_UNSUPPORTED error (sync and async), gpu_device() is -1,
//                              and CPU collectives still work
//
// Every rank computes every other rank's input (they are deterministic), so expected values are
// computed locally in double precision. Exit status: 0 all passed, 1 a check failed, 2 usage,
// 3 a libhvd call threw where it should not have.
#include <hvd/hvd.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using hvd::DataType;
using hvd::ReduceOp;

constexpr DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                                  DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kFloat32, DataType::kFloat64};
constexpr DataType kMainTypes[] = {DataType::kFloat32, DataType::kInt32, DataType::kFloat16,
                                   DataType::kBFloat16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};

int g_rank = 0, g_size = 1;
long g_checks = 0, g_failures = 0;

// Typed storage for any dtype, read and written as double.
struct Data {
  DataType dtype;
  std::vector<std::byte> bytes;
  Data(DataType t, std::size_t n) : dtype(t), bytes(n * hvd::element_size(t)) {}
  std::size_t size() const { return bytes.size() / hvd::element_size(dtype); }
  void* ptr() { return bytes.data(); }
  double get(std::size_t i) const { return get_from(bytes.data(), dtype, i); }
  void set(std::size_t i, double v) { set_in(bytes.data(), dtype, i, v); }

  static double get_from(const std::byte* p, DataType t, std::size_t i) {
    switch (t) {
      case DataType::kUInt8:
        return reinterpret_cast<const std::uint8_t*>(p)[i];
      case DataType::kInt8:
        return reinterpret_cast<const std::int8_t*>(p)[i];
      case DataType::kInt32:
        return reinterpret_cast<const std::int32_t*>(p)[i];
      case DataType::kInt64:
        return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
      case DataType::kFloat16:
        return hvd::to_float(reinterpret_cast<const hvd::float16*>(p)[i]);
      case DataType::kBFloat16:
        return hvd::to_float(reinterpret_cast<const hvd::bfloat16*>(p)[i]);
      case DataType::kFloat32:
        return reinterpret_cast<const float*>(p)[i];
      case DataType::kFloat64:
        return reinterpret_cast<const double*>(p)[i];
    }
    return 0;
  }
  static void set_in(std::byte* p, DataType t, std::size_t i, double v) {
    switch (t) {
      case DataType::kUInt8:
        reinterpret_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v);
        return;
      case DataType::kInt8:
        reinterpret_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
        return;
      case DataType::kInt32:
        reinterpret_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
        return;
      case DataType::kInt64:
        reinterpret_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
        return;
      case DataType::kFloat16:
        reinterpret_cast<hvd::float16*>(p)[i] = hvd::float16_from(static_cast<float>(v));
        return;
      case DataType::kBFloat16:
        reinterpret_cast<hvd::bfloat16*>(p)[i] = hvd::bfloat16_from(static_cast<float>(v));
        return;
      case DataType::kFloat32:
        reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
        return;
      case DataType::kFloat64:
        reinterpret_cast<double*>(p)[i] = v;
        return;
    }
  }
  hvd::Tensor tensor(std::vector<std::int64_t> shape = {}) {
    if (shape.empty()) shape = {static_cast<std::int64_t>(size())};
    return hvd::Tensor{ptr(), dtype, std::move(shape)};
  }
};

bool is_float(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

bool is_signed(DataType t) { return t != DataType::kUInt8; }

// Small integers, so that sums and products are exact in every type (int8 and bfloat16
// included) at up to 4 ranks: sums <= 24, products <= 16, min/max within [-4, 4].
double input(ReduceOp op, DataType t, int rank, std::size_t i) {
  switch (op) {
    case ReduceOp::kProduct:
      return 1.0 + static_cast<double>((i + static_cast<std::size_t>(rank)) % 2);
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((i * 5 + static_cast<std::size_t>(rank) * 3) % 9) -
             (is_signed(t) ? 4.0 : 0.0);
    default:
      return static_cast<double>((i + 3 * static_cast<std::size_t>(rank)) % 7);
  }
}

double expected_reduction(ReduceOp op, DataType t, std::size_t i, double prescale = 1.0,
                          double postscale = 1.0) {
  double acc = input(op, t, 0, i) * prescale;
  for (int r = 1; r < g_size; ++r) {
    const double v = input(op, t, r, i) * prescale;
    switch (op) {
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      default:
        acc += v;
    }
  }
  if (op == ReduceOp::kAverage) acc = is_float(t) ? acc / g_size : std::trunc(acc / g_size);
  return acc * postscale;
}

// Average and scaled results of 16-bit types carry rounding: a relative tolerance per type.
double tolerance(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return 2e-3;
    case DataType::kBFloat16:
      return 1.6e-2;
    case DataType::kFloat32:
      return 1e-6;
    case DataType::kFloat64:
      return 1e-12;
    default:
      return 0;
  }
}

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    if (g_failures <= 20) std::printf("rank %d: MISMATCH %s\n", g_rank, what.c_str());
  }
}

bool close_enough(double got, double want, DataType t) {
  return std::fabs(got - want) <= tolerance(t) * std::max(1.0, std::fabs(want));
}

// Checks every element; reports the first wrong one.
template <class Want>
void expect_elements(const Data& got, std::size_t n, Want want, const std::string& what) {
  if (got.size() != n) {
    expect(false,
           what + ": " + std::to_string(got.size()) + " elements, want " + std::to_string(n));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double w = want(i);
    if (!close_enough(got.get(i), w, got.dtype)) {
      expect(false, what + ": element " + std::to_string(i) + " is " + std::to_string(got.get(i)) +
                        ", want " + std::to_string(w));
      return;
    }
  }
  expect(true, what);
}

std::string name(DataType t) { return hvd::dtype_name(t); }
std::string name(ReduceOp op) { return hvd::op_name(op); }

void check_allreduce() {
  for (ReduceOp op : kAllOps) {
    for (DataType t : kAllTypes) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                            std::size_t{1} << 20}) {
        const std::string what = "allreduce " + name(op) + " " + name(t) + " x" + std::to_string(n);
        Data in(t, n);
        for (std::size_t i = 0; i < n; ++i) in.set(i, input(op, t, g_rank, i));
        if (n <= 1000) {  // out of place for the small counts, in place for all
          Data out(t, n);
          hvd::allreduce(in.tensor(), out.tensor(), {op});
          expect_elements(
              out, n, [&](std::size_t i) { return expected_reduction(op, t, i); },
              what + " (out of place)");
        }
        hvd::allreduce(in.tensor(), {op});
        expect_elements(
            in, n, [&](std::size_t i) { return expected_reduction(op, t, i); }, what);
      }
    }
  }
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
    Data in(t, 1000);
    for (std::size_t i = 0; i < 1000; ++i) in.set(i, input(ReduceOp::kSum, t, g_rank, i));
    hvd::allreduce(in.tensor(), {ReduceOp::kSum, 0.5, 3.0});
    expect_elements(
        in, 1000, [&](std::size_t i) { return expected_reduction(ReduceOp::kSum, t, i, 0.5, 3.0); },
        "allreduce sum prescale 0.5 postscale 3 " + name(t));
  }
}

void check_broadcast() {
  for (DataType t : kMainTypes) {
    for (int root = 0; root < g_size; ++root) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}}) {
        Data d(t, n);
        for (std::size_t i = 0; i < n; ++i) d.set(i, input(ReduceOp::kSum, t, g_rank, i));
        hvd::broadcast(d.tensor(), root);
        expect_elements(
            d, n, [&](std::size_t i) { return input(ReduceOp::kSum, t, root, i); },
            "broadcast " + name(t) + " from root " + std::to_string(root) + " x" +
                std::to_string(n));
      }
    }
  }
}

void check_allgather() {
  constexpr std::int64_t kCols = 3;
  for (DataType t : kMainTypes) {
    for (int extra : {0, 1}) {  // rank r sends r + extra rows: uneven, rank 0 maybe none
      const auto rows_of = [&](int r) { return static_cast<std::int64_t>(r + extra); };
      Data in(t, static_cast<std::size_t>(rows_of(g_rank) * kCols));
      for (std::size_t i = 0; i < in.size(); ++i)
        in.set(i, 10 * g_rank + static_cast<double>(i % 7));
      hvd::Buffer out = hvd::allgather(in.tensor({rows_of(g_rank), kCols}));
      std::vector<double> want;
      for (int r = 0; r < g_size; ++r) {
        for (std::int64_t i = 0; i < rows_of(r) * kCols; ++i)
          want.push_back(10 * r + static_cast<double>(i % 7));
      }
      Data got(t, 0);
      got.bytes = out.bytes;
      std::int64_t total_rows = 0;
      for (int r = 0; r < g_size; ++r) total_rows += rows_of(r);
      expect(out.shape == std::vector<std::int64_t>{total_rows, kCols},
             "allgather " + name(t) + " output shape");
      expect_elements(
          got, want.size(), [&](std::size_t i) { return want[i]; },
          "allgather " + name(t) + " uneven rows +" + std::to_string(extra));
    }
  }
}

void check_reducescatter() {
  for (DataType t : kMainTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (std::int64_t rows : {std::int64_t{0}, std::int64_t{1}, std::int64_t{3} * g_size + 1}) {
        constexpr std::int64_t kCols = 2;
        Data in(t, static_cast<std::size_t>(rows * kCols));
        for (std::size_t i = 0; i < in.size(); ++i) in.set(i, input(ReduceOp::kSum, t, g_rank, i));
        hvd::Buffer out = hvd::reducescatter(in.tensor({rows, kCols}), op);
        // Rank r's block: rows / size rows, one more for the first rows % size ranks.
        std::int64_t first = 0;
        for (int r = 0; r < g_rank; ++r) first += rows / g_size + (r < rows % g_size ? 1 : 0);
        const std::int64_t mine = rows / g_size + (g_rank < rows % g_size ? 1 : 0);
        Data got(t, 0);
        got.bytes = out.bytes;
        const std::string what =
            "reducescatter " + name(op) + " " + name(t) + " rows " + std::to_string(rows);
        expect(out.shape == std::vector<std::int64_t>{mine, kCols}, what + " output shape");
        expect_elements(
            got, static_cast<std::size_t>(mine * kCols),
            [&](std::size_t i) {
              return expected_reduction(op, t, static_cast<std::size_t>(first * kCols) + i);
            },
            what);
      }
    }
  }
}

void check_alltoall() {
  // Rank s sends (s + d) % 3 rows of 2 columns to rank d, valued 100 s + d.
  constexpr std::int64_t kCols = 2;
  for (DataType t : kMainTypes) {
    std::vector<std::int64_t> splits;
    std::int64_t rows = 0;
    for (int d = 0; d < g_size; ++d) {
      splits.push_back((g_rank + d) % 3);
      rows += splits.back();
    }
    Data in(t, static_cast<std::size_t>(rows * kCols));
    std::size_t at = 0;
    for (int d = 0; d < g_size; ++d) {
      for (std::int64_t i = 0; i < splits[static_cast<std::size_t>(d)] * kCols; ++i)
        in.set(at++, 10 * g_rank + d);
    }
    const auto result = hvd::alltoall(in.tensor({rows, kCols}), splits);
    std::vector<double> want;
    std::vector<std::int64_t> want_splits;
    for (int s = 0; s < g_size; ++s) {
      want_splits.push_back((s + g_rank) % 3);
      for (std::int64_t i = 0; i < want_splits.back() * kCols; ++i) want.push_back(10 * s + g_rank);
    }
    Data got(t, 0);
    got.bytes = result.output.bytes;
    expect(result.received_splits == want_splits, "alltoall " + name(t) + " received splits");
    expect_elements(
        got, want.size(), [&](std::size_t i) { return want[i]; }, "alltoall " + name(t));
  }
}

// Errors every rank detects the same way: the ranks stay in step afterwards.
void check_errors() {
  Data d(DataType::kFloat32, 4);
  try {
    hvd::broadcast(d.tensor(), g_size);
    expect(false, "broadcast from root = size did not throw");
  } catch (const hvd::RuntimeError& e) {
    expect(e.status() == HVD_ERR_INVALID_ARGUMENT &&
               std::string(e.what()).find("root rank") != std::string::npos,
           std::string("broadcast invalid root error: ") + e.what());
  }
  if (g_size > 1) {
    // Rank 0 gathers rows of 3 columns, the others rows of 2: every rank must refuse.
    Data in(DataType::kFloat32, 6);
    const std::int64_t cols = g_rank == 0 ? 3 : 2;
    try {
      hvd::allgather(in.tensor({6 / cols, cols}));
      expect(false, "allgather with mismatched shapes did not throw");
    } catch (const hvd::RuntimeError& e) {
      expect(e.status() == HVD_ERR_INVALID_ARGUMENT &&
                 std::string(e.what()).find("shape") != std::string::npos,
             std::string("allgather mismatch error: ") + e.what());
    }
    // Reducescatter with a different row count on the last rank.
    Data rs(DataType::kInt32, static_cast<std::size_t>(g_rank == g_size - 1 ? 5 : 4));
    try {
      hvd::reducescatter(rs.tensor(), ReduceOp::kSum);
      expect(false, "reducescatter with mismatched counts did not throw");
    } catch (const hvd::RuntimeError& e) {
      expect(e.status() == HVD_ERR_INVALID_ARGUMENT,
             std::string("reducescatter mismatch: ") + e.what());
    }
  }
  hvd::barrier();  // still in step
  expect(true, "barrier after errors");
}

int collectives() {
  check_allreduce();
  check_broadcast();
  check_allgather();
  check_reducescatter();
  check_alltoall();
  check_errors();
  std::printf("rank %d: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

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
  std::vector<float> v(8, 1.0f);
  hvd::allreduce(std::span<float>(v), ReduceOp::kSum);
  expect(v[0] == static_cast<float>(g_size), "CPU allreduce after the GPU refusal");
  std::printf("rank %d: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int die(int victim) {
  std::vector<float> data(1 << 18, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0;; ++round) {
    if (round == 3 && g_rank == victim) {
      std::printf("rank %d: killing myself with SIGKILL\n", g_rank);
      std::fflush(stdout);
      ::raise(SIGKILL);
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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
    hvd::init();
    g_rank = hvd::rank();
    g_size = hvd::size();
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::printf("rank %d of %d: local %d of %d, cross %d of %d, backend %s\n", g_rank, g_size,
                hvd::local_rank(), hvd::local_size(), hvd::cross_rank(), hvd::cross_size(),
                hvd::backend_name().c_str());
    int rc = 2;
    if (mode == "collectives") {
      rc = collectives();
    } else if (mode == "die" && argc > 2) {
      rc = die(std::atoi(argv[2]));
    } else if (mode == "info") {
      rc = 0;
    } else if (mode == "async") {
      rc = async_ops();
    } else if (mode == "delayed") {
      rc = delayed();
    } else if (mode == "mismatch" && argc > 2) {
      rc = mismatch(argv[2]);
    } else if (mode == "noshutdown") {
      // Leave main() without hvd::shutdown(): libhvd must tear down cleanly at exit.
      std::vector<float> v(1000, 1.0f);
      hvd::allreduce(std::span<float>(v), ReduceOp::kSum);
      std::printf("rank %d: returning without hvd::shutdown(), sum %g\n", g_rank,
                  static_cast<double>(v[0]));
      return 0;
    } else if (mode == "gpu") {
      rc = gpu_without_device();
    } else if (mode == "stall" && argc > 2) {
      rc = stall(std::atoi(argv[2]));
    } else {
      std::fprintf(stderr,
                   "usage: libhvd_check [collectives | die RANK | info | async | delayed | "
                   "mismatch FIELD | stall SECONDS]\n");
    }
    hvd::shutdown();
    return rc;
  } catch (const hvd::RuntimeError& e) {
    std::printf("rank %d: libhvd error (%s): %s\n", g_rank, hvd_status_name(e.status()), e.what());
    std::fprintf(stderr, "libhvd error (%s): %s\n", hvd_status_name(e.status()), e.what());
    return 3;
  }
}
