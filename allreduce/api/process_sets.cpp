// Process sets (hvd/hvd.hpp): the table of sets in ProcessState, their add and remove (each a
// collective over every rank of the job, checked through one allgather on the global set), and
// the lookups every op on a set makes.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "allreduce/api/boundary.h"
#include "allreduce/api/process_state.h"
#include "allreduce/api/status_error.h"
#include "allreduce/runtime/runtime.h"
#include "hvd/hvd.hpp"

namespace hvd {
namespace {

using api_detail::ProcessState;
using runtime::Runtime;

ProcessState& process() { return api_detail::process_state(); }

std::string list_text(const std::vector<int>& ranks) {
  return fmt::format("[{}]", fmt::join(ranks, ", "));
}

RuntimeError invalid(const std::string& message) {
  return RuntimeError(HVD_ERR_INVALID_ARGUMENT, message);
}

RuntimeError no_such_set(const char* call, int id) {
  return invalid(fmt::format(
      "hvd::{}(): process set {} does not exist (it was removed, or never added): use a set that "
      "hvd::add_process_set or hvd::init returned",
      call, id));
}

// The global set's ranks and this process's rank in it; throws before init.
std::pair<int, int> world(const char* call) {
  ProcessState& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.runtime) {
    throw RuntimeError(
        HVD_ERR_NOT_INITIALIZED,
        fmt::format("hvd::{}() called {} hvd::init()", call,
                    p.shut_down ? "after hvd::shutdown(), before another" : "before"));
  }
  return {p.runtime->topology().rank, p.runtime->topology().size};
}

// What one rank brought to an add or remove: kind (0 add, 1 remove, 2 static add), then its
// list (the ranks, or the set's id).
struct Call {
  int kind = 0;
  std::vector<int> values;
  bool operator==(const Call&) const = default;
};

std::string call_text(const Call& c) {
  if (c.kind == 1)
    return fmt::format("remove_process_set({})", c.values.empty() ? -1 : c.values[0]);
  return fmt::format("{}({})", c.kind == 0 ? "add_process_set" : "init with process set",
                     list_text(c.values));
}

// How often agree() asks its caller whether to give up.
constexpr std::chrono::milliseconds kInterruptCheck{100};

// Every rank's call, by rank: one allgather on the global set, named after this process's count
// of such calls (the same on every rank that calls them in the same order). A rank whose call
// differs is named on every rank, with what each brought. When `interrupted` says so while the
// others have not all called yet, libhvd shuts down on this rank (hvd.hpp: the allgather cannot
// be withdrawn) and the call throws; a rank whose agreement fails because another shut down
// (interrupted, or gone) says so.
void agree(const char* call, const Call& mine, const Interrupted& interrupted) {
  ProcessState& p = process();
  long serial = 0;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    serial = p.set_calls++;
  }
  std::vector<std::int32_t> payload{mine.kind, static_cast<std::int32_t>(mine.values.size())};
  payload.insert(payload.end(), mine.values.begin(), mine.values.end());
  Handle h = allgather_async(fmt::format("hvd.process_set.{}", serial),
                             tensor(payload.data(), payload.size()));
  try {
    while (!h.wait(kInterruptCheck)) {
      if (!interrupted || !interrupted()) continue;
      // The engine fails the pending allgather and says goodbye to the others, who learn that
      // this rank shut down; nothing reads `payload` afterwards.
      shutdown();
      throw RuntimeError(
          HVD_ERR_NOT_INITIALIZED,
          fmt::format(
              "hvd::{}({}) was interrupted while it waited for the other ranks to call it: "
              "libhvd shut down on this rank, as the ranks' process sets could no longer "
              "agree (the others' process-set calls and ops fail, naming this rank); "
              "hvd::init() again on every rank to go on",
              call,
              mine.kind == 1 ? fmt::format("{}", mine.values.at(0)) : list_text(mine.values)));
    }
  } catch (const RuntimeError& e) {
    if (e.status() != HVD_ERR_PEER_LOST) throw;
    throw RuntimeError(
        e.status(),
        fmt::format("hvd::{}(): the ranks cannot agree on it any more: {} (a rank interrupted in "
                    "add_process_set or remove_process_set shuts libhvd down; hvd::init() again "
                    "on every rank to go on)",
                    call, e.what()));
  }
  const auto all = h.output().as<std::int32_t>();
  std::vector<Call> calls;
  for (std::size_t at = 0; at + 2 <= all.size();) {
    Call c{all[at], {}};
    const auto n = static_cast<std::size_t>(all[at + 1]);
    c.values.assign(all.begin() + static_cast<long>(at + 2),
                    all.begin() + static_cast<long>(std::min(all.size(), at + 2 + n)));
    calls.push_back(std::move(c));
    at += 2 + n;
  }
  std::vector<std::string> differ;
  for (std::size_t r = 0; r < calls.size(); ++r) {
    if (!(calls[r] == calls[0]))
      differ.push_back(fmt::format("rank {} {}", r, call_text(calls[r])));
  }
  if (!differ.empty()) {
    throw invalid(fmt::format(
        "hvd::{}(): the ranks disagree: rank 0 called {}, {}; every rank adds and removes the "
        "same process sets in the same order",
        call, call_text(calls[0]), fmt::join(differ, ", ")));
  }
}

// The checks every rank makes on the agreed list (so they fail on every rank alike).
void check_ranks(const char* call, const std::vector<int>& sorted, int size) {
  if (sorted.empty()) throw invalid(fmt::format("hvd::{}(): a process set needs a rank", call));
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= size) {
      throw invalid(fmt::format("hvd::{}({}): rank {} is out of range: the job has ranks 0 to {}",
                                call, list_text(sorted), sorted[i], size - 1));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw invalid(
          fmt::format("hvd::{}({}): rank {} is there twice", call, list_text(sorted), sorted[i]));
    }
  }
}

}  // namespace

namespace api_detail {

std::shared_ptr<Runtime> set_runtime(const char* call, int id) {
  ProcessState& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.runtime) {
    throw RuntimeError(HVD_ERR_NOT_INITIALIZED,
                       fmt::format("hvd::{}() called {} hvd::init()", call,
                                   p.shut_down ? "after hvd::shutdown()" : "before"));
  }
  const auto it = p.sets.find(id);
  if (it == p.sets.end()) throw no_such_set(call, id);
  if (!it->second.runtime) {
    throw invalid(fmt::format(
        "hvd::{}(): rank {} is not in process set {} (ranks {}): only its ranks submit to it", call,
        p.runtime->topology().rank, id, fmt::join(it->second.ranks, ", ")));
  }
  return it->second.runtime;
}

int set_root(const char* call, const Runtime& set, int root) {
  const std::vector<int>& ranks = set.set().ranks;
  const auto at = std::find(ranks.begin(), ranks.end(), root);
  if (at == ranks.end()) {
    throw invalid(fmt::format(
        "hvd::{}(): root rank {} is not in {}: the root is a global rank inside the set", call,
        root, set.set().label()));
  }
  return static_cast<int>(at - ranks.begin());
}

ProcessSet make_process_set(std::span<const int> given, bool at_init,
                            const Interrupted& interrupted) {
  const char* call = at_init ? "init" : "add_process_set";
  const auto [me, size] = world(call);
  ProcessState& p = process();
  if (!at_init) {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (!p.dynamic_sets) {
      throw invalid(
          "hvd::add_process_set() needs dynamic process sets: hvd::init with "
          "InitOptions::dynamic_process_sets (Python: hvd.init(process_sets=\"dynamic\")) or "
          "HOROVOD_DYNAMIC_PROCESS_SETS=1; or pass the sets to hvd::init");
    }
  }
  std::vector<int> ranks(given.begin(), given.end());
  std::sort(ranks.begin(), ranks.end());
  agree(call, Call{at_init ? 2 : 0, ranks}, interrupted);
  check_ranks(call, ranks, size);
  runtime::SetSpec spec;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (!p.runtime) throw RuntimeError(HVD_ERR_NOT_INITIALIZED, "hvd::shutdown() ran meanwhile");
    std::vector<int> all(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) all[static_cast<std::size_t>(r)] = r;
    int existing = ranks == all ? 0 : -1;
    for (const auto& [id, entry] : p.sets) {
      if (entry.ranks == ranks) existing = id;
    }
    if (existing >= 0) {
      if (at_init) return ProcessSet(existing);
      throw invalid(fmt::format("hvd::add_process_set({}): process set {} has these ranks already",
                                list_text(ranks), existing));
    }
    int id = 1;
    while (p.sets.count(id) != 0) ++id;
    spec = runtime::SetSpec{.id = id,
                            .ranks = ranks,
                            .parent = p.runtime->topology(),
                            .serial = p.set_serial++,
                            .timeline = p.runtime->timeline()};
    p.sets[id] = ProcessState::SetEntry{ranks, nullptr};
  }
  if (!std::binary_search(ranks.begin(), ranks.end(), me)) return ProcessSet(spec.id);
  // Collective among the set's ranks: its backend, control plane and engine.
  const auto config = [&] {
    std::lock_guard<std::mutex> lock(p.mutex);
    return *p.config;
  }();
  std::shared_ptr<Runtime> made;
  try {
    made = std::make_shared<Runtime>(config, spec);
  } catch (...) {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.sets.erase(spec.id);  // the others fail too (a timeout, a lost peer)
    throw;
  }
  std::lock_guard<std::mutex> lock(p.mutex);
  const auto it = p.sets.find(spec.id);
  if (it != p.sets.end()) it->second.runtime = std::move(made);
  return ProcessSet(spec.id);
}

}  // namespace api_detail

ProcessSet add_process_set(std::span<const int> ranks) { return add_process_set(ranks, {}); }

ProcessSet add_process_set(std::span<const int> ranks, const Interrupted& interrupted) {
  ProcessSet out;
  runtime::at_boundary([&] { out = api_detail::make_process_set(ranks, false, interrupted); });
  return out;
}

void remove_process_set(const ProcessSet& set) { remove_process_set(set, {}); }

void remove_process_set(const ProcessSet& set, const Interrupted& interrupted) {
  runtime::at_boundary([&] {
    const char* call = "remove_process_set";
    world(call);
    ProcessState& p = process();
    if (set.id() == 0) {
      throw invalid("hvd::remove_process_set(): the global process set (id 0) cannot be removed");
    }
    {
      std::lock_guard<std::mutex> lock(p.mutex);
      if (!p.dynamic_sets) {
        throw invalid(
            "hvd::remove_process_set() needs dynamic process sets (HOROVOD_DYNAMIC_PROCESS_SETS=1 "
            "or hvd::init's InitOptions::dynamic_process_sets)");
      }
    }
    agree(call, Call{1, {set.id()}}, interrupted);
    std::shared_ptr<Runtime> gone;
    {
      std::lock_guard<std::mutex> lock(p.mutex);
      const auto it = p.sets.find(set.id());
      if (it == p.sets.end()) throw no_such_set(call, set.id());
      gone = std::move(it->second.runtime);
      p.sets.erase(it);
    }
    // Destroyed here (its engine says goodbye among the set's ranks), or by an op still running.
  });
}

std::vector<ProcessSet> process_sets() {
  world("process_sets");
  std::vector<ProcessSet> out{ProcessSet()};
  ProcessState& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (const auto& [id, entry] : p.sets) out.emplace_back(id);
  return out;
}

std::vector<int> ProcessSet::ranks() const {
  const auto [me, size] = world("ProcessSet::ranks");
  if (id_ == 0) {
    std::vector<int> all(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) all[static_cast<std::size_t>(r)] = r;
    return all;
  }
  ProcessState& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  const auto it = p.sets.find(id_);
  if (it == p.sets.end()) throw no_such_set("ProcessSet::ranks", id_);
  return it->second.ranks;
}

int ProcessSet::size() const { return static_cast<int>(ranks().size()); }

bool ProcessSet::included() const {
  const std::vector<int> r = ranks();
  return std::binary_search(r.begin(), r.end(), world("ProcessSet::included").first);
}

int ProcessSet::rank() const {
  const std::vector<int> r = ranks();
  const int me = world("ProcessSet::rank").first;
  const auto at = std::lower_bound(r.begin(), r.end(), me);
  if (at == r.end() || *at != me) {
    throw invalid(fmt::format("hvd::ProcessSet::rank(): rank {} is not in process set {} ({})", me,
                              id_, list_text(r)));
  }
  return static_cast<int>(at - r.begin());
}

}  // namespace hvd
