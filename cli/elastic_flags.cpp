#include "cli/elastic_flags.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>

#include "cli/flag_values.h"
#include "common/error.h"
#include "launcher/registry.h"

namespace hvd::cli {

void define_restart_and_elastic_flags(CLI::App& app, Options& o) {
  app.add_option("--max-restarts", o.restarts.max_restarts,
                 "Start the job again, up to N times, when a rank fails, a host is lost, the "
                 "network check fails or an SSH connection is refused or times out (default 0)")
      ->type_name("N")
      ->check(CLI::Range(0, 1000));
  app.add_option_function<std::string>(
         "--restart-backoff",
         [&o](const std::string& v) {
           o.restarts.backoff_seconds = parse_seconds("--restart-backoff", v, "no wait");
         },
         fmt::format("Seconds before the first restart, doubled for each next one, at most {:g} "
                     "(default {:g}; 0: none)",
                     launcher::kMaxBackoffSeconds, launcher::RestartPolicy{}.backoff_seconds))
      ->type_name("SECONDS");
  app.add_option("--host-failure-limit", o.host_failures.limit,
                 "With --max-restarts: failures against a host (lost, SSH refused or timed out, "
                 "a rank killed by SIGBUS) before it is blacklisted for a cooldown; elastic: "
                 "failures of the ranks on a slot before the slot is (default 1)")
      ->type_name("K")
      ->check(CLI::Range(1, 1000));
  app.add_option("--blacklist-cooldown-range", o.host_failures.cooldown,
                 fmt::format("With --max-restarts: a blacklisted host's cooldown, MIN seconds "
                             "the first time, doubling each next time, at most MAX, plus up to "
                             "10% (default {:g} {:g}); elastic: a failed slot's, after which a "
                             "new rank takes it (without this flag a failed slot is out for "
                             "good, as in horovodrun)",
                             launcher::HostFailureOptions{}.cooldown.at(0),
                             launcher::HostFailureOptions{}.cooldown.at(1)))
      ->type_name("MIN MAX")
      ->expected(2)
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option_function<std::string>(
         "--min-np,--min-num-proc",
         [&o](const std::string& v) { o.elastic.min_np = parse_int("--min-np", v); },
         "Elastic training: when a rank fails, the others go on without it as long as N ranks "
         "remain (programs use hvd::elastic::run; docs/elastic.md). Native launch over SSH "
         "or on this machine")
      ->type_name("N");
  app.add_option_function<std::string>(
         "--max-np,--max-num-proc",
         [&o](const std::string& v) { o.elastic.max_np = parse_int("--max-np", v); },
         "Elastic training: at most N ranks; above -np the job grows onto the hosts' free "
         "slots once it runs (default: no limit, as horovodrun)")
      ->type_name("N");
  app.add_option_function<std::string>(
         "--reset-limit",
         [&o](const std::string& v) { o.elastic.reset_limit = parse_int("--reset-limit", v); },
         "Elastic training: the job fails at the (N+1)-th change of its ranks (default: no "
         "limit)")
      ->type_name("N");
  app.add_option_function<std::string>(
         "--elastic-timeout",
         [&o](const std::string& v) {
           o.elastic.timeout_s = parse_seconds("--elastic-timeout", v, "fail at once");
         },
         fmt::format("Elastic training: how long the job may stay below --min-np ranks waiting "
                     "for a failed slot's cooldown to end, and how long running ranks have to "
                     "join a grown generation (default {:g})",
                     launcher::kDefaultElasticTimeoutSeconds))
      ->type_name("SECONDS");
  app.add_option("--host-discovery-script", o.elastic.discovery_script,
                 "Elastic training: a program that prints the hosts the job may use now, one "
                 "host[:slots] per line; run every --discovery-interval seconds, hosts join and "
                 "leave the job as its output changes (instead of -H; turns elastic on)")
      ->type_name("PATH");
  app.add_option_function<std::string>(
         "--discovery-interval",
         [&o](const std::string& v) {
           o.elastic.discovery_interval_s = parse_seconds("--discovery-interval", v);
         },
         fmt::format("Seconds between two runs of the host discovery script (default {:g})",
                     launcher::kDefaultDiscoveryIntervalSeconds))
      ->type_name("SECONDS");
  app.add_option_function<std::string>(
         "--slots-per-host",
         [&o](const std::string& v) {
           o.elastic.slots_per_host = parse_int("--slots-per-host", v);
         },
         "Slots of a host the discovery script prints without :slots (default 1)")
      ->type_name("N");
}

void validate_elastic(const Options& o) {
  if (!o.elastic.on()) {
    for (const auto& [given, flag] :
         {std::pair{o.elastic.max_np.has_value(), "--max-np"},
          std::pair{o.elastic.reset_limit.has_value(), "--reset-limit"},
          std::pair{o.elastic.timeout_s.has_value(), "--elastic-timeout"},
          std::pair{o.elastic.slots_per_host.has_value(), "--slots-per-host"}}) {
      if (given) {
        throw UsageError(fmt::format("{} was given without --min-np", flag),
                         "elastic training starts with --min-np N (the fewest ranks the job may "
                         "go on with), as in horovodrun");
      }
    }
    return;
  }
  if (o.elastic.discovery_script && (o.hosts || o.hostfile)) {
    throw UsageError("--host-discovery-script and -H/--hostfile were both given",
                     "the script lists the hosts: drop -H and --hostfile");
  }
  if (o.elastic.discovery_script && (o.network_interface || o.network_cidr)) {
    throw UsageError(
        "--host-discovery-script with --network-interface or --network-cidr is not built yet",
        "drop the network flag: each joining host's ranks use the address its SSH session "
        "arrived at");
  }
  if (o.elastic.discovery_script) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*o.elastic.discovery_script, ec) ||
        ::access(o.elastic.discovery_script->c_str(), X_OK) != 0) {
      throw UsageError(fmt::format("--host-discovery-script {}: not an executable file",
                                   *o.elastic.discovery_script),
                       "give the path of a program (chmod +x) that prints host[:slots] lines");
    }
  }
  if (o.elastic.slots_per_host && !o.elastic.discovery_script) {
    throw UsageError("--slots-per-host was given without --host-discovery-script",
                     "it is the slots of a host the discovery script prints without :slots");
  }
  if (o.elastic.slots_per_host &&
      (*o.elastic.slots_per_host < 1 || *o.elastic.slots_per_host > 1024)) {
    throw UsageError(
        fmt::format("--slots-per-host {}: must be 1 to 1024", *o.elastic.slots_per_host),
        "e.g. --slots-per-host 8 for hosts with 8 GPUs");
  }
  if (o.elastic.min_np && *o.elastic.min_np < 1) {
    throw UsageError(fmt::format("--min-np {}: must be 1 or more", *o.elastic.min_np),
                     "e.g. -np 4 --min-np 2: the job goes on while 2 of its 4 ranks remain");
  }
  if (o.elastic.reset_limit && *o.elastic.reset_limit < 0) {
    throw UsageError(fmt::format("--reset-limit {}: must be 0 or more", *o.elastic.reset_limit),
                     "0 fails the job at the first change of its ranks");
  }
  launcher::require(o.launcher, launcher::Capability::kElastic);
  if (o.restarts.max_restarts > 0) {
    throw UsageError("--max-restarts and --min-np were both given",
                     "use one: --min-np keeps the job running without the failed ranks, "
                     "--max-restarts starts the whole job again");
  }
}

}  // namespace hvd::cli
