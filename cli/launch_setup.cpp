#include "cli/launch_setup.h"

#include <fmt/format.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "cli/engine_flags.h"
#include "common/error.h"
#include "common/process.h"
#include "common/user_account.h"
#include "launcher/core/discovery_wait.h"
#include "launcher/core/status_line.h"
#include "launcher/plan/scheduler_hosts.h"

namespace hvd::cli {
namespace {

std::string current_user() {
  if (const auto account = current_account()) return account->name;
  return "root";
}

void require_readable_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || !std::ifstream(path).good()) {
    throw UsageError(fmt::format("{} {}: no such readable file", flag, path),
                     "check the path (and that this user may read it)");
  }
}

// hvdrun's current directory, the ranks' default one. getcwd fails when the directory was
// deleted (or moved out of reach) after the shell entered it: say that, not "'' is not absolute".
std::filesystem::path current_directory(const Options& o) {
  std::error_code ec;
  std::filesystem::path here = std::filesystem::current_path(ec);
  if (ec) {
    throw UsageError(
        fmt::format("hvdrun's current directory cannot be read ({}): it was probably deleted "
                    "after this shell entered it, and {}",
                    ec.message(),
                    o.working_dir ? fmt::format("--wd {} is taken from it", *o.working_dir)
                                  : "the ranks start in it by default"),
        o.working_dir ? "cd to a directory that exists, or give --wd an absolute path"
                      : "cd to a directory that exists (e.g. cd \"$PWD\" if it was recreated), "
                        "or give the ranks' directory with --wd DIR");
  }
  return here;
}

std::string working_directory(const Options& o) {
  if (o.working_dir && std::filesystem::path(*o.working_dir).is_absolute()) {
    return std::filesystem::path(*o.working_dir).lexically_normal().string();
  }
  const std::filesystem::path here = current_directory(o);
  if (!o.working_dir) return here.string();
  // A relative --wd is taken from here, as mpirun does; it must exist on every host.
  return (here / *o.working_dir).lexically_normal().string();
}

}  // namespace

launcher::LaunchOptions launch_options(const Options& o) {
  launcher::LaunchOptions options;
  options.cwd = working_directory(o);
  options.grace_seconds = o.grace_s;
  options.start_timeout = launcher::seconds_to_ms(o.start_timeout_s);
  options.keepalive = launcher::seconds_to_ms(o.keepalive_s);
  options.job_timeout = launcher::seconds_to_ms(o.job_timeout_s);
  options.output_dir = o.output_filename;
  options.line_format.tag = o.tag_output;
  options.line_format.timestamp = o.timestamp_output;
  if (o.output_ranks) options.line_format.ranks = launcher::parse_rank_list(*o.output_ranks);
  options.hvdrun_path = own_path();
  options.stdout_to_stderr = o.json;
  options.ssh = ssh_options(o);
  options.port_range = o.port_range;
  options.check_net_full = o.check_net_full;
  // Under --mpi (where --launcher is refused) the same choice says whether the network check's
  // agents and mpirun's daemons start through Slurm.
  options.agent_launch = o.agent_launch;
  options.rsh_agent = o.rsh_agent;
  if (o.elastic.on()) options.elastic = o.elastic;
  options.host_failures = o.host_failures;
  return options;
}

launcher::LauncherOptions launcher_options(const Options& o) {
  auto words_of = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream words(text);
    for (std::string w; words >> w;) out.push_back(w);
    return out;
  };
  launcher::LauncherOptions own;
  if (o.mpi_args) own.mpirun.extra_args = words_of(*o.mpi_args);
  if (o.binding_args) own.mpirun.binding_args = words_of(*o.binding_args);
  return own;
}

std::string path_of(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// --check-net, or --check-net-full without a command.
bool checking_net(const Options& o) {
  return o.check_net || (o.check_net_full && o.command.empty());
}

launcher::HostsSource hosts_source(const Options& o) {
  if (o.elastic.discovery_script) {
    // Its first list, once it holds -np slots (--min-np without -np).
    const int needed = o.num_proc.value_or(o.elastic.min_np.value_or(1));
    return launcher::wait_for_discovered_hosts(
        o.elastic, needed, fmt::format("{} {}", o.num_proc ? "-np" : "--min-np", needed),
        launcher::stderr_wants_status_line(o.json));
  }
  return launcher::choose_hosts(o.hosts, o.hostfile, launcher::getenv_value,
                                launcher::read_whole_file);
}

std::string own_path() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "hvdrun" : path.string();
}

ssh::SshOptions ssh_options(const Options& o) {
  if (o.ssh_identity_file) require_readable_file("-i", *o.ssh_identity_file);
  if (o.ssh_config) require_readable_file("--ssh-config", *o.ssh_config);
  ssh::SshOptions s;
  s.config_file = o.ssh_config;
  s.known_hosts_file = o.ssh_known_hosts;
  s.identity_file = o.ssh_identity_file;
  s.port = o.ssh_port;
  s.host_key_policy = o.ssh_host_key_policy == "strict" ? ssh::HostKeyPolicy::kStrict
                                                        : ssh::HostKeyPolicy::kAcceptNew;
  s.timeout = launcher::seconds_to_ms(o.ssh_timeout_s);
  s.wait_for_hosts = launcher::seconds_to_ms(o.wait_for_hosts_s);
  s.concurrency = o.ssh_concurrency;
  s.agent_path = o.agent_path.value_or(own_path());
  return s;
}

launcher::PlanRequest plan_request(const Options& o) {
  if (o.command.empty() && !checking_net(o)) {
    throw UsageError("no command to run",
                     "put the program after hvdrun's options, e.g. hvdrun -np 2 ./train "
                     "--epochs 3");
  }
  launcher::PlanRequest request;
  launcher::HostsSource source = hosts_source(o);
  request.hosts = std::move(source.hosts);
  request.hosts_origin = {source.kind, source.description, std::move(source.discovery_output)};
  // Inside an allocation, -np defaults to the scheduler's task count (SLURM_NTASKS).
  request.num_proc = o.num_proc ? o.num_proc : source.default_np;
  request.oversubscribe = o.oversubscribe;
  request.ssh_port = o.ssh_port;
  request.default_user = current_user();
  for (const std::string& x : o.forward) {
    request.forward.push_back(launcher::parse_forward_spec(x));
  }
  request.knobs = o.knobs;
  request.gpus_per_rank = o.gpus_per_rank;
  request.port_range = o.port_range;
  if (o.network_cidr) request.network.cidr = launcher::parse_cidr(*o.network_cidr);
  if (o.network_interface) {
    request.network.interfaces = launcher::parse_interface_list(*o.network_interface);
  }
  if (o.log_level_given) {
    request.knobs.emplace_back("HOROVOD_LOG_LEVEL", libhvd_log_level(o.log_level));
  }
  // --check-net starts agents, never ranks: the plan needs a command, which never runs.
  request.command = o.command.empty() ? std::vector<std::string>{"true"} : o.command;
  request.job_id = random_job_id();
  request.elastic = o.elastic.on();
  return request;
}

std::string random_job_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

}  // namespace hvd::cli
