#include "cli/option_checks.h"

#include <fmt/format.h>

#include "cli/elastic_flags.h"
#include "common/error.h"
#include "launcher/core/output_router.h"

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

}  // namespace

void validate_options(const Options& o) {
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
  if (o.gpus_per_rank && o.mpi()) {
    throw UsageError(
        "--gpus-per-rank works in native mode only: mpirun gives every rank the "
        "same environment",
        "drop --mpi, or leave CUDA_VISIBLE_DEVICES alone and use hvd::gpu_device() "
        "(local rank modulo the visible GPUs)");
  }
  if (o.network_interface && o.network_cidr) {
    throw UsageError("--network-interface and --network-cidr were both given",
                     "use one: a CIDR picks each host's address whatever its NIC is called");
  }
  if (!o.port_range.any() && o.mpi()) {
    throw UsageError("--port-range works in native mode only",
                     "drop --mpi (mpirun opens its own ports: pin them with --mpi-args, e.g. "
                     "\"--mca btl_tcp_port_min_v4 LOW --mca btl_tcp_port_range_v4 N\")");
  }
  if (o.mpi_args && !o.mpi()) {
    throw UsageError("--mpi-args was given without --mpi",
                     "add --mpi to launch through mpirun, or drop --mpi-args");
  }
  if (o.ssh_concurrency < 1 || o.ssh_concurrency > 1024) {
    throw UsageError(fmt::format("--ssh-concurrency {}: must be 1 to 1024", o.ssh_concurrency),
                     "e.g. --ssh-concurrency 16");
  }
  validate_elastic(o);
  if (o.output_ranks) launcher::parse_rank_list(*o.output_ranks);  // a bad list: usage error
  validate_checks(o);
}

}  // namespace hvd::cli
