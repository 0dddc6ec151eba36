// hvdrun's command line: horovodrun's spelling, parsed once into an immutable Options.
//
// argv = hvdrun's own options, then the user's command. Everything from the first positional
// argument (or after `--`, which is dropped) is the command, untouched: `hvdrun -np 2 ./x -np 5`
// runs `./x -np 5`. CLI11 2.1 refuses single-dash long options (`-np`, `-hostfile`), so
// split_command_line() rewrites those among hvdrun's own tokens only.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/port_range.h"
#include "launcher/core/launcher.h"
#include "launcher/core/restarts.h"

namespace hvd::cli {

struct Options {
  std::optional<int> num_proc;
  std::optional<std::string> hosts;     // -H, as written
  std::optional<std::string> hostfile;  // --hostfile
  bool oversubscribe = false;
  std::optional<int> ssh_port;
  std::optional<std::string> ssh_identity_file;
  std::optional<std::string> ssh_config;
  std::optional<std::string> ssh_known_hosts;
  std::string ssh_host_key_policy = "accept-new";
  double ssh_timeout_s = 10.0;
  double wait_for_hosts_s = 0.0;  // --wait-for-hosts: retry hosts not up yet until then
  int ssh_concurrency = 16;
  std::optional<std::string> agent_path;  // default: this hvdrun's own absolute path
  bool check_ssh = false;
  bool check_net = false;       // --check-net: probe between the hosts, start nothing
  bool check_net_full = false;  // --check-net-full: probe every pair (alone: a full --check-net)
  PortRange port_range;         // --port-range LOW-HIGH; any(): not given
  bool check_build = false;     // --check-build: what this build supports and what works now
  std::string launcher = "native";         // the launcher the flags name (--mpi: "mpirun")
  std::string agent_launch = "auto";       // --launcher: how native agents start (auto, ssh, srun)
  std::optional<std::string> rsh_agent;    // --rsh-agent TEMPLATE: agents through a command
  std::optional<std::string> mpi_args;     // --mpi-args "...": appended to mpirun's options
  std::optional<std::string> working_dir;  // --wd; default: hvdrun's current directory
  double grace_s = launcher::kDefaultGraceSeconds;                 // --grace
  double start_timeout_s = launcher::kDefaultStartTimeoutSeconds;  // --start-timeout
  double keepalive_s = launcher::kDefaultKeepaliveSeconds;         // --keepalive
  double job_timeout_s = 0;  // --timeout: the whole job, 0: none
  // The launch flags' types and defaults are the launcher's (launcher/core/launcher.h,
  // launcher/core/restarts.h): the flags write into them, the run session reads them.
  launcher::RestartPolicy restarts;            // --max-restarts, --restart-backoff
  launcher::HostFailureOptions host_failures;  // --host-failure-limit, --blacklist-cooldown-range
  // Elastic training (docs/elastic.md): --min-np or a discovery script turns it on.
  launcher::ElasticOptions elastic;
  std::optional<std::string> output_filename;  // --output-filename DIR
  std::optional<std::string> record;           // --record FILE (launcher/core/run_record.h)
  std::vector<std::string> forward;            // -x, as written
  bool dry_run = false;
  bool json = false;
  bool show_env_values = false;
  bool verbose = false;
  std::string log_level = "info";
  bool log_level_given = false;  // --log-level also sets HOROVOD_LOG_LEVEL for the ranks
  // HOROVOD_* knobs from the engine flags (cli/engine_flags.h), in the order given.
  std::vector<std::pair<std::string, std::string>> knobs;
  std::optional<int> gpus_per_rank;  // --gpus-per-rank N: CUDA_VISIBLE_DEVICES per local rank
  std::optional<std::string> network_interface;  // --network-interface NAME[,NAME], as written
  std::optional<std::string> network_cidr;       // --network-cidr CIDR, as written
  // horovodrun's flags for what libhvd or hvdrun does not do (cli/horovod_flags.h): accepted,
  // and each says so in a warning.
  std::vector<std::string> warnings;
  bool autotune = false;  // --autotune: its sub-flags' knobs count only with it (horovodrun)
  std::vector<std::pair<std::string, std::string>> autotune_knobs;  // the sub-flags', in order
  std::vector<std::string> autotune_flags;                          // which sub-flags were given
  bool timeline_mark_cycles = false;        // --timeline-mark-cycles: only with --timeline-filename
  std::optional<std::string> binding_args;  // --binding-args: mpirun's binding, with --mpi
  bool timestamp_output = false;  // --timestamp-output/-prefix-timestamp: a time on every line
  bool tag_output = true;         // --no-tag-output: lines as the ranks wrote them
  std::optional<std::string> output_ranks;  // --output-ranks LIST, as written
  std::optional<std::string> config_file;   // --config-file: read before parsing (config_file.h)
  std::vector<std::string> command;
};

// Thrown by parse_options for --help and --version: print `text` on stdout, exit 0.
struct EarlyExit {
  std::string text;
};

// Parses argv (without argv[0]). Throws UsageError or EarlyExit.
Options parse_options(const std::vector<std::string>& args);

// The split of argv into hvdrun's own tokens (single-dash long options rewritten to their
// `--` form) and the user's command. Exposed for tests.
struct CommandLine {
  std::vector<std::string> own;
  std::vector<std::string> command;
};
CommandLine split_command_line(const std::vector<std::string>& args);

}  // namespace hvd::cli
