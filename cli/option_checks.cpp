#include "cli/option_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "cli/elastic_flags.h"
#include "common/error.h"
#include "launcher/core/output_router.h"
#include "launcher/native/rsh_launch.h"
#include "launcher/registry.h"

namespace hvd::cli {
namespace {

// --check-ssh, --check-net and --check-build diagnose and exit: a command or --dry-run with
// them would be silently ignored, so say so instead.
void validate_checks(const Options& o) {
  struct Check {
    bool given;
    std::string_view flag;
    std::string_view what;  // what it does instead of a launch
    std::string_view launch_note;
  };
  const Check checks[] = {
      {o.check_ssh, "--check-ssh", "checks SSH to every host",
       " (a launch checks SSH to every host first anyway)"},
      {o.check_net, "--check-net", "probes the network between the hosts",
       " (a launch runs the same network check first; --check-net-full with a command probes "
       "every pair before it)"},
      {o.check_build, "--check-build", "reports what this build supports", ""},
  };
  for (const Check& c : checks) {
    if (!c.given) continue;
    if (!o.command.empty()) {
      throw UsageError(
          fmt::format("{} {} and exits; it runs no command, but the command '{}' was given", c.flag,
                      c.what, o.command.front()),
          fmt::format("drop the command to only check, or drop {} to launch it{}", c.flag,
                      c.launch_note));
    }
    if (o.dry_run) {
      throw UsageError(
          fmt::format("{} and --dry-run were both given: {} {}, --dry-run only "
                      "prints a launch plan",
                      c.flag, c.flag, c.what),
          fmt::format("use one of them: {} alone, or --dry-run with a command", c.flag));
    }
  }
}

// --rsh-agent: its template is valid and nothing contradicts it.
void validate_rsh_agent(const Options& o) {
  if (!o.rsh_agent) return;
  const launcher::RshTemplate tmpl = launcher::parse_rsh_template(*o.rsh_agent);
  if (o.agent_launch != "auto") {
    throw UsageError(
        fmt::format("--rsh-agent and --launcher {} were both given", o.agent_launch),
        "use one: --rsh-agent starts each host's agent with your command, --launcher ssh or "
        "srun with hvdrun's own way");
  }
  if (o.check_ssh) {
    throw UsageError(
        "--rsh-agent and --check-ssh were both given: with --rsh-agent no host is "
        "reached over SSH",
        "drop --check-ssh; --check-net starts every host's agent through the "
        "--rsh-agent command and checks the network between them");
  }
  for (const std::string& w : tmpl.words) {
    if (w.find("{user}") != std::string::npos || w.find("{port}") != std::string::npos) {
      launcher::require(o.launcher, launcher::Capability::kRshUserPort, *o.rsh_agent);
    }
  }
}

}  // namespace

std::optional<std::string> rsh_agent_warning(const Options& o) {
  if (!o.rsh_agent) return std::nullopt;
  const launcher::RshTemplate tmpl = launcher::parse_rsh_template(*o.rsh_agent);
  const auto uses = [&](std::string_view placeholder) {
    for (const std::string& w : tmpl.words) {
      if (w.find(placeholder) != std::string::npos) return true;
    }
    return false;
  };
  std::vector<std::string> moot;
  if (o.ssh_port && !uses("{port}")) moot.emplace_back("-p");
  if (o.ssh_identity_file) moot.emplace_back("-i");
  if (o.ssh_config) moot.emplace_back("--ssh-config");
  if (o.ssh_known_hosts) moot.emplace_back("--ssh-known-hosts");
  if (moot.empty()) return std::nullopt;
  return fmt::format("--rsh-agent starts the agents without SSH: {} {} no effect",
                     fmt::join(moot, ", "), moot.size() == 1 ? "has" : "have");
}

void validate_options(const Options& o) {
  validate_rsh_agent(o);
  if (o.hosts && o.hostfile) {
    throw UsageError("-H and --hostfile were both given", "use one of them");
  }
  if (o.ssh_port && (*o.ssh_port < 1 || *o.ssh_port > 65535)) {
    throw UsageError(fmt::format("-p {}: not a port number (1-65535)", *o.ssh_port),
                     "give the port sshd listens on, e.g. -p 12345");
  }
  if (o.ssh_host_key_policy != "accept-new" && o.ssh_host_key_policy != "strict") {
    throw UsageError(
        fmt::format("--ssh-host-key-policy {}: unknown policy", o.ssh_host_key_policy),
        "use accept-new (record unknown host keys) or strict (refuse them); hvdrun never "
        "accepts a changed key");
  }
  if (o.gpus_per_rank && (*o.gpus_per_rank < 1 || *o.gpus_per_rank > 64)) {
    throw UsageError(fmt::format("--gpus-per-rank {}: must be 1 to 64", *o.gpus_per_rank),
                     "e.g. --gpus-per-rank 1 gives each local rank its own GPU");
  }
  if (o.gpus_per_rank) launcher::require(o.launcher, launcher::Capability::kGpusPerRank);
  if (o.network_interface && o.network_cidr) {
    throw UsageError("--network-interface and --network-cidr were both given",
                     "use one: a CIDR picks each host's address whatever its NIC is called");
  }
  if (!o.port_range.any()) launcher::require(o.launcher, launcher::Capability::kPortRange);
  if (o.mpi_args) launcher::require(o.launcher, launcher::Capability::kMpiArgs);
  if (o.ssh_concurrency < 1 || o.ssh_concurrency > 1024) {
    throw UsageError(fmt::format("--ssh-concurrency {}: must be 1 to 1024", o.ssh_concurrency),
                     "e.g. --ssh-concurrency 16");
  }
  if (o.host_failures.cooldown.at(0) > o.host_failures.cooldown.at(1)) {
    throw UsageError(fmt::format("--blacklist-cooldown-range {:g} {:g}: MIN is above MAX",
                                 o.host_failures.cooldown[0], o.host_failures.cooldown[1]),
                     "e.g. --blacklist-cooldown-range 10 300");
  }
  validate_elastic(o);
  if (o.output_ranks) launcher::parse_rank_list(*o.output_ranks);  // a bad list: usage error
  validate_checks(o);
}

}  // namespace hvd::cli
