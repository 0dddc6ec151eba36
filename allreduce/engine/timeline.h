// The timeline: a Chrome trace (a JSON array of events, which Perfetto and chrome://tracing open)
// of every tensor's life on rank 0, in Horovod's format and names. It records from
// HOROVOD_TIMELINE=FILE at init, or between start(FILE) and stop() (hvd::start_timeline), into one
// file at a time. A file holds:
//   pid 0's metadata               process_name with start_time_since_epoch_in_micros (the
//                                  microsecond every "ts" counts from), process_sort_index
//   one row ("process") per tensor process_name (the tensor's name) and process_sort_index
//   NEGOTIATE_<OP>                 first rank's request reached the coordinator .. every rank's
//                                  had (NEGOTIATE_ALLREDUCE, ...), with a zero-length event named
//                                  after each rank ("0", "1", ...) as its request arrived
//   QUEUE                          decided .. its collective starts
//   <OP>                           the op itself (ALLREDUCE, BROADCAST, ...), its end carrying the
//                                  output's dtype and shape, and inside it:
//     MEMCPY_IN_FUSION_BUFFER      fused responses only
//     <ENGINE>_<OP>                the collective, e.g. GLOO_ALLREDUCE, MPI_BROADCAST; or
//                                  EAGER_REDUCE (an allreduce that rode on its negotiation)
//     MEMCPY_OUT_FUSION_BUFFER     fused responses only
//   CYCLE_START                    with mark_cycles: an instant mark (scope global) at each
//                                  negotiation cycle rank 0 runs
// A process set other than the global one records into the global set's file through a view of
// its Timeline (the constructor with a parent): its rows are named "<tensor> [process set N]"
// (a set's names are its own: the same name may run in two sets), its NEGOTIATE_<OP> phase and
// its op's end carry "process_set": N in their args, and its requests' marks are named after
// the global ranks. As Horovod's, the file is global rank 0's: a set without rank 0 records
// nothing.
// Events are queued and written by a writer thread, so the collectives never wait on the file.
// A file is valid JSON once stop() (or a start() with another file, or the destructor) returned.
//
// Threads: start() and stop() from any thread (one at a time, in call order); the events from the
// engine's threads. While nothing records, an event costs one atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "allreduce/engine/messages.h"

namespace hvd::runtime {

class Timeline {
 public:
  Timeline();  // records nothing until start()
  // Process set `set_id` (global ranks `ranks`): a view that records into `parent`'s file while
  // it records; start() and stop() belong to the parent.
  Timeline(std::shared_ptr<Timeline> parent, int set_id, std::vector<int> ranks);
  ~Timeline();  // stop()
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Records into `path` (created or truncated; never through a symbolic link). While recording
  // into `path` already (however spelled), only mark_cycles changes (Horovod's start with the
  // same file); while recording into another file, that one is closed, complete. A file that cannot
  // be written throws StatusError(`status`) naming `what` (e.g. `HOROVOD_TIMELINE="x.json"`), and
  // what was recording before goes on.
  void start(const std::string& path, bool mark_cycles, hvd_status status, const std::string& what);
  // Closes the file: valid JSON when this returns. Nothing to do when nothing records.
  void stop();
  bool recording() const { return root().recording_.load(std::memory_order_relaxed); }

  // Coordinator: rank `rank`'s request for q.name arrived.
  void negotiating(const Request& q, int rank);
  // Coordinator: these names were decided (fused together when several).
  void negotiated(const Response& r);
  // Coordinator: a negotiation cycle starts (a CYCLE_START mark with mark_cycles).
  void cycle_start();
  // Executing rank 0: a phase of `name` starts / ends ("QUEUE" ends when the op starts).
  void begin(const std::string& name, const std::string& phase);
  void end(const std::string& name);
  // Executing rank 0: the op's own phase ("ALLREDUCE") ends, with its output's dtype and shape.
  void end_op(const std::string& name, DataType dtype, const std::vector<std::int64_t>& shape);

 private:
  class File;
  Timeline& root() { return parent_ ? *parent_ : *this; }
  const Timeline& root() const { return parent_ ? *parent_ : *this; }
  // The row of tensor `name` ("<name> [process set N]" in a set's view), the args that name the
  // set (empty for the global set: `, "process_set": N`), and a rank's mark (a global rank).
  std::string row_name(const std::string& name) const;
  std::string set_args() const;
  int global_rank(int rank) const;
  void push(std::string event);      // caller holds mutex_
  int row(const std::string& name);  // caller holds mutex_
  long long now_us() const;

  const std::shared_ptr<Timeline> parent_;  // a process set's view: the global set's timeline
  const int set_id_ = 0;
  const std::vector<int> set_ranks_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  const long long start_epoch_us_;  // start_ in microseconds since the Unix epoch
  std::mutex control_;              // start() and stop(), one at a time
  std::mutex mutex_;                // what follows
  std::atomic<bool> recording_{false};
  std::unique_ptr<File> file_;
  bool mark_cycles_ = false;
  std::map<std::string, int> rows_;    // this file's rows
  std::set<std::string> negotiating_;  // names with an open NEGOTIATE phase
};

}  // namespace hvd::runtime
