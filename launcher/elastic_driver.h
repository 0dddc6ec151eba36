// Elastic training: the launcher's decisions (docs/design/elastic.md, section 4.3), as a pure
// state machine. The elastic job feeds it what happened (a worker exited, a worker joined a
// generation, time passed) and carries out what it returns (publish a world document, announce a
// generation to the workers, fail or finish the job). No I/O, no clock of its own: every call
// takes `now`, and next_deadline() says when it wants to be called again.
//
// This first version shrinks only: the job starts with every worker of generation 0; a worker
// that fails is left out (its slot cools down) and the others form the next generation, ranks
// compacted in slot order (elastic_world.h); below --min-np the job fails with that worker's
// exit code. Not yet: refilling cooled slots, hosts that join or leave (discovery), waiting for
// slots (--elastic-timeout).
//
// Nothing waits for every worker to check in: a failure while a generation forms supersedes it
// at once, and a generation that does not form within form_timeout fails the job, so a reset
// can never hang.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/error.h"
#include "contract/elastic.h"
#include "launcher/elastic_world.h"

namespace hvd::launcher {

struct ElasticPolicy {
  int min_np = 1;
  int max_np = 1;
  std::optional<int> reset_limit;                 // --reset-limit: generations after the first
  std::chrono::milliseconds form_timeout{30000};  // a generation's workers all joined by then
};

struct ElasticWorker {
  int id = 0;  // generation 0: its rank
  SlotKey slot;
};

namespace elastic_action {
struct Publish {  // store the document under <job>.elastic/world.G, then announce it
  contract::WorldDoc doc;
  std::vector<int> workers;  // to announce it to ("gen G" on their channels)
};
struct Fail {  // the job ends with this code and report
  int exit_code = 1;
  std::string message;
  // Without a worker: what kind of failure it is (the report's kind; exit_code is its code).
  ErrorKind kind = ErrorKind::kTimeout;
  // The worker whose exit ended the job (its code is exit_code), when one did; the message then
  // says why that exit ended the job ("elastic: 1 rank left, fewer than --min-np 2"), or is empty
  // when it needs no more words (a failure after the training finished, as in a static job).
  std::optional<int> worker;
};
struct Formed {  // every worker of the generation said "joined G"
  int generation = 0;
};
struct Finish {};  // every worker of the current generation exited 0
struct Log {
  std::string line;
};
}  // namespace elastic_action

using ElasticAction =
    std::variant<elastic_action::Publish, elastic_action::Fail, elastic_action::Formed,
                 elastic_action::Finish, elastic_action::Log>;

class ElasticDriver {
 public:
  using Clock = std::chrono::steady_clock;

  // Generation 0: `workers` (by rank) on `pool`, rank 0's MASTER_* at master_addr:master_port.
  ElasticDriver(ElasticPolicy policy, std::vector<PoolHost> pool,
                std::vector<ElasticWorker> workers, std::string master_addr, int master_port,
                Clock::time_point now);

  // A worker's process ended: `exit_code` as hvdrun reports it (128+signal for a signal), `why`
  // the sentence the report uses ("rank 2 on h was killed by signal 9").
  std::vector<ElasticAction> on_exit(int worker, int exit_code, const std::string& why,
                                     Clock::time_point now);
  // A host's agent was lost (its link closed, it fell silent): every live worker on it is gone
  // with it, and the host leaves the pool. `why` is the report's sentence; below --min-np the job
  // fails with kHostLost.
  std::vector<ElasticAction> on_host_lost(const std::string& host, const std::string& why,
                                          Clock::time_point now);
  // A worker said "joined G".
  std::vector<ElasticAction> on_joined(int worker, int generation, Clock::time_point now);
  // Time passed (at or after next_deadline()).
  std::vector<ElasticAction> on_tick(Clock::time_point now);
  std::optional<Clock::time_point> next_deadline() const;

  int generation() const { return generation_; }
  bool formed() const { return joined_.size() == members_.size(); }
  // The current generation's workers, by rank.
  const std::vector<int>& members() const { return members_; }
  bool done() const { return done_; }

 private:
  std::vector<ElasticAction> next_generation(const std::string& reason, std::optional<int> failed,
                                             int exit_code, ErrorKind kind, Clock::time_point now);
  const ElasticWorker& worker(int id) const;

  ElasticPolicy policy_;
  std::vector<PoolHost> pool_;
  std::vector<ElasticWorker> workers_;  // every worker ever started
  std::vector<int> alive_;              // workers whose process runs
  std::vector<SlotKey> cooling_;        // slots of failed workers (for good, in this version)
  std::string master_addr_;
  int master_port_;
  int generation_ = 0;
  std::vector<int> members_;  // the current generation's workers, by rank
  std::vector<int> joined_;   // members that said "joined" (generation 0: everyone)
  std::optional<Clock::time_point> form_deadline_;
  bool finishing_ = false;  // a member exited 0: no more generations
  bool done_ = false;
};

}  // namespace hvd::launcher
