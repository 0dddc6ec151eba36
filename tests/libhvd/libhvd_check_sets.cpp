// libhvd_check's process-set modes (hvd::ProcessSet): `sets dynamic`
// (HOROVOD_DYNAMIC_PROCESS_SETS=1: sets added and removed at run time, every collective on them
// checked against exact values, and the bad inputs the issue lists, each an error on the ranks
// concerned while the job goes on), `sets static` (sets given to hvd::init, no dynamic mode) and
// `sets stall` (a set's stall names the set and its missing rank); and `sets join` (hvd::join with
// uneven steps: the joined ranks' zeros, the last rank to join on every rank, and an allgather
// while a rank has joined).
#include "libhvd_check.h"

namespace libhvd_check {
namespace {

std::vector<int> members(int parity) {
  std::vector<int> out;
  for (int r = parity; r < g_size; r += 2) out.push_back(r);
  return out;
}

// `body` must throw RuntimeError with `status` and a message containing `words`.
template <class Body>
void expect_error(const std::string& what, hvd_status status, const std::string& words,
                  Body&& body) {
  try {
    body();
    expect(false, what + ": no error");
  } catch (const hvd::RuntimeError& e) {
    const std::string message = e.what();
    std::printf("rank %d: %s: %s: %s\n", g_rank, what.c_str(), hvd_status_name(e.status()),
                message.c_str());
    expect(e.status() == status && message.find(words) != std::string::npos,
           what + ": " + hvd_status_name(e.status()) + " " + message);
  }
}

// Every collective on `set`, whose ranks this rank is one of, against exact values. `everyone`:
// every rank of the job calls this at once (on its own set), so a global op may run alongside.
void check_collectives(const hvd::ProcessSet& set, const std::string& tag, bool everyone = false) {
  const std::vector<int> ranks = set.ranks();
  const int n = set.size();
  const int me = set.rank();
  double sum = 0;
  for (int r : ranks) sum += r + 1;
  std::vector<float> v(1000, static_cast<float>(g_rank + 1));
  hvd::allreduce(hvd::tensor(v.data(), v.size()), {ReduceOp::kSum}, set);
  expect(v[0] == sum && v[999] == sum, tag + " allreduce sum");
  std::vector<double> avg(10, g_rank + 1);
  hvd::allreduce(hvd::tensor(avg.data(), avg.size()), {ReduceOp::kAverage}, set);
  expect(std::fabs(avg[3] - sum / n) < 1e-12, tag + " allreduce average divides by the set's size");

  const int root = ranks.back();
  std::vector<std::int32_t> b(7, g_rank == root ? 42 : -1);
  hvd::broadcast(hvd::tensor(b.data(), b.size()), root, set);
  expect(b[6] == 42, tag + " broadcast from global rank " + std::to_string(root));

  std::vector<std::int64_t> mine(static_cast<std::size_t>(g_rank + 1), g_rank);
  const std::vector<std::int64_t> gathered = [&] {
    hvd::Buffer out = hvd::allgather(hvd::tensor(mine.data(), mine.size()), set);
    auto s = out.as<std::int64_t>();
    return std::vector<std::int64_t>(s.begin(), s.end());
  }();
  std::vector<std::int64_t> want;
  for (int r : ranks) want.insert(want.end(), static_cast<std::size_t>(r + 1), r);
  expect(gathered == want, tag + " allgather in the set's order");

  std::vector<float> rs(static_cast<std::size_t>(2 * n), 1.0f);
  hvd::Buffer block =
      hvd::reducescatter(hvd::tensor(rs.data(), rs.size()), ReduceOp::kSum, 1.0, 1.0, set);
  expect(block.as<float>().size() == 2 && block.as<float>()[1] == static_cast<float>(n),
         tag + " reducescatter: a block of 2 per rank");

  std::vector<std::int32_t> a2a(static_cast<std::size_t>(n), g_rank);
  hvd::AlltoallResult res = hvd::alltoall(hvd::tensor(a2a.data(), a2a.size()), {}, set);
  bool ok = res.received_splits.size() == static_cast<std::size_t>(n);
  for (int i = 0; ok && i < n; ++i) ok = res.output.as<std::int32_t>()[i] == ranks[i];
  expect(ok, tag + " alltoall: one row from each rank of the set");

  // Named async ops: the same name on the set and the global set at once, and a batch that fuses.
  std::vector<std::vector<float>> grads(8, std::vector<float>(64, 1.0f));
  std::vector<hvd::Handle> hs;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    hs.push_back(hvd::allreduce_async("grad." + std::to_string(i),
                                      hvd::tensor(grads[i].data(), grads[i].size()),
                                      {ReduceOp::kSum}, set));
  }
  std::vector<float> global(64, 1.0f);
  hvd::Handle g;
  const bool both = everyone && set.id() != 0;
  if (both) {
    g = hvd::allreduce_async("grad.0", hvd::tensor(global.data(), global.size()), {ReduceOp::kSum});
  }
  for (auto& h : hs) h.wait();
  if (both) g.wait();
  expect(
      grads[7][63] == static_cast<float>(n) && (!both || global[0] == static_cast<float>(g_size)),
      tag + " async: one name on two sets at once");
  hvd::barrier(set);
  std::printf("rank %d: %s: rank %d of %d in the set\n", g_rank, tag.c_str(), me, n);
}

int dynamic_sets() {
  const hvd::ProcessSet even = hvd::add_process_set(members(0));
  const hvd::ProcessSet odd = g_size > 1 ? hvd::add_process_set(members(1)) : hvd::ProcessSet(-1);
  expect(even.id() == 1 && (g_size == 1 || odd.id() == 2), "ids 1 and 2");
  expect(even.ranks() == members(0), "the even set's ranks");
  expect(hvd::process_sets().size() == (g_size > 1 ? 3u : 2u), "process_sets() lists them all");
  const hvd::ProcessSet& mine = g_rank % 2 == 0 ? even : odd;
  const hvd::ProcessSet& other = g_rank % 2 == 0 ? odd : even;
  expect(mine.included() && mine.rank() == g_rank / 2, "rank() inside the set");
  check_collectives(mine, "own set", true);
  check_collectives(hvd::global_process_set(), "global set");
  if (g_size > 1) {
    std::vector<float> v(4, 1.0f);
    expect(!other.included(), "included() is false outside");
    expect_error("rank() outside", HVD_ERR_INVALID_ARGUMENT, "not in process set",
                 [&] { (void)other.rank(); });
    expect_error("allreduce outside the set", HVD_ERR_INVALID_ARGUMENT, "is not in process set",
                 [&] { hvd::allreduce(hvd::tensor(v.data(), v.size()), {}, other); });
    expect_error("broadcast root outside the set", HVD_ERR_INVALID_ARGUMENT, "root rank",
                 [&] { hvd::broadcast(hvd::tensor(v.data(), v.size()), other.ranks()[0], mine); });
    // Every rank in the same add, with different lists: an error everywhere, no hang.
    std::vector<int> differ{0};
    if (g_rank != 0) differ.push_back(1);
    expect_error("different lists", HVD_ERR_INVALID_ARGUMENT, "the ranks disagree",
                 [&] { hvd::add_process_set(differ); });
  }
  expect_error("duplicate rank", HVD_ERR_INVALID_ARGUMENT, "twice", [] {
    hvd::add_process_set(std::vector<int>{0, 0});
  });
  expect_error("out of range", HVD_ERR_INVALID_ARGUMENT, "out of range", [] {
    hvd::add_process_set(std::vector<int>{0, g_size});
  });
  expect_error("existing ranks", HVD_ERR_INVALID_ARGUMENT, "has these ranks already",
               [] { hvd::add_process_set(members(0)); });
  expect_error("remove the global set", HVD_ERR_INVALID_ARGUMENT, "cannot be removed",
               [] { hvd::remove_process_set(hvd::global_process_set()); });
  hvd::remove_process_set(even);
  std::vector<float> v(4, 1.0f);
  expect_error("op on a removed set", HVD_ERR_INVALID_ARGUMENT, "does not exist",
               [&] { hvd::allreduce(hvd::tensor(v.data(), v.size()), {}, even); });
  expect_error("remove twice", HVD_ERR_INVALID_ARGUMENT, "does not exist",
               [&] { hvd::remove_process_set(even); });
  // The smallest free id comes back; a set of every rank but the last, then the job goes on.
  std::vector<int> head = members(0);
  if (g_size > 2) head = {0, 1};
  const hvd::ProcessSet again = hvd::add_process_set(head);
  expect(again.id() == 1, "a removed id is reused");
  if (again.included()) check_collectives(again, "re-added set");
  hvd::barrier();
  return 0;
}

int static_sets() {
  hvd::shutdown();
  hvd::InitOptions options;
  options.process_sets = {members(0), {0}};
  if (g_size > 1) options.process_sets.push_back(members(1));
  hvd::init(options);
  const auto sets = hvd::process_sets();
  expect(sets.size() == options.process_sets.size() + 1, "every static set made");
  expect(hvd::ProcessSet(2).ranks() == std::vector<int>{0}, "the set of rank 0 alone");
  check_collectives(g_rank % 2 == 0 ? hvd::ProcessSet(1) : hvd::ProcessSet(3), "static set");
  if (g_rank == 0) check_collectives(hvd::ProcessSet(2), "set of one");
  expect_error("add without dynamic mode", HVD_ERR_INVALID_ARGUMENT, "dynamic process sets",
               [] { hvd::add_process_set(std::vector<int>{0}); });
  expect_error("remove without dynamic mode", HVD_ERR_INVALID_ARGUMENT, "dynamic process sets",
               [] { hvd::remove_process_set(hvd::ProcessSet(1)); });
  hvd::barrier();
  return 0;
}

// The set {0, last}: its last rank submits 'late' after `seconds`; rank 0 warns meanwhile.
int stalled_set(int seconds) {
  const hvd::ProcessSet set = hvd::add_process_set(std::vector<int>{0, g_size - 1});
  if (set.included()) {
    std::vector<float> v(16, 1.0f);
    if (g_rank == g_size - 1) std::this_thread::sleep_for(std::chrono::seconds(seconds));
    hvd::allreduce_async("late", hvd::tensor(v.data(), v.size()), {ReduceOp::kSum}, set).wait();
    expect(v[0] == 2.0f, "'late' completed in the set");
  }
  hvd::barrier();
  return 0;
}

// Rank r runs 2 + r steps of two named allreduces (sum and average; cached after the first step
// unless HOROVOD_CACHE_CAPACITY=0), then joins: at step k the ranks still in are those with more
// than k steps, the joined ones add zeros, and the average divides by the full size.
int uneven_join() {
  const int steps = 2 + g_rank;
  for (int k = 0; k < steps; ++k) {
    double in = 0;
    for (int r = 0; r < g_size; ++r) in += (2 + r > k) ? r + 1 : 0;
    std::vector<float> sum(33, static_cast<float>(g_rank + 1)),
        avg(17, static_cast<float>(g_rank + 1));
    hvd::Handle a =
        hvd::allreduce_async("join.sum", hvd::tensor(sum.data(), sum.size()), {ReduceOp::kSum});
    hvd::Handle b =
        hvd::allreduce_async("join.avg", hvd::tensor(avg.data(), avg.size()), {ReduceOp::kAverage});
    a.wait();
    b.wait();
    expect(sum[32] == static_cast<float>(in), "step " + std::to_string(k) + ": sum with zeros");
    expect(std::fabs(avg[0] - in / g_size) < 1e-5,
           "step " + std::to_string(k) + ": average over the full size");
  }
  const int last = hvd::join();
  std::vector<std::int32_t> mine{last};
  const hvd::Buffer all = hvd::allgather(hvd::tensor(mine.data(), mine.size()));
  bool same = true;
  for (std::int32_t v : all.as<std::int32_t>()) same = same && v == g_size - 1;
  expect(same, "join returned the last rank to join (" + std::to_string(g_size - 1) +
                   ") on every rank, got " + std::to_string(last));
  std::printf("rank %d: joined after %d steps, last to join: %d\n", g_rank, steps, last);

  // Rank 0 joins at once; the others' allgather and broadcast fail, then they join too.
  if (g_rank == 0) {
    const int again = hvd::join();
    expect(again != 0 || g_size == 1, "rank 0 joined first, so it is not the last");
  } else {
    std::vector<float> v(4, 1.0f);
    expect_error("allgather while rank 0 has joined", HVD_ERR_INVALID_ARGUMENT,
                 "rank(s) 0 called hvd::join()", [&] { hvd::allgather(hvd::tensor(v.data(), 4)); });
    expect_error("broadcast while rank 0 has joined", HVD_ERR_INVALID_ARGUMENT, "hvd::join()",
                 [&] { hvd::broadcast(hvd::tensor(v.data(), 4), 1); });
    hvd::join();
  }
  hvd::barrier();  // the job goes on
  return 0;
}

}  // namespace

int process_sets_mode(const std::string& kind) {
  if (kind == "dynamic") dynamic_sets();
  if (kind == "static") static_sets();
  if (kind == "stall") stalled_set(3);
  if (kind == "join") uneven_join();
  std::printf("rank %d: sets %s: %s: %ld checks, %ld failed\n", g_rank, kind.c_str(),
              g_failures == 0 ? "all checks passed" : "FAILED", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace libhvd_check
