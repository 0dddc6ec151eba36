// The native launch's side of the supervisor's loop (supervisor.h): one agent per host, each
// behind an AgentTransport. Internal to hvd_launcher; native_launcher.h is the interface. Split
// over files: native_job.cpp (agents, frames, the rank events, stopping, the start-up deadline),
// native_job_net.cpp (the hellos, the network check before any rank starts, the rendezvous
// server, the job specs, the start-up's live line), native_job_failures.cpp (a lost agent, a
// start-up past its deadline), native_job_elastic.cpp and native_job_join.cpp (elastic jobs).
//
// The phases, each started when every agent finished the one before: hello -> probe listeners
// up (kListening) -> probes run (kProbeResult) -> rank 0's host frees MASTER_PORT (kProbeClosed)
// -> specs sent -> ranks run (kStarted, kOutput, kExited) -> kDone.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/job_spec.h"
#include "agent/protocol.h"
#include "launcher/core/net_check.h"
#include "launcher/core/stall_verdict.h"
#include "launcher/core/stragglers.h"
#include "launcher/core/supervisor.h"
#include "launcher/elastic/elastic_driver.h"
#include "launcher/native/agent_conn.h"
#include "launcher/native/agent_launch.h"
#include "launcher/native/agent_starter.h"
#include "launcher/native/job_specs.h"
#include "launcher/native/native_launcher.h"
#include "launcher/native/rendezvous_server.h"
#include "launcher/plan/discovery.h"

namespace hvd::launcher::native {

using agent::FrameType;

// A value of a rank's environment, as its spec gave it ("" when it has none).
std::string spec_value(const agent::RankSpec& rank, std::string_view name);

class NativeJob final : public Job {
 public:
  // `launch` started `agents` and starts a joining host's (elastic jobs).
  NativeJob(const Plan& plan, const LaunchOptions& options, bool check_net_only,
            Supervisor& supervisor, AgentLaunch& launch, std::vector<AgentConn> agents)
      : plan_(plan),
        options_(options),
        check_net_only_(check_net_only),
        sup_(supervisor),
        launch_(launch),
        agents_(std::move(agents)),
        hosts_(plan.hosts) {}
  ~NativeJob() override;

  // Job
  void add_pollfds(std::vector<pollfd>& fds, bool read_output) override;
  void on_ready(std::span<const pollfd> fds) override;
  void on_child_exited() override;
  void stop(StopMode mode) override;
  bool forwards_signals() const override { return true; }
  void forward_signal(int sig) override;
  bool done() const override;
  std::optional<Clock::time_point> deadline() const override;
  void on_deadline() override;
  std::vector<std::string> abandon() override;

  // On a terminal: the start-up's progress on the status line (status_line.h), from `since` (when
  // the launch began) until every rank started: agents up, network check, ranks started.
  void show_startup_progress(Clock::time_point since);

  // After the run: what the launch learned about each host, and the rendezvous server's stats.
  std::vector<HostFacts> host_facts() const;
  nlohmann::ordered_json details() const;

 private:
  void read_frames(AgentConn& agent);
  std::optional<std::string> out_of_order(const AgentConn& agent, FrameType type) const;
  void protocol_error(const AgentConn& agent, const std::string& what,
                      const std::string& hint = "");
  void on_frame(AgentConn& agent, const agent::Frame& frame);
  void on_agent_error(AgentConn& agent, const std::string& payload);
  void on_agent_log(AgentConn& agent);
  void agent_lost(AgentConn& agent);
  // The keepalive: pings agents that run a job, gives up on one silent past --keepalive.
  bool keepalive_on(const AgentConn& agent) const;
  bool pinging(const AgentConn& agent) const;
  void keepalive(Clock::time_point now);
  void agent_silent(AgentConn& agent);
  bool all_started() const;
  void on_start_timeout();
  void send(AgentConn& agent, FrameType type, std::string_view payload = {});
  const std::string& host_of(const AgentConn& agent) const;
  // native_job_net.cpp
  void on_hello(AgentConn& agent, const std::string& payload);
  bool choose_addresses();
  void begin_network_check();
  void on_listening(AgentConn& agent, const std::string& payload);
  void on_probe_results(AgentConn& agent, const std::string& payload);
  void send_specs();
  void start_rendezvous();
  void report_shared_machines() const;
  void update_startup_line(Clock::time_point now);
  // native_job_elastic.cpp: an elastic job's generations (docs/elastic.md)
  void start_elastic();
  bool elastic_running() const { return elastic_ && !sup_.stopping(); }
  void on_elastic_exit(const agent::RankExited& exited);
  void on_rank_event(const std::string& payload);
  void on_start_failed(const AgentConn& agent, const std::string& payload);
  void start_workers(const std::vector<elastic_action::StartWorker>& workers);
  void apply(std::vector<ElasticAction> actions);
  nlohmann::ordered_json elastic_json() const;
  void update_status(Clock::time_point now);
  bool status_counting_down(Clock::time_point now) const;
  // Hosts joining while the job runs (native_job_elastic.cpp): agents started off the loop
  // (agent_starter.h), admitted between two turns of the loop, never while a frame is handled.
  void start_agent(const std::string& host);
  void admit_agents();
  void on_joiner_hello(AgentConn& agent);
  void joiner_lost(AgentConn& agent, const std::string& why);
  void learn_addresses(const AgentConn& agent);
  AgentConn* live_agent(const std::string& host);
  HostSpec listed_host(const std::string& host) const;
  // The host discovery script: started when due, read while it runs, its list to the driver.
  void discovery_turn(Clock::time_point now);
  // A joining host's network check (the start-up's, restricted to the joiner): the joiner and
  // every running agent open a probe listener; the joiner probes each of them and the
  // rendezvous server, each of them probes the joiner. One check at a time.
  void next_join_check();
  void on_join_listening(AgentConn& agent, const std::string& payload);
  void on_join_probe_results(AgentConn& agent, const std::string& payload);
  void end_join_check(const std::optional<std::string>& failure);
  std::string address_of(int host_index) const;

  // native_job_why.cpp: a stalled job's verdict (docs/why.md)
  void on_rank_report(AgentConn& agent, const std::string& payload);
  void on_inspection(AgentConn& agent, const std::string& payload);
  void finish_verdict();
  // What a verdict does once shown: nothing more (a warning), or it ends the job as its root
  // cause: the stall shutdown (76), or ranks that never called hvd.init() (75).
  enum class VerdictEnds { kNo, kStallShutdown, kInitTimeout };
  struct PendingVerdict {
    std::vector<StalledOp> ops;
    std::vector<RankInspection> found;  // one per missing rank
    std::multiset<size_t> waiting;      // agents (indexes into agents_) whose answers are due
    Clock::time_point deadline;
    VerdictEnds ends = VerdictEnds::kNo;
  };
  // Asks the agents of `pending`'s missing ranks that have no entry in `found` yet.
  void ask_inspections(PendingVerdict& pending);
  // The start-up watch: when every rank should have called hvd.init() (the first rank's call,
  // seen by the rendezvous server, + the smaller of --start-timeout and the ranks' Gloo
  // timeout); nullopt when nothing is watched (any more).
  std::optional<Clock::time_point> init_watch_due() const;
  std::chrono::milliseconds init_window() const;  // from the final specs (init_window_)
  void check_init(Clock::time_point now);
  // Rank 0's hold figures (a "holds" line): the stragglers, named once each as they appear.
  void on_holds(AgentConn& agent, const std::string& line);
  nlohmann::ordered_json stragglers_json() const;      // --json's "stragglers"
  std::optional<int> rank_host_index(int rank) const;  // a launch's rank (not elastic)
  std::string rank_host(int rank) const;               // "" when not known (elastic jobs)

  // One generation of an elastic job, for the log and --json.
  struct GenerationRecord {
    int generation = 0;
    std::string reason;
    std::vector<int> workers;  // by rank
    Clock::time_point published;
    std::optional<Clock::time_point> formed;
  };

  const Plan& plan_;
  const LaunchOptions& options_;
  const bool check_net_only_;  // --check-net: probe, then start nothing
  Supervisor& sup_;
  AgentLaunch& launch_;
  std::vector<AgentConn> agents_;
  std::unique_ptr<RendezvousServer> rendezvous_;  // from the network check to the end
  LaunchFacts facts_;                             // known once every agent said hello
  std::vector<agent::JobSpec> specs_;             // by host; final once every listener is up
  NetCheck net_;
  Clock::time_point started_at_ = Clock::now();
  Clock::time_point start_deadline_ = started_at_ + options_.start_timeout;
  std::optional<Clock::time_point> startup_line_since_;  // while the start-up line is shown
  bool startup_logged_ = false;                          // "phase: running" was logged
  int startup_line_phase_ = -1;                          // the phase it shows
  Clock::time_point startup_line_at_{};                  // when it last changed
  std::optional<ElasticDriver> elastic_;                 // elastic jobs, once the specs went out
  std::vector<GenerationRecord> generations_;
  // Every host an agent was started on, by host index: the plan's, then joining hosts (a host
  // that joins again gets a new index).
  std::vector<HostPlan> hosts_;
  std::map<std::string, HostSpec> listed_;  // the hosts as the last list gave them (user, port)
  std::vector<std::unique_ptr<AgentStarter>> starters_;  // at most --ssh-concurrency
  std::deque<std::string> join_waiting_;                 // hosts whose agent start waits
  std::optional<DiscoveryRunner> discovery_;
  struct JoinCheck {
    size_t joiner = 0;           // index into agents_
    std::vector<size_t> agents;  // the running agents, then the joiner, as in `net`
    NetCheck net;                // endpoints by position in `agents`
    std::set<size_t> waiting;    // agents whose answer (kListening, then kProbeResult) is due
    bool probing = false;
    Clock::time_point deadline;
  };
  std::deque<size_t> join_queue_;  // joiners (indexes into agents_) whose check is due
  std::optional<JoinCheck> join_check_;
  Clock::time_point next_discovery_{};
  std::optional<PendingVerdict> verdict_;  // a stall reported, its inspections under way
  // Ranks' exits that came while a verdict that ends the job was under way: recorded after it,
  // so that the stall (not the exits it caused) is the root cause.
  std::vector<agent::RankExited> held_exits_;
  bool init_watched_ = false;  // the start-up watch is over: every rank called hvd.init(), or not
  // How long the first rank to call hvd.init() waits for the others: set once the specs are final.
  std::optional<std::chrono::milliseconds> init_window_;
  std::optional<HoldFigures> holds_;  // the latest of the global set
  std::set<int> stragglers_named_;
  std::string last_verdict_;  // verdict_key() of the last one shown
  nlohmann::ordered_json stalls_ = nlohmann::ordered_json::array();  // --json's "stalls"
  // What add_pollfds() added, so that on_ready() reads the same entries back.
  size_t polled_agents_ = 0;
  size_t polled_starters_ = 0;
  bool polled_discovery_ = false;
};

}  // namespace hvd::launcher::native
