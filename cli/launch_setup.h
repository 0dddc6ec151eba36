// From hvdrun's options to what the launcher takes: the hosts (-H, a hostfile, a scheduler's
// allocation, a discovery script), the SSH options, the plan request and the launch options.
#pragma once

#include <string>

#include "cli/options.h"
#include "launcher/core/launcher.h"
#include "launcher/plan/plan.h"
#include "launcher/plan/scheduler_hosts.h"
#include "launcher/registry.h"
#include "ssh/options.h"

namespace hvd::cli {

// --check-net, or --check-net-full without a command.
bool checking_net(const Options& o);

// -H, --hostfile, else a scheduler's allocation or Open MPI's default hostfile, else localhost.
// --host-discovery-script: its first list, once it holds -np slots (--min-np without -np), as
// horovodrun waits for them, up to --elastic-timeout (launcher/core/discovery_wait.h).
launcher::HostsSource hosts_source(const Options& o);

// This hvdrun's own path (the agent every host runs, unless --agent-path).
std::string own_path();
// Where `program` is on this process's PATH (the first executable match), or "".
std::string path_of(const std::string& program);

ssh::SshOptions ssh_options(const Options& o);

launcher::PlanRequest plan_request(const Options& o);

// A new job id (each restart attempt gets one).
std::string random_job_id();

// Every attempt's launch options (elastic training's as the flags gave them).
launcher::LaunchOptions launch_options(const Options& o);
// Each launcher's own options (--mpi-args, --binding-args: mpirun's).
launcher::LauncherOptions launcher_options(const Options& o);

}  // namespace hvd::cli
