// A C++ program outside the hvdrun tree, built against the installed libhvd package
// (find_package(hvd) -> hvd::hvd). Runs alone (size 1) or under hvdrun at any size.
//
// Prints "consumer: rank R of S backend B sum OK" when allreduce (sum), broadcast and allgather
// (the Buffer overload) give the expected values, then shows that hvd::rank() after
// hvd::shutdown() throws hvd::RuntimeError with HVD_ERR_NOT_INITIALIZED.
// Exit status: 0 all passed, 1 a wrong value or a missing error, 3 a libhvd call threw.
#include <hvd/hvd.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

namespace {

bool same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got == want) return true;
  std::fprintf(stderr, "consumer: %s gave [", what);
  for (float v : got) std::fprintf(stderr, " %g", static_cast<double>(v));
  std::fprintf(stderr, " ] but expected [");
  for (float v : want) std::fprintf(stderr, " %g", static_cast<double>(v));
  std::fprintf(stderr, " ]\n");
  return false;
}

int run() {
  hvd::init();
  const int rank = hvd::rank();
  const int size = hvd::size();
  const std::string backend = hvd::backend_name();
  const auto fsize = static_cast<float>(size);
  bool ok = true;

  // Every rank contributes {1, 2, 3}: the sum is {S, 2S, 3S} (the input itself when alone).
  std::vector<float> values{1, 2, 3};
  hvd::allreduce(std::span<float>(values), hvd::ReduceOp::kSum);
  ok &= same(values, {1 * fsize, 2 * fsize, 3 * fsize}, "allreduce(kSum)");

  // Root 0's {10, 20, 30} replaces every rank's own values.
  const auto frank = static_cast<float>(rank);
  std::vector<float> data{10 + frank, 20 + frank, 30 + frank};
  hvd::broadcast(std::span<float>(data), 0);
  ok &= same(data, {10, 20, 30}, "broadcast(root 0)");

  // Rank r contributes {r, r + 0.5}: the result is every rank's pair in rank order.
  const std::vector<float> mine{frank, frank + 0.5f};
  hvd::Buffer gathered = hvd::allgather(hvd::tensor(std::span<const float>(mine)));
  std::vector<float> want;
  for (int r = 0; r < size; ++r) {
    want.push_back(static_cast<float>(r));
    want.push_back(static_cast<float>(r) + 0.5f);
  }
  if (gathered.dtype != hvd::DataType::kFloat32 || gathered.shape.size() != 1 ||
      gathered.shape[0] != 2 * static_cast<std::int64_t>(size)) {
    std::fprintf(stderr,
                 "consumer: allgather(Buffer) returned dtype %s with %zu dimension(s), "
                 "expected float32 [%d]\n",
                 hvd::dtype_name(gathered.dtype), gathered.shape.size(), 2 * size);
    ok = false;
  } else {
    const auto got = gathered.as<float>();
    ok &= same(std::vector<float>(got.begin(), got.end()), want, "allgather(Buffer)");
  }

  if (!ok) {
    hvd::shutdown();
    return 1;
  }
  std::printf("consumer: rank %d of %d backend %s sum OK\n", rank, size, backend.c_str());
  std::fflush(stdout);
  hvd::shutdown();

  try {
    const int after = hvd::rank();
    std::fprintf(stderr,
                 "consumer: hvd::rank() after hvd::shutdown() returned %d, expected "
                 "hvd::RuntimeError\n",
                 after);
    return 1;
  } catch (const hvd::RuntimeError& e) {
    if (e.status() != HVD_ERR_NOT_INITIALIZED) {
      std::fprintf(stderr,
                   "consumer: hvd::rank() after hvd::shutdown() threw %s (%s), expected "
                   "HVD_ERR_NOT_INITIALIZED\n",
                   hvd_status_name(e.status()), e.what());
      return 1;
    }
    std::printf("consumer: hvd::rank() after shutdown threw hvd::RuntimeError %s: %s\n",
                hvd_status_name(e.status()), e.what());
  }
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const hvd::RuntimeError& e) {
    std::fprintf(stderr, "consumer: libhvd failed (%s): %s\n", hvd_status_name(e.status()),
                 e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: unexpected exception: %s\n", e.what());
    return 3;
  }
}
