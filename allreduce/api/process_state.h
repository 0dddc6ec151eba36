// The one global libhvd has, because Horovod's API is hvd::init() with no object: the current
// runtime (shared, so that an op in flight on another thread keeps it alive through shutdown()),
// the configuration it was built from, and an elastic job's generation (api.cpp, elastic.cpp).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "allreduce/runtime/config.h"
#include "allreduce/runtime/runtime.h"
#include "contract/elastic.h"

namespace hvd::api_detail {

struct ProcessState {
  std::mutex mutex;
  std::shared_ptr<runtime::Runtime> runtime;
  bool shut_down = false;
  // Runtimes init() started in this process. Round N > 0 (init() after shutdown()) meets the
  // other ranks under its own Gloo scope, "<scope>.rN": every rank counts the same rounds, so they
  // agree on it without a message, and no key of an earlier round is read again.
  int init_rounds = 0;
  std::optional<runtime::RuntimeConfig> config;  // what init() read; an elastic reset's base

  // Elastic jobs: the generation the runtime belongs to, the newest one the agent announced on
  // the channel (HVD_ELASTIC_FD), and what is left of a partial line from it.
  int generation = 0;
  int announced = 0;
  int sync_root = 0;
  std::string master_addr;  // the generation's rank 0 host (the world document's "master")
  int master_port = 0;
  int resets = 0;
  std::string channel_partial;
  bool channel_closed = false;

  // Process sets (process_sets.cpp) other than the global one, by id: their ranks, and their
  // runtime where this process is one of them.
  struct SetEntry {
    std::vector<int> ranks;
    std::shared_ptr<runtime::Runtime> runtime;
  };
  std::map<int, SetEntry> sets;
  bool dynamic_sets = false;  // add/remove after init
  int set_serial = 0;         // sets made by this runtime (SetSpec::serial)
  long set_calls = 0;         // add and remove calls: their negotiation's names
};

ProcessState& process_state();

// Elastic jobs (elastic.cpp): a worker started for a later generation (a refilled or free slot)
// reads that generation's world document at init (its sync root) before its runtime exists,
// and says "joined G" on its channel once the runtime is built.
contract::WorldDoc elastic_first_world(const runtime::RuntimeConfig& config, int generation);
void elastic_joined(const runtime::RuntimeConfig& config, int generation);

// Process sets (process_sets.cpp). The runtime of set `id` for a call of this process (throws
// RuntimeError: not initialised, no such set, this rank not in it).
std::shared_ptr<runtime::Runtime> set_runtime(const char* call, int id);
// A broadcast's global root rank as a rank of `set`'s runtime (throws when not in the set).
int set_root(const char* call, const runtime::Runtime& set, int root);
// add_process_set's work; `at_init`: a static set (no dynamic mode needed, an existing set's
// ranks give that set). Collective over every rank.
ProcessSet make_process_set(std::span<const int> ranks, bool at_init,
                            const Interrupted& interrupted = {});

}  // namespace hvd::api_detail
