// Elastic training: the launcher's decisions (docs/design/elastic.md, section 4.3), as a pure
// state machine. The elastic job feeds it what happened (a worker exited, a worker joined a
// generation, time passed) and carries out what it returns (publish a world document, announce a
// generation to the workers, fail or finish the job). No I/O, no clock of its own: every call
// takes `now`, and next_deadline() says when it wants to be called again.
//
// The job starts with every worker of generation 0. A worker that fails is left out and its slot
// is charged (HostHealth, keyed "host#slot"): after --host-failure-limit failures it is out, for
// good (Horovod's blacklist) or, with --blacklist-cooldown-range, until its cooldown ends. The
// others form the next generation, ranks compacted in slot order (elastic_world.h). A generation
// grows when it has formed and a free slot is usable (a cooldown ended, -np below --max-np):
// new workers are started for it, and the running ones join at their next commit. Below
// --min-np the job waits up to --elastic-timeout for a cooled slot to come back, or fails at
// once with that worker's exit code when none can. Not yet: hosts that join or leave
// (discovery).
//
// Nothing waits for every worker to check in: a failure while a generation forms supersedes it
// at once, and a generation that does not form within form_timeout fails the job, so a reset
// can never hang.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "common/error.h"
#include "contract/elastic.h"
#include "launcher/core/restarts.h"
#include "launcher/elastic/elastic_world.h"

namespace hvd::launcher {

struct ElasticPolicy {
  int min_np = 1;
  int max_np = 1;
  std::optional<int> reset_limit;  // --reset-limit: generations after the first
  // A generation's workers all joined by then: after a failure (--start-timeout), and after a
  // growth (--elastic-timeout: the running workers join only at their next commit).
  std::chrono::milliseconds form_timeout{30000};
  // Also: how long to wait for --min-np.
  std::chrono::milliseconds elastic_timeout = seconds_to_ms(kDefaultElasticTimeoutSeconds);
  int failure_limit = 1;  // --host-failure-limit, per slot
  // --blacklist-cooldown-range MIN MAX in seconds; nullopt: a charged-out slot is out for good.
  std::optional<std::pair<double, double>> cooldown;
  std::function<double()> jitter;  // in [0, 1), for the cooldown; null: none
  // --host-discovery-script: the hosts come and go (on_discovered); below --min-np the job then
  // always waits up to --elastic-timeout, since hosts may come back.
  bool discovery = false;
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
struct StartWorker {  // a new worker, for `generation`, at `placement` in it
  int worker = 0;
  SlotKey slot;
  int generation = 0;
  contract::RankPlacement placement;  // host_index: into the driver's pool
};
struct Start {  // start these workers (after the Publish of their generation)
  std::vector<StartWorker> workers;
};
struct StartAgent {  // a discovered host without an agent: start one (on_agent_ready follows)
  std::string host;
};
struct StopAgent {  // a host that left the discovery's list: its workers are out, end its agent
  std::string host;
};
struct Formed {  // every worker of the generation said "joined G"
  int generation = 0;
};
struct Finish {};  // every worker of the current generation exited 0
struct Log {
  std::string line;
  bool warning = true;  // false: an info line (a job that grows)
};
}  // namespace elastic_action

using ElasticAction =
    std::variant<elastic_action::Publish, elastic_action::Start, elastic_action::StartAgent,
                 elastic_action::StopAgent, elastic_action::Fail, elastic_action::Formed,
                 elastic_action::Finish, elastic_action::Log>;

// A slot that failed, for --json: "host#slot", when it is back (nullopt: out for good), how
// often it was charged out.
struct ElasticBlacklistEntry {
  std::string key;
  std::optional<std::chrono::steady_clock::time_point> back_at;
  int times = 0;
};

class ElasticDriver {
 public:
  using Clock = std::chrono::steady_clock;
  // A host not named by this many changed discovery lists in a row is forgotten: its failures
  // (its blacklist entry, its slots' cooldowns) go; if it comes back it is a new host.
  static constexpr int kForgetAfterLists = 10;

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
  // Generation 0 has started: grows it at once when free slots allow (-np below --max-np).
  // `spare`: listed hosts without a rank (and so without an agent) yet, after the pool's.
  std::vector<ElasticAction> start(const std::vector<PoolHost>& spare, Clock::time_point now);
  // A worker of a Start could not be started (`why`): counted as its failure.
  std::vector<ElasticAction> on_start_failed(int worker, const std::string& why,
                                             Clock::time_point now);
  // The discovery script listed `hosts` (in its output order; slots per host). Hosts without an
  // agent get one (StartAgent); hosts no longer listed leave at the next generation.
  std::vector<ElasticAction> on_discovered(const std::vector<PoolHost>& hosts,
                                           Clock::time_point now);
  // A discovered host's agent is up (its hello arrived): its slots are usable.
  std::vector<ElasticAction> on_agent_ready(const std::string& host, Clock::time_point now);
  // A discovered host's agent could not be started (`why`): the host is charged.
  std::vector<ElasticAction> on_join_failed(const std::string& host, const std::string& why,
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
  // Whether an agent is being started on `host` (a StartAgent not answered yet).
  bool joining(const std::string& host) const { return joining_.count(host) != 0; }
  // Every worker ever started, and the slots that failed.
  const std::vector<ElasticWorker>& workers() const { return workers_; }
  std::vector<ElasticBlacklistEntry> blacklist(Clock::time_point now) const;

 private:
  // Why the job is below --min-np, kept while it waits for slots.
  struct Shortfall {
    std::string reason;
    std::optional<int> failed;
    int exit_code = 1;
    ErrorKind kind = ErrorKind::kRemote;
    Clock::time_point deadline;
  };
  std::vector<ElasticAction> next_generation(const std::string& reason, std::optional<int> failed,
                                             int exit_code, ErrorKind kind, bool growth,
                                             Clock::time_point now);
  std::vector<ElasticAction> maybe_grow(Clock::time_point now);
  // Hosts listed by the discovery without an agent, not charged out, not joining: StartAgent.
  void request_agents(Clock::time_point now, std::vector<ElasticAction>& out);
  void refresh_pool();
  bool host_out(const std::string& host, Clock::time_point now) const;
  void charge_host(const std::string& host, const std::string& why, Clock::time_point now,
                   std::vector<ElasticAction>& out);
  std::vector<ElasticAction> worker_failed(int id, int exit_code, const std::string& why,
                                           Clock::time_point now);
  void charge(const char* kind, const std::string& key, const std::string& why,
              Clock::time_point now, std::vector<ElasticAction>& out);
  bool charged_out(const std::string& key, Clock::time_point now) const;
  bool cooling(const SlotKey& slot, Clock::time_point now) const;
  WorldChoice choose(Clock::time_point now) const;
  // The listed hosts: set_discovered() keeps discovered_ and its index in step.
  void set_discovered(std::vector<PoolHost> hosts);
  // Where `key` ("host" or "host#slot") is among the listed hosts' keys (the host's position, -1
  // for the host itself or the slot); nullopt when it is no key of a listed host.
  std::optional<std::pair<size_t, int>> pool_position(const std::string& key) const;
  // The keys of the listed hosts and their slots that were ever charged, in list order (a host,
  // then its slots). Its cost follows the failures, not the list: a discovery may list 4096
  // hosts of 1024 slots, and the loop asks for this on every turn (next_deadline()).
  std::vector<std::string> charged_pool_keys() const;
  const ElasticWorker& worker(int id) const;

  ElasticPolicy policy_;
  std::vector<PoolHost> pool_;        // the usable hosts: listed, with an agent; in order
  std::vector<PoolHost> discovered_;  // the hosts listed now (without discovery: the start's)
  // discovered_ by host: its position and slots.
  std::unordered_map<std::string, std::pair<size_t, int>> discovered_at_;
  std::set<std::string> with_agent_;     // hosts whose agent is up
  std::set<std::string> joining_;        // hosts whose agent is being started
  std::vector<std::string> retiring_;    // left the list, agent still up: stopped once G formed
  std::vector<ElasticWorker> workers_;   // every worker ever started
  std::vector<int> alive_;               // workers whose process runs
  HostHealth health_;                    // failed slots, by "host#slot" (with a cooldown)
  std::map<std::string, int> failures_;  // without a cooldown: failures per slot or host
  // Hosts that left the discovery's list, by how many lists since did not name them: at
  // kForgetAfterLists their failures are forgotten, so that hosts that come and go (a scheduler
  // handing out fresh names) are not kept for ever.
  std::map<std::string, int> unlisted_for_;
  void forget_unlisted(const std::vector<std::string>& removed);
  std::vector<int> dismissed_;          // never joined before the training finished: not counted
  std::vector<int> formed_once_;        // workers that were in a formed generation
  std::optional<Shortfall> shortfall_;  // below --min-np, waiting for slots
  int next_worker_ = 0;
  bool growth_blocked_ = false;
  bool removal_deferred_ = false;  // said once: leaving hosts stay while the job needs them //
                                   // --reset-limit reached by growth: the size stays
  std::chrono::milliseconds form_window_{};  // the forming deadline's length
  Clock::time_point last_now_{};             // the latest `now` seen (for next_deadline)
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
