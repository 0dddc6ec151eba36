#include "cli/app.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pwd.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string_view>
#include <thread>

#include "cli/attempts.h"
#include "cli/check_build.h"
#include "cli/engine_flags.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/process.h"
#include "launcher/discovery.h"
#include "launcher/json_text.h"
#include "launcher/launch_report.h"
#include "launcher/launcher.h"
#include "launcher/native_launcher.h"
#include "launcher/net_check.h"
#include "launcher/plan.h"
#include "launcher/plan_output.h"
#include "launcher/restarts.h"
#include "launcher/scheduler_hosts.h"
#include "launcher/ssh_check.h"
#include "launcher/status_line.h"

namespace hvd::cli {
namespace {

// hvdrun's log lines on stderr, clearing an elastic job's status line first (status_line.h).
class StatusAwareSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    launcher::StatusLine::get().clear_now();
    std::fwrite(formatted.data(), 1, formatted.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

void setup_logging(const Options& o) {
  auto logger = std::make_shared<spdlog::logger>("hvdrun", std::make_shared<StatusAwareSink>());
  logger->set_pattern("hvdrun: %l: %v");
  spdlog::set_default_logger(logger);
  auto level = spdlog::level::from_str(o.log_level);
  if (o.verbose && level > spdlog::level::debug) level = spdlog::level::debug;
  spdlog::set_level(level);
}

std::string current_user() {
  if (const passwd* pw = getpwuid(geteuid()); pw != nullptr) return pw->pw_name;
  return "root";
}

std::string random_job_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// --check-net, or --check-net-full without a command.
bool checking_net(const Options& o) {
  return o.check_net || (o.check_net_full && o.command.empty());
}

// -H, --hostfile, else a scheduler's allocation or Open MPI's default hostfile, else localhost.
// --host-discovery-script: its first list, once it holds --min-np slots (horovodrun waits for
// them up to --elastic-timeout as well).
launcher::HostsSource discovered_hosts(const Options& o) {
  using Clock = std::chrono::steady_clock;
  const auto timeout =
      std::chrono::milliseconds(static_cast<long>(o.elastic_timeout_s.value_or(600.0) * 1000));
  const auto interval = std::chrono::milliseconds(static_cast<long>(o.discovery_interval_s * 1000));
  const int needed = o.min_np.value_or(1);
  const auto deadline = Clock::now() + timeout;
  bool said = false;
  for (;;) {
    std::vector<launcher::HostSpec> hosts = launcher::DiscoveryRunner::run_once(
        *o.discovery_script, o.slots_per_host.value_or(1), launcher::kDiscoveryTimeout);
    int slots = 0;
    for (const launcher::HostSpec& h : hosts) slots += h.slots;
    if (slots >= needed && !hosts.empty()) {
      return {"discovery",
              fmt::format("the host discovery script {}: {} host{}, {} slot{}", *o.discovery_script,
                          hosts.size(), hosts.size() == 1 ? "" : "s", slots, slots == 1 ? "" : "s"),
              std::move(hosts), std::nullopt, std::nullopt};
    }
    if (Clock::now() + interval > deadline) {
      throw UsageError(
          fmt::format("the host discovery script {} listed {} slot{} for {:.0f} s, fewer than "
                      "--min-np {}",
                      *o.discovery_script, slots, slots == 1 ? "" : "s",
                      std::chrono::duration<double>(timeout).count(), needed),
          "check what the script prints; --elastic-timeout is how long hvdrun waits for slots");
    }
    if (!said) {
      spdlog::info(
          "elastic: the host discovery script lists {} slot{}; waiting up to {:.0f} s "
          "(--elastic-timeout) for --min-np {}",
          slots, slots == 1 ? "" : "s", std::chrono::duration<double>(timeout).count(), needed);
      said = true;
    }
    std::this_thread::sleep_for(interval);
  }
}

launcher::HostsSource hosts_source(const Options& o) {
  if (o.discovery_script) return discovered_hosts(o);
  return launcher::choose_hosts(o.hosts, o.hostfile, launcher::getenv_value,
                                launcher::read_whole_file);
}

void require_readable_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || !std::ifstream(path).good()) {
    throw UsageError(fmt::format("{} {}: no such readable file", flag, path),
                     "check the path (and that this user may read it)");
  }
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
  s.timeout = std::chrono::milliseconds(static_cast<long>(o.ssh_timeout_s * 1000));
  s.wait_for_hosts = std::chrono::milliseconds(static_cast<long>(o.wait_for_hosts_s * 1000));
  s.concurrency = o.ssh_concurrency;
  s.agent_path = o.agent_path.value_or(own_path());
  return s;
}

launcher::CheckReport run_check_ssh(const Options& o) {
  std::vector<launcher::HostSpec> hosts = hosts_source(o).hosts;
  if (hosts.empty()) {
    hosts.push_back({.host = "localhost", .port = {}, .user = {}, .origin = "default host"});
  }
  ssh::SshOptions options = ssh_options(o);
  // On a terminal (and not --json): a live line while the hosts answer, gone before the table.
  auto& status = launcher::StatusLine::get();
  const bool live = !o.json && ::isatty(STDERR_FILENO) != 0;
  if (live) {
    status.enable(STDERR_FILENO);
    const auto start = std::chrono::steady_clock::now();
    options.on_progress = [&status, start](size_t done, size_t failed, size_t total) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      status.set(fmt::format("check-ssh: {} of {} host{} done, {} failed, {} pending ({:.1f} s)",
                             done, total, total == 1 ? "" : "s", failed, total - done, elapsed));
      status.draw_now();
    };
  }
  launcher::CheckReport report =
      launcher::run_ssh_check(hosts, options, launcher::local_identity());
  if (live) {
    status.set("");
    status.clear_now();
  }
  return report;
}

void print_check_ssh(const launcher::CheckReport& report) {
  const bool colour = isatty(STDERR_FILENO) != 0 && std::getenv("NO_COLOR") == nullptr;
  fmt::print(stderr, "{}", launcher::format_check_table(report, colour));
}

bool json_printed = false;  // a run prints one document: an error after it adds none

void print_json(const nlohmann::ordered_json& doc) {
  const std::string text = launcher::json_text(doc);
  std::fwrite(text.data(), 1, text.size(), stdout);
  json_printed = true;
}

int check_ssh(const Options& o) {
  const launcher::CheckReport report = run_check_ssh(o);
  if (o.json) {
    print_json(launcher::check_json(report));
  } else {
    print_check_ssh(report);
  }
  return to_int(report.ok() ? ExitCode::kSuccess : exit_code_of(ErrorKind::kSsh));
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
  request.hosts_origin = {source.kind, source.description};
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
  request.elastic = o.elastic();
  return request;
}

// Elastic training's checks that need the plan: the sizes.
void validate_elastic_plan(const Options& o, const launcher::Plan& plan) {
  if (!o.elastic()) return;
  const int np = static_cast<int>(plan.ranks.size());
  if (o.min_np && *o.min_np > np) {
    throw UsageError(fmt::format("--min-np {} is more than the {} rank{} the job starts with",
                                 *o.min_np, np, np == 1 ? "" : "s"),
                     "give -np at least --min-np: the job starts with -np ranks and goes on "
                     "while --min-np remain");
  }
  if (o.max_np && *o.max_np < np) {
    throw UsageError(
        fmt::format("--max-np {} is less than the {} ranks the job starts with", *o.max_np, np),
        "lower -np, or raise --max-np");
  }
}

// `-H a:2 b:2` in a shell makes `b:2` the command: say so instead of failing later.
void warn_if_command_looks_like_a_host(const Options& o) {
  static const std::regex kHostEntry(R"(^[A-Za-z0-9._@\[\]:-]+:[0-9]+$)");
  if (o.hosts && std::regex_match(o.command.front(), kHostEntry)) {
    spdlog::warn(
        "the command '{}' looks like a host entry: did the -H list contain a space? "
        "(write -H a:2,b:2)",
        o.command.front());
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

launcher::LaunchOptions launch_options(const Options& o) {
  launcher::LaunchOptions options;
  options.cwd = working_directory(o);
  options.grace_seconds = o.grace_s;
  options.start_timeout = std::chrono::milliseconds(static_cast<long>(o.start_timeout_s * 1000));
  options.keepalive = std::chrono::milliseconds(static_cast<long>(o.keepalive_s * 1000));
  options.job_timeout = std::chrono::milliseconds(static_cast<long>(o.job_timeout_s * 1000));
  options.output_dir = o.output_filename;
  options.line_format.tag = o.tag_output;
  options.line_format.timestamp = o.timestamp_output;
  if (o.output_ranks) options.line_format.ranks = launcher::parse_rank_list(*o.output_ranks);
  options.hvdrun_path = own_path();
  options.stdout_to_stderr = o.json;
  options.ssh = ssh_options(o);
  options.port_range = o.port_range;
  options.check_net_full = o.check_net_full;
  auto words_of = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream words(text);
    for (std::string w; words >> w;) out.push_back(w);
    return out;
  };
  if (o.mpi_args) options.mpi_args = words_of(*o.mpi_args);
  if (o.binding_args) options.binding_args = words_of(*o.binding_args);
  return options;
}

nlohmann::ordered_json error_json(const Failure& f) {
  return {{"kind", kind_name(f.kind)}, {"message", f.message}, {"hint", f.hint}};
}

// The same rows as --check-ssh, for a launch or a network check that stopped at SSH: nothing
// was started.
void print_ssh_failures(const Options& o, const launcher::LaunchResult& result) {
  launcher::CheckReport report{result.ssh_failures};
  if (o.json) {
    print_json(launcher::check_json(report));
  } else {
    fmt::print(stderr, "hvdrun: cannot reach every host over SSH; nothing was started.\n{}",
               launcher::format_check_table(report, false));
  }
}

// --check-net's JSON: the network check's document; with --check-ssh, both under
// "check_ssh" and "check_net". A check that stopped before probing has "error" instead.
nlohmann::ordered_json check_net_json(const std::optional<launcher::CheckReport>& ssh,
                                      const std::optional<launcher::LaunchResult>& result) {
  using json = nlohmann::ordered_json;
  json net = nullptr;
  if (result && result->net) {
    net = launcher::net_json(*result->net);
  } else if (result && result->ssh_failures.empty()) {
    net = {{"schema_version", launcher::kNetCheckSchemaVersion},
           {"ok", false},
           {"error", result->error ? error_json(*result->error) : json(nullptr)}};
  }
  json doc;
  if (ssh) {
    doc["check_ssh"] = launcher::check_json(*ssh);
  } else if (result && !result->ssh_failures.empty()) {
    doc["check_ssh"] = launcher::check_json(launcher::CheckReport{result->ssh_failures});
  } else {
    return net;
  }
  doc["check_net"] = std::move(net);
  return doc;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// --launcher: srun inside an allocation whose hosts hvdrun took from Slurm, else SSH.
launcher::AgentLaunch agent_launch(const Options& o, const launcher::Plan& plan) {
  if (o.agent_launch == "ssh") return launcher::AgentLaunch::kSsh;
  const bool in_allocation = std::getenv("SLURM_JOB_ID") != nullptr;
  if (o.agent_launch == "srun") {
    if (!in_allocation) {
      throw UsageError("--launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not set)",
                       "run hvdrun in salloc or an sbatch script, or use --launcher ssh");
    }
    return launcher::AgentLaunch::kSrun;
  }
  return plan.hosts_origin.kind == "slurm" && on_path("srun") ? launcher::AgentLaunch::kSrun
                                                              : launcher::AgentLaunch::kSsh;
}

launcher::LaunchOptions launch_options(const Options& o, const launcher::Plan& plan) {
  launcher::LaunchOptions options = launch_options(o);
  // Under --mpi (where --launcher is refused) the same choice says whether the network check's
  // agents and mpirun's daemons start through Slurm.
  options.agents = agent_launch(o, plan);
  if (o.elastic()) {
    const int np = static_cast<int>(plan.ranks.size());
    options.elastic = launcher::ElasticOptions{
        .min_np = o.min_np.value_or(np),
        .max_np = o.max_np.value_or(o.discovery_script ? launcher::kUnboundedNp : np),
        .reset_limit = o.reset_limit,
        .timeout = std::chrono::milliseconds(
            static_cast<long>(o.elastic_timeout_s.value_or(600.0) * 1000)),
        .failure_limit = o.host_failure_limit,
        .cooldown =
            o.blacklist_cooldown_given
                ? std::optional(std::pair{o.blacklist_cooldown.at(0), o.blacklist_cooldown.at(1)})
                : std::nullopt,
        .discovery_script = o.discovery_script,
        .discovery_interval =
            std::chrono::milliseconds(static_cast<long>(o.discovery_interval_s * 1000)),
        .slots_per_host = o.slots_per_host.value_or(1)};
  }
  return options;
}

// --check-net [--check-ssh]: the native launcher's agents start and probe each other; no rank
// starts.
int check_net(const Options& o, const launcher::Plan& plan) {
  std::optional<launcher::CheckReport> ssh;
  if (o.check_ssh) {
    ssh = run_check_ssh(o);
    if (!o.json) print_check_ssh(*ssh);
  }
  std::optional<launcher::LaunchResult> result;
  if (!ssh || ssh->ok()) {
    result = launcher::NativeLauncher(launch_options(o, plan)).check_network(plan);
  }
  if (o.json) print_json(check_net_json(ssh, result));
  if (!result) return to_int(exit_code_of(ErrorKind::kSsh));
  if (!o.json) {
    if (!result->ssh_failures.empty()) {
      print_ssh_failures(o, *result);
    } else if (result->net) {
      fmt::print(stderr, "{}", launcher::format_net_matrix(*result->net));
    }
    if (result->error && (!result->net || result->net->ok())) {
      fmt::print(stderr, "hvdrun: error: {}\n", result->error->message);
      if (!result->error->hint.empty()) {
        fmt::print(stderr, "hvdrun: hint: {}\n", result->error->hint);
      }
    }
  }
  return result->exit_code;
}

// What a launch prints: the SSH rows when it stopped there, else the failure report on stderr
// and (--json) the result document on stdout.
// --dry-run: the plan and what the launcher would run, as a table or JSON; nothing starts.
int dry_run(const Options& o, const launcher::Plan& plan, const launcher::Launcher& launcher,
            const launcher::RestartPolicy& policy) {
  const launcher::PlanOutputOptions output{.show_env_values = o.show_env_values,
                                           .show_env = o.verbose};
  const std::vector<launcher::LaunchCommand> commands = launcher.describe(plan);
  if (o.json) {
    nlohmann::ordered_json doc = launcher::plan_json(plan, output, launcher.name(), commands);
    doc["restarts"] = {{"max_restarts", policy.max_restarts},
                       {"backoff_seconds", policy.backoff_seconds},
                       {"host_failure_limit", o.host_failure_limit},
                       {"blacklist_cooldown_seconds", o.blacklist_cooldown}};
    if (o.elastic()) {
      const int np = static_cast<int>(plan.ranks.size());
      doc["elastic"] = {
          {"min_np", o.min_np.value_or(np)},
          {"max_np", o.max_np             ? nlohmann::ordered_json(*o.max_np)
                     : o.discovery_script ? nlohmann::ordered_json(nullptr)
                                          : nlohmann::ordered_json(np)},
          {"discovery_script", o.discovery_script ? nlohmann::ordered_json(*o.discovery_script)
                                                  : nlohmann::ordered_json(nullptr)},
          {"reset_limit", o.reset_limit ? nlohmann::ordered_json(*o.reset_limit)
                                        : nlohmann::ordered_json(nullptr)},
          {"elastic_timeout_seconds", o.elastic_timeout_s.value_or(600.0)},
          {"slot_cooldown_seconds", o.blacklist_cooldown_given
                                        ? nlohmann::ordered_json(o.blacklist_cooldown)
                                        : nlohmann::ordered_json(nullptr)}};
    }
    print_json(doc);
  } else {
    std::string text = launcher::format_plan_table(plan, output) +
                       launcher::format_launcher_commands(launcher.name(), commands);
    if (o.elastic()) {
      const int max_np = o.max_np.value_or(
          o.discovery_script ? launcher::kUnboundedNp : static_cast<int>(plan.ranks.size()));
      text += fmt::format(
          "\nelastic: a failed rank leaves the job and the others go on in a new generation "
          "while at least {} of the {} ranks remain (--min-np); {}; {}; {}\n",
          o.min_np.value_or(static_cast<int>(plan.ranks.size())), plan.ranks.size(),
          o.blacklist_cooldown_given
              ? fmt::format("a failed slot cools down for {:g}-{:g} s, then a new rank takes it",
                            o.blacklist_cooldown.at(0), o.blacklist_cooldown.at(1))
              : std::string("a failed slot is out for good (--blacklist-cooldown-range: a "
                            "cooldown)"),
          o.discovery_script
              ? fmt::format("hosts join and leave as {} lists them (every {:g} s){}",
                            *o.discovery_script, o.discovery_interval_s,
                            o.max_np ? fmt::format(", up to {} ranks (--max-np)", *o.max_np) : "")
          : max_np > static_cast<int>(plan.ranks.size())
              ? fmt::format("grows onto free slots up to {} ranks (--max-np)", max_np)
              : std::string("never above -np (--max-np)"),
          o.reset_limit ? fmt::format("at most {} such changes (--reset-limit)", *o.reset_limit)
                        : std::string("no limit on such changes"));
    }
    if (policy.enabled()) {
      text += fmt::format(
          "\nrestarts: up to {} (after a failed rank, a lost host, a failed network check, an "
          "SSH connection refused or timed out); waits {:g} s before the first, doubling, at "
          "most {:g} s; a host with {} failure(s) is blacklisted for {:g}-{:g} s\n",
          policy.max_restarts, policy.backoff_seconds, launcher::kMaxBackoffSeconds,
          o.host_failure_limit, o.blacklist_cooldown.at(0), o.blacklist_cooldown.at(1));
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return to_int(ExitCode::kSuccess);
}

int execute(const Options& o) {
  if (o.check_build) return check_build(o.json);
  if (o.check_ssh && !checking_net(o)) return check_ssh(o);
  const launcher::PlanRequest request = plan_request(o);
  if (!o.command.empty()) warn_if_command_looks_like_a_host(o);
  const AttemptContext context{
      .launch_options = [&o](const launcher::Plan& p) { return launch_options(o, p); },
      .new_job_id = random_job_id,
      .print_json = print_json};
  const launcher::RestartPolicy policy = restart_policy(o);
  launcher::Plan plan =
      launcher::make_plan(attempt_request(request, policy, 1, request.job_id, context),
                          launcher::local_identity(), launcher::current_environment());
  plan.warnings.insert(plan.warnings.begin(), o.warnings.begin(), o.warnings.end());
  for (const std::string& w : plan.warnings) spdlog::warn("{}", w);
  // Notices are defaults the user may want to change: said when the job starts; a dry run shows
  // them in its plan (--json: "notices") instead.
  if (!o.dry_run) {
    for (const std::string& n : plan.notices) spdlog::info("{}", n);
  }
  validate_elastic_plan(o, plan);
  if (o.output_ranks && !o.elastic()) {  // an elastic job may grow into more ranks
    const std::vector<int> shown = launcher::parse_rank_list(*o.output_ranks);
    const int np = static_cast<int>(plan.ranks.size());
    if (shown.back() >= np) {
      throw UsageError(fmt::format("--output-ranks {}: the job has no rank {} (its ranks are 0 "
                                   "to {})",
                                   *o.output_ranks, shown.back(), np - 1),
                       "list ranks below -np");
    }
  }

  if (o.blacklist_cooldown.at(0) > o.blacklist_cooldown.at(1)) {
    throw UsageError(fmt::format("--blacklist-cooldown-range {:g} {:g}: MIN is above MAX",
                                 o.blacklist_cooldown[0], o.blacklist_cooldown[1]),
                     "e.g. --blacklist-cooldown-range 10 300");
  }
  if (checking_net(o)) return check_net(o, plan);
  if (o.dry_run) {
    const auto launcher = launcher::make_launcher(o.launcher, launch_options(o, plan));
    // Native mode shows where each SSH session will go (the config's Port and User); mpirun's
    // ssh reads the config itself.
    launcher::Plan shown = plan;
    if (!o.mpi()) launcher::apply_ssh_config(shown, ssh_options(o));
    return dry_run(o, shown, *launcher, policy);
  }
  return run_attempts(o, request, context);
}

// Whether hvdrun's own options (not the command's) include --json, also when they do not parse.
bool asks_for_json(const std::vector<std::string>& args) {
  try {
    const CommandLine line = split_command_line(args);
    return std::find(line.own.begin(), line.own.end(), "--json") != line.own.end();
  } catch (const std::exception&) {
    return false;
  }
}

// The error's words on stderr; with --json also a document on stdout (when none was printed),
// so that a script that parses stdout gets the error and the exit code, not nothing.
int report_error(const std::vector<std::string>& args, ErrorKind kind, const std::string& what,
                 const std::string& hint) {
  fmt::print(stderr, "hvdrun: {}: {}\n", kind == ErrorKind::kInternal ? "internal error" : "error",
             what);
  if (!hint.empty()) fmt::print(stderr, "hvdrun: hint: {}\n", hint);
  const int code = to_int(exit_code_of(kind));
  if (!json_printed && asks_for_json(args)) {
    print_json({{"schema_version", launcher::kLaunchSchemaVersion},
                {"ok", false},
                {"exit_code", code},
                {"error", error_json(Failure{kind, what, hint})}});
  }
  return code;
}

}  // namespace

int run(int argc, char** argv) {
  // A peer that is gone (a ProxyCommand that exited, an agent's closed pipe, a closed stdout)
  // must be an EPIPE error the code reports, not a SIGPIPE that kills hvdrun with exit 141.
  // Children get SIGPIPE back at its default (common/process.h).
  ::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    const Options options = parse_options(args);
    setup_logging(options);
    return execute(options);
  } catch (const EarlyExit& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    return to_int(ExitCode::kSuccess);
  } catch (const Error& e) {
    return report_error(args, e.kind(), e.what(), e.hint());
  } catch (const std::exception& e) {
    return report_error(args, ErrorKind::kInternal, e.what(),
                        "this is a bug in hvdrun; please report it");
  }
}

}  // namespace hvd::cli
