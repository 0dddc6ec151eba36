// libhvd's elastic API (Horovod's hvd.elastic): a training loop that survives the loss of peers.
//
// The program registers the state a step needs (parameters, optimizer buffers, counters) with a
// State, commits it every few steps, and runs its loop through hvd::elastic::run(). When a peer
// is lost (a collective fails with HVD_ERR_PEER_LOST) or the launcher announces a new generation
// of the job's world, run() rolls the state back to the last commit, shuts the engine down,
// rebuilds it for the next generation (new rank and size, read from hvdrun's rendezvous; a new
// Gloo context: a failed one cannot be reused), copies the state from the rank that has it
// (State::sync) and calls the loop again.
//
//     hvd::init();
//     hvd::elastic::BufferState state;
//     state.add("weights", weights.data(), weights.size() * sizeof(float));
//     state.add("step", &step, sizeof step);
//     hvd::elastic::run(state, [&] {
//       for (; step < steps; ++step) { train_one_step(); state.commit(); }
//     });
//
// Outside an elastic launch (no HVD_ELASTIC_FD: a plain hvdrun, mpirun, or alone) run() calls the
// loop once and lets every error through, which is today's behaviour. Thread safety: call run(),
// commit() and check_host_updates() from one thread; other threads' hvd calls fail with
// HVD_ERR_PEER_LOST while a reset runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "hvd/hvd.hpp"

namespace hvd::elastic {

// Thrown by commit()/check_host_updates() on every rank at once when the launcher announced a
// new generation (hosts added or removed): run() then resets without restoring (nothing was lost
// since the commit that just ran).
class HVD_API HostsUpdatedInterrupt : public std::exception {
 public:
  const char* what() const noexcept override;
};

class HVD_API State {
 public:
  virtual ~State();
  // save(), then check_host_updates().
  void commit();
  // A collective (every rank must call it at the same point): throws HostsUpdatedInterrupt on
  // every rank when any of them has been told of a newer generation.
  void check_host_updates();

  virtual void save() = 0;     // keep an in-memory copy of the state
  virtual void restore() = 0;  // go back to that copy
  virtual void sync() = 0;     // take the state of the sync root (world().sync_root)
};

// A State over the caller's buffers: host memory that stays alive and in place while the State
// is used. save() and restore() copy; sync() broadcasts each buffer from the sync root, in the
// order they were added (the same on every rank), then saves.
class HVD_API BufferState : public State {
 public:
  void add(const std::string& name, void* data, std::size_t bytes);
  void save() override;
  void restore() override;
  void sync() override;

 private:
  struct Entry {
    std::string name;
    void* data;
    std::size_t bytes;
    std::vector<std::byte> saved;
  };
  std::vector<Entry> entries_;
};

struct WorldInfo {
  int generation = 0;  // 0 at start, one more per reset
  int worker = 0;      // this process's id in the job: it never changes (its rank may)
  int sync_root = 0;   // the rank whose state sync() copies
  int resets = 0;      // resets this process went through
  // Where this generation's rank 0 is, for a program that builds its own process group per
  // generation (torch.distributed): its host's address, and MASTER_PORT (generation 0's port
  // number; hvdrun checked it free on generation 0's host only). MASTER_ADDR and MASTER_PORT in
  // the environment stay generation 0's.
  std::string master_addr;
  int master_port = 0;
};

// True in a process hvdrun started for an elastic job (after hvd::init()).
HVD_API bool enabled();
HVD_API WorldInfo world();

// Runs `fn` until it returns, resetting (restore, next generation, sync) after each lost peer or
// host update. Throws what `fn` throws otherwise, and RuntimeError when a reset cannot be done
// (no new generation announced in time: HVD_ERR_TIMEOUT; this worker is not in the new
// generation: HVD_ERR_CONFIG).
HVD_API void run(State& state, const std::function<void()>& fn);

}  // namespace hvd::elastic
