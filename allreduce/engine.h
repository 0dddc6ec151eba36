// The engine: named ops submitted from any thread, negotiated through the coordinator (rank 0)
// and run by one background thread per runtime, in the order the coordinator decided.
//
// The background thread's loop is `while (run_once())`: it sleeps in poll() on the Wakeup's
// eventfd and timerfd and the control-plane sockets, so an idle rank uses no CPU. The first
// submission of a batch arms the timer for the cycle time (HOROVOD_CYCLE_TIME) without waking the
// thread; the batch goes to the coordinator when the timer fires, or at once when someone waits
// on a handle: on ranks other than 0 the waiting thread sends it itself, on rank 0 the background
// thread wakes once to hand it to the Controller (fusion, validation, stall checks), which sends
// every rank the same responses. Every thread hand-off costs a wake-up (tens of microseconds on a
// VM), so each step has as few as the design allows: see bench/README.md.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allreduce/control_plane.h"
#include "allreduce/controller.h"
#include "allreduce/op_state.h"

namespace hvd::runtime {

class Runtime;
class Timeline;

struct EngineOptions {
  int rank = 0;
  int size = 1;
  ControllerOptions controller;
  std::chrono::microseconds cycle_time{100};
  Timeline* timeline = nullptr;  // rank 0 with HOROVOD_TIMELINE set; outlives the engine
};

class Engine {
 public:
  // Starts the background thread. `runtime` runs the collectives and outlives the engine.
  Engine(Runtime& runtime, ControlPlane control, EngineOptions options);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues `op` (request filled in). `now`: the caller will wait for it at once (a synchronous
  // call), so the batch goes out without the cycle time. Throws StatusError if its name is
  // already in flight on this rank or the engine has failed or shut down.
  void submit(const std::shared_ptr<detail::OpState>& op, bool now);

  // Someone waits on a handle: the batch goes out now. On ranks other than 0 the calling thread
  // sends it itself (one thread hand-off less per step); rank 0 wakes the background thread.
  void flush();

  // Tells the coordinator this rank is done, fails what is still pending, joins the thread.
  void shutdown();

  const std::shared_ptr<Wakeup>& wakeup() const { return wakeup_; }

 private:
  bool run_once();
  void send_batch(Clock::time_point now, bool shutdown);
  RequestList take_queue();
  bool send_to_coordinator(bool shutdown);  // ranks other than 0; false: the coordinator is gone
  bool read_network(const std::vector<int>& readable, Clock::time_point now);
  void coordinate(Clock::time_point now);
  void execute(const ResponseList& list);
  void run_response(const Response& response);
  void fail_everything(const std::string& why);
  std::vector<std::shared_ptr<detail::OpState>> take_pending(const std::vector<std::string>& names);

  Runtime& runtime_;
  ControlPlane control_;
  EngineOptions options_;
  std::shared_ptr<Wakeup> wakeup_ = std::make_shared<Wakeup>();

  // Shared with submitting and waiting threads.
  std::mutex mutex_;
  std::deque<std::shared_ptr<detail::OpState>> queue_;
  std::unordered_set<std::string> in_flight_;
  std::unordered_map<std::string, std::shared_ptr<detail::OpState>> pending_;  // sent, not done
  std::string failed_;  // once set, submissions fail with it
  bool stopping_ = false;
  bool batch_armed_ = false;  // the batching delay of the queued submissions is running

  std::mutex send_mutex_;  // ranks other than 0: the connection to the coordinator

  // The background thread's own.
  std::optional<Controller> controller_;  // rank 0 only
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace hvd::runtime
