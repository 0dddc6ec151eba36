// libhvd_check's `groups` mode: grouped collectives (hvd::grouped_allreduce and the others) run
// as one unit. Every group must come out as exactly one response of the engine
// (EngineStats::responses; the e2e test runs it with HOROVOD_FUSION_THRESHOLD=0, so that tensors
// submitted one by one are one response each and a group is over the threshold), with exact
// values; on a process set too (HOROVOD_DYNAMIC_PROCESS_SETS=1); a rank that is late holds the
// whole group back; and the mismatches (a group on some ranks, the same tensors alone on another;
// another count of tensors on one rank) fail every handle of the group on every rank while the
// job goes on.
#include <cstdlib>

#include "libhvd_check.h"

namespace libhvd_check {
namespace {

std::uint64_t responses(const hvd::ProcessSet& set = {}) {
  return hvd::engine_stats(set).responses;
}

// Waits for every handle; each must fail with HVD_ERR_INVALID_ARGUMENT and a message containing
// `words`.
void expect_all_fail(const std::string& what, const std::vector<hvd::Handle>& handles,
                     const std::string& words) {
  std::size_t failed = 0;
  for (const hvd::Handle& h : handles) {
    try {
      h.wait();
    } catch (const hvd::RuntimeError& e) {
      const std::string message = e.what();
      if (failed == 0) {
        std::printf("rank %d: %s: %s: %s\n", g_rank, what.c_str(), hvd_status_name(e.status()),
                    message.c_str());
      }
      expect(e.status() == HVD_ERR_INVALID_ARGUMENT && message.find(words) != std::string::npos,
             what + ": " + message);
      ++failed;
    }
  }
  expect(failed == handles.size(), what + ": every handle of the group failed");
}

double rank_sum(const std::vector<int>& ranks) {
  double sum = 0;
  for (int r : ranks) sum += r + 1;
  return sum;
}

std::vector<int> everyone() {
  std::vector<int> all;
  for (int r = 0; r < g_size; ++r) all.push_back(r);
  return all;
}

void grouped_allreduce_one_response() {
  // Three dtypes, 4 KiB + 40 B + 616 B: over a fusion threshold of 0, and no two fusable.
  std::vector<float> a(1000, static_cast<float>(g_rank + 1));
  std::vector<std::int32_t> b(10, g_rank + 1);
  std::vector<double> c(77, g_rank + 1);
  const std::vector<hvd::Tensor> group{hvd::tensor(a.data(), a.size()),
                                       hvd::tensor(b.data(), b.size()),
                                       hvd::tensor(c.data(), c.size())};
  const std::uint64_t before = responses();
  hvd::grouped_allreduce(group, {ReduceOp::kSum});
  const std::uint64_t ran = responses() - before;
  std::printf("rank %d: grouped allreduce of 3 tensors: %llu response(s)\n", g_rank,
              static_cast<unsigned long long>(ran));
  expect(ran == 1, "grouped allreduce of 3 tensors: one response");
  const double sum = rank_sum(everyone());
  expect(a[999] == sum && b[9] == sum && c[76] == sum, "grouped allreduce: every tensor's sum");

  // The control: the same three submitted one by one are three responses (no fusion).
  const std::uint64_t loose = responses();
  std::vector<hvd::Handle> hs{hvd::allreduce_async("loose.a", group[0]),
                              hvd::allreduce_async("loose.b", group[1]),
                              hvd::allreduce_async("loose.c", group[2])};
  for (const hvd::Handle& h : hs) h.wait();
  const std::uint64_t apart = responses() - loose;
  std::printf("rank %d: the same 3 tensors submitted one by one: %llu response(s)\n", g_rank,
              static_cast<unsigned long long>(apart));
  const char* threshold = std::getenv("HOROVOD_FUSION_THRESHOLD");
  if (threshold != nullptr && std::string(threshold) == "0") {
    expect(apart == 3, "three tensors submitted one by one, fusion off: three responses");
  }
}

void c_api_group() {
  std::vector<float> x(10, static_cast<float>(g_rank + 1)), y(3, 1.0f), x_out(10);
  const void* in[] = {x.data(), y.data()};
  void* out[] = {x_out.data(), y.data()};  // out of place, then in place
  const std::size_t counts[] = {x.size(), y.size()};
  const std::uint64_t before = responses();
  const hvd_status st = hvd_grouped_allreduce(in, out, counts, 2, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  expect(st == HVD_OK, std::string("hvd_grouped_allreduce: ") + hvd_last_error());
  expect(responses() - before == 1, "hvd_grouped_allreduce: one response");
  expect(
      x_out[9] == static_cast<float>(rank_sum(everyone())) && y[2] == g_size && x[0] == g_rank + 1,
      "hvd_grouped_allreduce: both sums, the input of the out-of-place one untouched");
}

void late_rank_holds_the_group() {
  // Rank 0 submits at once; the others 300 ms later: none of rank 0's group finishes before.
  std::vector<std::vector<float>> grads(4, std::vector<float>(256, static_cast<float>(g_rank)));
  std::vector<hvd::Tensor> ts;
  for (auto& g : grads) ts.push_back(hvd::tensor(g.data(), g.size()));
  if (g_rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::uint64_t before = responses();
  const std::vector<hvd::Handle> hs = hvd::grouped_allreduce_async("late", ts);
  if (g_rank == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    bool any = false;
    for (const hvd::Handle& h : hs) any |= h.poll();
    expect(!any, "group: nothing done while a rank has not submitted it");
  }
  for (const hvd::Handle& h : hs) h.wait();
  expect(hs.size() == 4 && hs[1].name() == "late_2of4", "group: member names <name>_<i>of<n>");
  const double mean = (g_size - 1) / 2.0;
  bool ok = true;
  for (auto& g : grads) ok = ok && std::fabs(g[255] - mean) < 1e-6;
  expect(ok, "async grouped allreduce (average) with a late rank");
  expect(responses() - before == 1, "async grouped allreduce with a late rank: one response");
}

void grouped_gathers_and_scatters() {
  const std::size_t n = static_cast<std::size_t>(g_size);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(g_rank + 1), g_rank);
  std::vector<float> pairs(2 * 3, static_cast<float>(g_rank) * 10);
  const std::vector<hvd::Tensor> in{
      hvd::Tensor{rows.data(), DataType::kInt64, {static_cast<std::int64_t>(rows.size())}},
      hvd::Tensor{pairs.data(), DataType::kFloat32, {2, 3}}};
  std::uint64_t before = responses();
  std::vector<hvd::Buffer> out = hvd::grouped_allgather(in);
  expect(responses() - before == 1, "grouped allgather of 2 tensors: one response");
  std::vector<std::int64_t> want;
  for (int r = 0; r < g_size; ++r) want.insert(want.end(), static_cast<std::size_t>(r + 1), r);
  const auto got = out.at(0).as<std::int64_t>();
  expect(std::vector<std::int64_t>(got.begin(), got.end()) == want &&
             out.at(1).shape == std::vector<std::int64_t>{2 * g_size, 3} &&
             out.at(1).as<float>()[6 * n - 1] == static_cast<float>(g_size - 1) * 10,
         "grouped allgather: both outputs in rank order");

  std::vector<float> x(2 * n, 1.0f), y(3 * n, static_cast<float>(g_rank));
  const std::vector<hvd::Tensor> scatter{
      hvd::tensor(x.data(), x.size()),
      hvd::Tensor{y.data(), DataType::kFloat32, {static_cast<std::int64_t>(n), 3}}};
  before = responses();
  std::vector<hvd::Buffer> blocks = hvd::grouped_reducescatter(scatter, ReduceOp::kSum);
  expect(responses() - before == 1, "grouped reducescatter of 2 tensors: one response");
  const double ranks_total = (g_size - 1) * g_size / 2.0;
  expect(blocks.at(0).as<float>().size() == 2 && blocks[0].as<float>()[1] == g_size &&
             blocks.at(1).shape == std::vector<std::int64_t>{1, 3} &&
             blocks[1].as<float>()[2] == ranks_total,
         "grouped reducescatter: each rank's block of both tensors");
}

void grouped_on_a_process_set() {
  // Ranks 0 and 1 of 3 or more; rank 0 alone of 2 (the global set has ranks 0 and 1).
  const std::vector<int> ranks = g_size >= 3 ? std::vector<int>{0, 1} : std::vector<int>{0};
  const hvd::ProcessSet set = hvd::add_process_set(ranks);
  const float sum = static_cast<float>(rank_sum(ranks));
  if (set.included()) {
    std::vector<float> a(100, static_cast<float>(g_rank + 1));
    std::vector<double> b(5, g_rank + 1);
    const std::vector<hvd::Tensor> group{hvd::tensor(a.data(), a.size()),
                                         hvd::tensor(b.data(), b.size())};
    const std::uint64_t before = responses(set);
    const std::uint64_t global_before = responses();
    hvd::grouped_allreduce(group, {ReduceOp::kSum}, set);
    expect(responses(set) - before == 1, "grouped allreduce on process set 1: one response");
    expect(responses() == global_before, "... on the set's engine, none on the global one");
    expect(a[99] == sum && b[4] == sum, "grouped allreduce on process set 1: its ranks summed");
    const std::vector<hvd::Handle> hs = hvd::grouped_allgather_async("set.gather", group, set);
    for (const hvd::Handle& h : hs) h.wait();
    expect(hs[0].output().shape ==
               std::vector<std::int64_t>{100 * static_cast<std::int64_t>(ranks.size())},
           "grouped allgather on process set 1");
  }
  hvd::remove_process_set(set);
}

void mismatches() {
  std::vector<float> a(8, 1.0f), b(8, 2.0f), c(8, 3.0f);
  const std::vector<hvd::Tensor> two{hvd::tensor(a.data(), a.size()),
                                     hvd::tensor(b.data(), b.size())};
  // Rank 1 submits the group's members alone, under the same names.
  std::vector<hvd::Handle> hs;
  if (g_rank == 1) {
    hs.push_back(hvd::allreduce_async("mixed_1of2", two[0]));
    hs.push_back(hvd::allreduce_async("mixed_2of2", two[1]));
  } else {
    hs = hvd::grouped_allreduce_async("mixed", two);
  }
  expect_all_fail("grouped on some ranks, alone on rank 1", hs, "group mismatch");

  // Rank 1 passes three tensors to the group the others pass two.
  const std::vector<hvd::Tensor> three{two[0], two[1], hvd::tensor(c.data(), c.size())};
  hs = hvd::grouped_allreduce_async("count", g_rank == 1 ? std::span<const hvd::Tensor>(three)
                                                         : std::span<const hvd::Tensor>(two));
  // (Which ranks the message names depends on which submission the coordinator read first.)
  expect_all_fail("another count of tensors on rank 1", hs, "grouped allreduce 'count': rank ");
}

}  // namespace

int groups_mode() {
  grouped_allreduce_one_response();
  c_api_group();
  late_rank_holds_the_group();
  grouped_gathers_and_scatters();
  if (g_size >= 2) {
    grouped_on_a_process_set();
    mismatches();
  }
  // The job goes on after the errors.
  std::vector<float> after(16, 1.0f);
  const std::vector<hvd::Tensor> one{hvd::tensor(after.data(), after.size())};
  hvd::grouped_allreduce(one, {ReduceOp::kSum});
  expect(after[15] == g_size, "a grouped allreduce after the errors");
  std::printf("rank %d: groups: %s: %ld checks, %ld failed\n", g_rank,
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace libhvd_check
