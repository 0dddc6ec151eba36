// HOROVOD_TIMELINE: a Chrome trace (JSON array of events) of every tensor's life on rank 0,
// which Perfetto and chrome://tracing open. One row ("process") per tensor name:
//   NEGOTIATE                 first rank's request reached the coordinator .. every rank's had,
//                             with an instant mark per rank as its request arrived
//   QUEUE                     decided .. its collective starts
//   MEMCPY_IN_FUSION_BUFFER   fused responses only
//   <ENGINE>_<OP>             the collective itself, e.g. GLOO_ALLREDUCE, MPI_BROADCAST
//   MEMCPY_OUT_FUSION_BUFFER  fused responses only
// Events are queued and written by a writer thread, so the collectives never wait on the file.
// The file is valid JSON once the Timeline is destroyed (hvd::shutdown()).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "allreduce/engine/messages.h"

namespace hvd::runtime {

class Timeline {
 public:
  // Opens `path` for writing; throws StatusError(HVD_ERR_CONFIG) naming it when it cannot.
  explicit Timeline(const std::string& path);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Coordinator: rank `rank`'s request for q.name arrived.
  void negotiating(const Request& q, int rank);
  // Coordinator: these names were decided (fused together when several).
  void negotiated(const Response& r);
  // Executing rank 0: a phase of `name` starts / ends ("QUEUE" ends when the first starts).
  void begin(const std::string& name, const std::string& phase);
  void end(const std::string& name, const std::string& phase);

 private:
  void emit(std::string event);
  int row(const std::string& name);  // caller holds mutex_
  long long now_us() const;
  void write_loop();

  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::map<std::string, int> rows_;
  std::set<std::string> negotiating_;  // names with an open NEGOTIATE phase
  bool closing_ = false;
  bool first_line_ = true;
  std::thread writer_;
};

}  // namespace hvd::runtime
