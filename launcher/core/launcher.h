// Launchers: one interface, several ways to start the ranks of a Plan.
//
// A launcher takes the same Plan (launcher/plan/plan.h) and options and returns the same kind of
// result; it also says what it would run, which `hvdrun --dry-run` prints. Today's launchers are
// "native" (hvdrun's agent on every host: a local child, or over one SSH session per host;
// native_launcher.h) and "mpirun" (Open MPI's mpirun; mpi_launcher.h). Both run on the same core
// (supervisor.h): tagged output, fail-fast, signal forwarding, the root-cause report.
//
// Adding one: a file pair implementing Launcher (its own folder under launcher/), with the flags
// that choose it and what it refuses, and one line in the registry (launcher/registry.cpp), from
// which the CLI defines its flags; docs/architecture.md has the recipe.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/port_range.h"
#include "launcher/core/net_check.h"
#include "launcher/core/output_router.h"
#include "launcher/plan/plan.h"
#include "ssh/host_check.h"
#include "ssh/options.h"

namespace hvd::launcher {

// Launch flags' defaults, written once: LaunchOptions below, the CLI's flags and their help text
// read them (cli/options.cpp, cli/elastic_flags.cpp).
inline constexpr double kDefaultGraceSeconds = 5.0;              // --grace
inline constexpr double kDefaultStartTimeoutSeconds = 30.0;      // --start-timeout
inline constexpr double kDefaultKeepaliveSeconds = 30.0;         // --keepalive
inline constexpr double kDefaultElasticTimeoutSeconds = 600.0;   // --elastic-timeout
inline constexpr double kDefaultDiscoveryIntervalSeconds = 1.0;  // --discovery-interval

// --max-np without a bound (horovodrun's default).
inline constexpr int kUnboundedNp = 1 << 20;

inline std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

// Elastic training (--min-np; docs/elastic.md): a failed rank leaves the job, which goes on with
// the others in a new generation, while at least min_np remain. The one type for it, as the
// flags gave it: the CLI fills it, the run session checks and describes it (core/session.h), the
// native job runs it. What was not given reads as its default through the accessors.
class RunRecord;  // launcher/core/run_record.h

struct ElasticOptions {
  std::optional<int> min_np{};        // --min-np; without it (a discovery script alone): -np
  std::optional<int> max_np{};        // --max-np; without it no limit, as horovodrun
  std::optional<int> reset_limit{};   // --reset-limit: new generations allowed after the first
  std::optional<double> timeout_s{};  // --elastic-timeout
  // --host-discovery-script: run every `discovery_interval_s` (its first list made the plan).
  std::optional<std::string> discovery_script{};
  double discovery_interval_s = kDefaultDiscoveryIntervalSeconds;
  std::optional<int> slots_per_host{};  // --slots-per-host: a listed host without :slots

  // --min-np or a discovery script turns elastic training on (horovodrun's rule).
  bool on() const { return min_np.has_value() || discovery_script.has_value(); }
  int min_np_for(int np) const { return min_np.value_or(np); }
  int max_np_or_unbounded() const { return max_np.value_or(kUnboundedNp); }
  std::chrono::milliseconds timeout() const {
    return seconds_to_ms(timeout_s.value_or(kDefaultElasticTimeoutSeconds));
  }
  std::chrono::milliseconds discovery_interval() const {
    return seconds_to_ms(discovery_interval_s);
  }
  int slots() const { return slots_per_host.value_or(1); }
};

// --host-failure-limit and --blacklist-cooldown-range: restarts count failures per host
// (core/restarts.h), elastic training per slot.
struct HostFailureOptions {
  int limit = 1;
  std::vector<double> cooldown{10.0, 300.0};  // MIN MAX seconds
  bool cooldown_given = false;
  // Elastic: a failed slot's cooldown; nullopt (the flag not given): out for good, as horovodrun.
  std::optional<std::pair<double, double>> slot_cooldown() const {
    if (!cooldown_given) return std::nullopt;
    return std::pair{cooldown.at(0), cooldown.at(1)};
  }
};

// What every launcher reads besides the plan. A launcher's own options are its own type, beside
// its class (launcher/mpirun/mpirun_options.h), handed to it by the registry (launcher/registry.h).
struct LaunchOptions {
  // How the agents start (--launcher; launcher/native/agent_launch.h): "ssh", "srun", or "auto"
  // (srun inside an allocation whose hosts came from Slurm, else ssh); --rsh-agent's template,
  // when given, instead. mpirun's daemons start the same way (and its network check's agents).
  std::string agent_launch = "auto";
  std::optional<std::string> rsh_agent;
  std::string cwd;                              // absolute; the ranks' working directory
  double grace_seconds = kDefaultGraceSeconds;  // SIGTERM -> SIGKILL
  // Agents' hello and every rank started.
  std::chrono::milliseconds start_timeout = seconds_to_ms(kDefaultStartTimeoutSeconds);
  // --keepalive: a host whose agent is silent this long while the job runs is lost (0: never).
  std::chrono::milliseconds keepalive = seconds_to_ms(kDefaultKeepaliveSeconds);
  // --timeout: the whole job (each attempt) is stopped this long after it started (0: never).
  std::chrono::milliseconds job_timeout{0};
  std::optional<std::string> output_dir;  // --output-filename
  // --max-restarts: this attempt's folder ("attempt.K") in output_dir, made and opened there
  // without following a symbolic link (as rank.N below it).
  std::optional<std::string> output_subdir;
  LineFormat line_format;                         // --no-tag-output, --timestamp-output
  std::string hvdrun_path;                        // the local agent binary (this hvdrun)
  ssh::SshOptions ssh;                            // how remote hosts are reached
  bool stdout_to_stderr = false;                  // --json keeps stdout for the result document
  PortRange port_range;                           // --port-range: rendezvous, probes, MASTER_PORT
  bool check_net_full = false;                    // --check-net-full: probe every pair of hosts
  std::chrono::milliseconds probe_timeout{5000};  // each network probe's connect and greeting
  // Elastic training, as the flags gave it: the session checks and describes it, the launchers
  // that support it (Capability::kElastic) run it; the registry refuses it to the others.
  std::optional<ElasticOptions> elastic;
  HostFailureOptions host_failures;  // restarts' host blacklist; elastic: per slot
  // --record FILE (launcher/core/run_record.h): every attempt's supervisor and job add their
  // events to it; null: no record.
  std::shared_ptr<RunRecord> record;
};

struct RankOutcome {
  int rank = 0;
  int host_index = 0;
  std::string host;  // the host's name as the plan (or, elastic, the discovery) has it
  int local_rank = 0;
  bool started = false;
  long pid = 0;
  bool exited = false;
  bool signaled = false;
  int value = 0;                   // exit code, or signal number
  bool stopped_by_hvdrun = false;  // it ended because hvdrun stopped the job
  std::deque<std::string> last_stderr;

  bool failed() const { return exited && (signaled || value != 0); }
  int exit_code() const { return signaled ? 128 + value : value; }
};

// What a launch learned about a host, once every agent said hello.
struct HostFacts {
  // A remote host: the address hvdrun's SSH session connected to, or (through srun) the node's
  // NodeAddr.
  std::string address;
  std::string boot_id;
};

struct LaunchResult {
  std::string launcher;              // the launcher's name
  std::vector<std::string> command;  // what it ran (the agent command, mpirun's argv)
  std::vector<RankOutcome> ranks;
  std::optional<int> first_failure;  // index into ranks
  // A rank failed, but which is not known (mpirun said so without naming it); `error` says it.
  bool unnamed_rank_failed = false;
  std::optional<Failure> error;       // a host-level failure (could not start, agent lost, ...)
  int interrupted_by = 0;             // the signal that interrupted hvdrun, or 0
  std::string stopped_by = "hvdrun";  // who stopped the other ranks after the first failure
  // Elastic jobs: why first_failure ended the job when other failures did not ("elastic: 1 rank
  // left, fewer than --min-np 2"); empty when it was simply the first failure.
  std::string elastic_end;
  // From when the launcher's job began (after the SSH logins) until every rank was started;
  // nullopt when not known: a rank never started, or mpirun, which does not say when its ranks
  // start.
  std::optional<std::chrono::milliseconds> start_time;
  std::chrono::milliseconds total_time{0};   // from the same point until the job ended
  std::vector<ssh::HostCheck> ssh_failures;  // hosts that failed an SSH stage: nothing ran
  // Hosts whose agent did not end within the grace period and margin of the stop: hvdrun
  // stopped waiting for them (their ranks are stopped by the agent's dead-man switch).
  std::vector<std::string> abandoned;
  // Hosts lost while the job ran (their link closed or went silent, their agent died).
  std::vector<std::string> lost_hosts;
  std::optional<NetCheck> net;   // once every host probed
  std::vector<HostFacts> hosts;  // by host, once every agent said hello
  // The launcher's own facts for the --json result, as top-level keys (native: "rendezvous").
  nlohmann::ordered_json details = nlohmann::ordered_json::object();
  int exit_code = 0;
};

// What a launcher would run, for `--dry-run`: one line per command (each as argv words, values
// known only at launch shown as "<set at launch: ...>").
struct LaunchCommand {
  std::string where;  // "on 10.0.0.2 over SSH", "mpirun on this machine"
  std::vector<std::string> argv;
};

// What a launcher may not support, asked by the CLI's option checks through the registry
// (launcher/registry.h: refusal()); each launcher lists what it refuses, with the words of the
// error (or, for kBindingArgs, the warning) the user reads.
enum class Capability {
  kElastic,      // --min-np: the job changes size while it runs
  kGpusPerRank,  // --gpus-per-rank: each rank its own environment
  kPortRange,    // --port-range: hvdrun opens every port
  kMpiArgs,      // --mpi-args: mpirun's own options
  kBindingArgs,  // --binding-args: ranks bound to cores (a warning: the flag is horovodrun's)
  kRshUserPort,  // {user} and {port} in --rsh-agent's template
};
struct Refusal {
  Capability capability;
  std::string_view what;  // "{}": the flag's value, where the message quotes it
  std::string_view hint;
};

// A launcher's row in `hvdrun --check-build`: whether it can run on this machine now.
struct LauncherCheck {
  std::string_view key;    // the key in --json's "launch_modes" ("mpi")
  std::string_view label;  // the human row's name ("MPI mode (--mpi)")
  // What it needs, probed (its version line), or nullopt when missing; nullptr: always there.
  std::optional<std::string> (*probe)() = nullptr;
  std::string_view probe_key{};  // the probe's value in --json ("mpirun")
  std::string_view missing{};    // the human row when the probe fails
};

// A flag that chooses a launcher (--mpi), with its --help line.
struct LauncherFlag {
  std::string_view name;
  std::string_view help;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual std::string_view name() const = 0;
  // What run() would start, without touching the network.
  virtual std::vector<LaunchCommand> describe(const Plan& plan) const = 0;
  // The plan as the dry run shows it: where this launcher's connections will really go (the
  // native launch's SSH sessions after the SSH config's Port and User).
  virtual Plan shown(const Plan& plan) const { return plan; }
  // Refuses, with a UsageError, what this launcher cannot do with these options and plan (elastic
  // training through a way that cannot start a joining host, srun outside an allocation); the run
  // session calls it before it prints anything, so a refused command prints its error alone.
  virtual void check(const Plan& plan) const { (void)plan; }
  // Runs the plan to the end. Throws hvd::Error only for what stops it before anything started.
  virtual LaunchResult run(const Plan& plan) = 0;
};

}  // namespace hvd::launcher
