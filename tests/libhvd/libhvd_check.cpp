// A rank program that checks libhvd's collectives against exact expected values. The same binary
// runs alone, under `hvdrun` (Gloo), under `hvdrun --mpi` / mpirun (MPI): tests/e2e/test_libhvd.cpp
// launches it at 1 to 4 ranks.
//
//   libhvd_check collectives   every op x dtype x count; prints "rank R: N checks passed"
//   libhvd_check die RANK      allreduces in a loop; rank RANK SIGKILLs itself after 3 rounds;
//                              the others print how long their error took, and the error
//   libhvd_check freeze RANK   the same with SIGSTOP: rank RANK freezes
//   libhvd_check info          prints the topology and backend
//   libhvd_check async         50 named allreduces of mixed dtypes and sizes, submitted in a
//                              different random order on every rank, then broadcasts, checked
//   libhvd_check threads       4 threads per rank each submit 40 named allreduces and wait on
//                              some while the others submit, checked after all joined
//   libhvd_check delayed       rank 0 submits A, then B 2 s later; rank 1 submits B then A
//   libhvd_check mismatch F    rank 1 submits a tensor that differs in field F (dtype, shape,
//                              op, root, prescale, postscale, kind; scatter_prescale and
//                              scatter_postscale: of a reducescatter): every rank's handle fails
//   libhvd_check stall S       rank 1 sleeps S seconds before submitting its tensor
//   libhvd_check cache         the response cache through hvd::engine_stats(): steady-state
//                              hits, a checksum of the results, a cached name with another
//                              shape, 10 names cycling (libhvd_check_cache.cpp)
//   libhvd_check timeline DIR  hvd::start_timeline/stop_timeline: files DIR/a.rank<R>.json (cycle
//                              marks) and DIR/b.rank<R>.json, written by rank 0 only; ops
//                              between them go nowhere (test_libhvd_engine.cpp reads the files)
//   libhvd_check noshutdown    one allreduce, then returns from main() without hvd::shutdown()
//   libhvd_check gpu           on a host without a usable GPU: a CUDA tensor is a clear
//                              HVD_ERR_UNSUPPORTED error (sync and async), gpu_device() is -1,
//                              and CPU collectives still work
//
// Every rank computes every other rank's input (they are deterministic), so expected values are
// computed locally in double precision. Exit status: 0 all passed, 1 a check failed, 2 usage,
// 3 a libhvd call threw where it should not have.
#include "libhvd_check.h"

using namespace libhvd_check;  // NOLINT: the program's own helpers

namespace {

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

// Reducescatter with prescale 0.5 and postscale 3 (as allreduce's factors): the input is left as
// it was, the block is 1.5 times the plain result; an integer tensor with a factor is refused.
void check_reducescatter_scaled() {
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const std::int64_t rows = 3 * g_size + 1, cols = 2;
      Data in(t, static_cast<std::size_t>(rows * cols));
      for (std::size_t i = 0; i < in.size(); ++i) in.set(i, input(ReduceOp::kSum, t, g_rank, i));
      const Data before = in;
      hvd::Buffer out = hvd::reducescatter(in.tensor({rows, cols}), op, 0.5, 3.0);
      std::int64_t first = 0;
      for (int r = 0; r < g_rank; ++r) first += rows / g_size + (r < rows % g_size ? 1 : 0);
      const std::int64_t mine = rows / g_size + (g_rank < rows % g_size ? 1 : 0);
      Data got(t, 0);
      got.bytes = out.bytes;
      const std::string what = "reducescatter " + name(op) + " prescale 0.5 postscale 3 " + name(t);
      expect(out.shape == std::vector<std::int64_t>{mine, cols}, what + " output shape");
      expect(in.bytes == before.bytes, what + ": the input is unchanged");
      expect_elements(
          got, static_cast<std::size_t>(mine * cols),
          [&](std::size_t i) {
            return expected_reduction(op, t, static_cast<std::size_t>(first * cols) + i, 0.5, 3.0);
          },
          what);
    }
  }
  Data ints(DataType::kInt32, 4);
  try {
    hvd::reducescatter(ints.tensor({4}), ReduceOp::kSum, 2.0);
    expect(false, "reducescatter of an int32 with prescale 2 was not refused");
  } catch (const hvd::RuntimeError& e) {
    expect(e.status() == HVD_ERR_INVALID_ARGUMENT &&
               std::string(e.what()).find("reducescatter: prescale/postscale 2 on a") !=
                   std::string::npos,
           std::string("reducescatter int32 prescale refusal: ") + e.what());
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
  check_reducescatter_scaled();
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
  if (g_size == 1 && hvd::backend_name() == "gloo") {
    // Alone, the ops run in cycles of one on the waiting thread (local_cycle_transport.h), not
    // through the TCP engine's background thread (which counts no cycles).
    expect(hvd::engine_stats().cycles > 0, "alone under Gloo: the engine ran cycles");
  }
  std::printf("rank %d: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
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
      rc = die(std::atoi(argv[2]), SIGKILL);
    } else if (mode == "freeze" && argc > 2) {
      rc = die(std::atoi(argv[2]), SIGSTOP);
    } else if (mode == "info") {
      rc = 0;
    } else if (mode == "async") {
      rc = async_ops();
    } else if (mode == "threads") {
      rc = threaded_ops();
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
    } else if (mode == "cache") {
      rc = cache_mode();
    } else if (mode == "timeline" && argc > 2) {
      rc = timeline(argv[2]);
    } else if (mode == "sets" && argc > 2) {
      rc = process_sets_mode(argv[2]);
    } else if (mode == "groups") {
      rc = groups_mode();
    } else {
      std::fprintf(stderr,
                   "usage: libhvd_check [collectives | die RANK | freeze RANK | info | async | "
                   "threads | delayed | "
                   "mismatch FIELD | stall SECONDS | cache | timeline DIR | sets "
                   "dynamic|static|stall | groups]\n");
    }
    hvd::shutdown();
    return rc;
  } catch (const hvd::RuntimeError& e) {
    std::printf("rank %d: libhvd error (%s): %s\n", g_rank, hvd_status_name(e.status()), e.what());
    std::fprintf(stderr, "libhvd error (%s): %s\n", hvd_status_name(e.status()), e.what());
    return 3;
  }
}
