#include "cli/options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <utility>

#include "cli/config_file.h"
#include "cli/elastic_flags.h"
#include "cli/engine_flags.h"
#include "cli/flag_values.h"
#include "cli/horovod_flags.h"
#include "cli/option_checks.h"
#include "cli/option_table.h"
#include "common/error.h"
#include "common/port_range.h"
#include "hvd/build_config.h"
#include "launcher/registry.h"

namespace hvd::cli {
namespace {

// horovodrun/mpirun spellings CLI11 cannot take, and what they mean.
constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kSingleDashLong{{
    {"-np", "--num-proc"},
    {"-hostfile", "--hostfile"},
    {"-wd", "--wd"},
    {"-cb", "--check-build"},
    {"-prefix-timestamp", "--prefix-output-with-timestamp"},
}};

constexpr std::string_view kGraceZero = "SIGKILL right after SIGTERM";

// CLI11's messages name options by their long name; say it the way horovodrun users type it.
std::string cli11_message(const CLI::ParseError& e) {
  std::string text = e.what();
  if (const auto colon = text.find(": At Most 1 required but received"); colon != text.npos) {
    return text.substr(0, colon) + " was given more than once";
  }
  for (const auto& [alias, canonical] : kSingleDashLong) {
    const auto at = text.find(canonical);
    if (at != std::string::npos) {
      text.replace(at, canonical.size(), fmt::format("{}/{}", alias, canonical));
    }
  }
  return text;
}

// CLI11 2.1 has no usage override: its formatter's make_usage is the place to say that a
// command follows the options.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    std::string text;
    for (const std::string& line : usage_lines()) {
      text += (text.empty() ? "Usage: " : "       ") + line + "\n";
    }
    return text;
  }
  // The value's name only ("--max-restarts N"): CLI11 adds its validators and exclusions
  // ("N:INT in [0 - 1000]", "--mpi Excludes: --native"), which read as if the help were broken;
  // the descriptions and the errors say those.
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return "";
    const std::string name = opt->get_type_name();
    return name.empty() ? "" : " " + name.substr(0, name.find(':'));
  }
};

}  // namespace

void define_options(CLI::App& app, Options& o) {
  app.formatter(std::make_shared<HelpFormatter>());
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", fmt::format("hvdrun {}", HVD_VERSION_STRING),
                       "Print the version and exit (also -v), as horovodrun's -v; -v with anything "
                       "else is refused: --verbose is more detail");
  app.add_option_function<std::string>(
         "--num-proc", [&o](const std::string& v) { o.num_proc = parse_int("-np", v); },
         "Number of ranks (also -np). Default: all slots of the hosts, or 1")
      ->type_name("N");
  app.add_option("-H,--hosts", o.hosts,
                 "Hosts and slots: host[:slots],user@host[:slots],[ipv6][:slots]; "
                 "default localhost")
      ->type_name("LIST");
  app.add_option("--hostfile", o.hostfile,
                 "File of 'host slots=N [port=P] [user=U]' lines (also -hostfile)")
      ->type_name("FILE");
  app.add_flag("--oversubscribe", o.oversubscribe, "Allow more ranks than slots");
  app.add_option_function<std::string>(
         "-p,--ssh-port", [&o](const std::string& v) { o.ssh_port = parse_int("-p", v); },
         "SSH port for every host (hostfile port= wins)")
      ->type_name("PORT");
  app.add_option("-i,--ssh-identity-file", o.ssh_identity_file, "SSH private key to use")
      ->type_name("FILE");
  app.add_option("--ssh-config", o.ssh_config, "SSH client config file (like ssh -F)")
      ->type_name("FILE");
  app.add_option("--ssh-known-hosts", o.ssh_known_hosts,
                 "Known-hosts file (default: the user's ~/.ssh/known_hosts)")
      ->type_name("FILE");
  app.add_option("--ssh-host-key-policy", o.ssh_host_key_policy,
                 "accept-new (default: record unknown keys) or strict (unknown keys fail); a "
                 "changed key always fails")
      ->type_name("POLICY");
  app.add_option_function<std::string>(
         "--ssh-timeout",
         [&o](const std::string& v) { o.ssh_timeout_s = parse_seconds("--ssh-timeout", v); },
         "Seconds allowed per host for the whole SSH check (default 10)")
      ->type_name("SECONDS");
  app.add_option_function<std::string>(
         "--wait-for-hosts",
         [&o](const std::string& v) {
           o.wait_for_hosts_s = parse_seconds("--wait-for-hosts", v, "fail at once");
         },
         "Seconds to keep trying a host whose name does not resolve yet, that refuses the "
         "connection or does not answer it, with backoff (default 0: fail at once)")
      ->type_name("SECONDS");
  app.add_option_function<std::string>(
         "--ssh-concurrency",
         [&o](const std::string& v) { o.ssh_concurrency = parse_int("--ssh-concurrency", v); },
         "Hosts in SSH key exchange and authentication at once (default 16)")
      ->type_name("N");
  app.add_option("--agent-path", o.agent_path,
                 "Path of hvdrun on the hosts (default: this hvdrun's own path)")
      ->type_name("PATH");
  // The launcher flags, from the registry (launcher/registry.cpp): each chooses its launcher;
  // two that choose different launchers exclude each other.
  std::vector<std::pair<std::string_view, CLI::Option*>> chosen;  // launcher, its flag
  for (const launcher::LauncherEntry& e : launcher::launchers()) {
    for (const launcher::LauncherFlag& f : e.flags) {
      CLI::Option* flag = app.add_flag_callback(
          std::string(f.name), [&o, name = e.name] { o.launcher = std::string(name); },
          std::string(f.help));
      for (const auto& [other, other_flag] : chosen) {
        if (other != e.name) flag->excludes(other_flag);
      }
      chosen.emplace_back(e.name, flag);
    }
  }
  auto* agents = app.add_option("--launcher", o.agent_launch,
                                "How the native launch starts its agents: ssh (one SSH session "
                                "per host), srun (one Slurm step with a task per node, inside an "
                                "allocation), or auto (the default: srun when the hosts came from "
                                "the Slurm allocation and srun is on PATH, else ssh)")
                     ->type_name("auto|ssh|srun")
                     ->check(CLI::IsMember({"auto", "ssh", "srun"}));
  for (const auto& [name, flag] : chosen) {  // --launcher is the native launcher's
    if (name != "native") agents->excludes(flag);
  }
  app.add_option("--rsh-agent", o.rsh_agent,
                 "Start each host's agent with this command instead of SSH, e.g. 'kubectl exec "
                 "-i {host} --', 'docker exec -i {host}', 'ip netns exec {host}': split into "
                 "words (quotes honoured, never run through a shell), {host}, {user} and {port} "
                 "replaced (without {host} the host is appended), then hvdrun's agent command; "
                 "the job spec goes to its stdin (docs/rsh-agent.md)")
      ->type_name("TEMPLATE");
  app.add_option("--mpi-args", o.mpi_args,
                 "Extra mpirun options, split on spaces and appended as given (with --mpi); a -mca "
                 "parameter set here replaces hvdrun's own (plm_rsh_args excepted: use the SSH "
                 "options)")
      ->type_name("ARGS");
  app.add_flag("--check-ssh", o.check_ssh,
               "Diagnose SSH to every host and exit; no command needed (docs/check-ssh.md)");
  app.add_flag("--check-net", o.check_net,
               "Probe, from every host, the hosts and the launcher a job would reach (ring, "
               "rank 0's host, rendezvous) and exit; no command needed (docs/network.md)");
  app.add_flag("--check-net-full", o.check_net_full,
               "Probe every pair of hosts, before a launch or (without a command) as "
               "--check-net");
  app.add_option_function<std::string>(
         "--port-range",
         [&o](const std::string& v) { o.port_range = parse_port_range_flag("--port-range", v); },
         "Keep the ports hvdrun opens (rendezvous, probes, MASTER_PORT, libhvd's control "
         "plane) in LOW-HIGH, for firewalls (docs/network.md)")
      ->type_name("LOW-HIGH");
  app.add_flag("--check-build", o.check_build,
               "Print what this build supports and what works on this host now (MPI, Gloo, "
               "NCCL, CUDA, GPUs) and exit (also -cb)");
  app.add_option("-x", o.forward,
                 "Forward an environment variable to every rank: NAME, NAME=value or "
                 "'PREFIX_*' (repeatable). A value given as NAME=value is in hvdrun's own "
                 "command line, which every local user can read in /proc: for secrets, set "
                 "the variable and pass -x NAME")
      ->type_name("VAR")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--wd", o.working_dir,
                 "Working directory of the ranks on every host (also -wd); default: the current "
                 "directory")
      ->type_name("DIR");
  app.add_option_function<std::string>(
         "--grace",
         [&o](const std::string& v) { o.grace_s = parse_seconds("--grace", v, kGraceZero); },
         fmt::format("Seconds between SIGTERM and SIGKILL when hvdrun stops ranks (default {:g}; "
                     "0: SIGKILL right after SIGTERM)",
                     launcher::kDefaultGraceSeconds))
      ->type_name("SECONDS");
  app.add_option_function<std::string>(
         "--start-timeout",
         [&o](const std::string& v) { o.start_timeout_s = parse_seconds("--start-timeout", v); },
         fmt::format("Seconds for every agent to answer and every rank to start (default {:g})",
                     launcher::kDefaultStartTimeoutSeconds))
      ->type_name("SECONDS");
  app.add_option_function<std::string>(
         "--timeout",
         [&o](const std::string& v) {
           o.job_timeout_s = parse_seconds(
               "--timeout", v,
               {.zero = {},
                .max = 30 * 86400,
                .max_words = "30 days",
                .example = "e.g. --timeout 3600 stops the job after an hour (exit 124)"});
         },
         "Stop the job this long after it started, exit 124, and name the ranks still running "
         "with their last line (mpirun's --timeout; each restart gets it anew)")
      ->type_name("SECONDS");
  define_restart_and_elastic_flags(app, o);
  app.add_option_function<std::string>(
         "--keepalive",
         [&o](const std::string& v) { o.keepalive_s = parse_seconds("--keepalive", v, "never"); },
         fmt::format("Seconds a host's agent may stay silent while the job runs before the host "
                     "counts as lost (exit 74); hvdrun pings it three times per period, and an "
                     "agent that hears nothing for two periods stops its ranks (default {:g}; 0: "
                     "never)",
                     launcher::kDefaultKeepaliveSeconds))
      ->type_name("SECONDS");
  app.add_option("--output-filename", o.output_filename,
                 "Also write each rank's output, untagged, to DIR/rank.N/stdout and stderr")
      ->type_name("DIR");
  app.add_option("--record", o.record,
                 "Write the run's events (ranks' starts and ends, stalls, stragglers, restarts, "
                 "the result) to FILE as JSON lines, for scripts (docs/why.md)")
      ->type_name("FILE");
  app.add_flag("--dry-run", o.dry_run, "Print the launch plan and exit; touches no network");
  app.add_flag("--json", o.json, "Print the result as one JSON document on stdout");
  app.add_flag("--show-env-values", o.show_env_values,
               "Show -x values instead of <redacted> where the plan shows the environment "
               "(--dry-run --json, --dry-run -v)");
  app.add_flag("--verbose", o.verbose, "More detail: each rank's environment, debug logs");
  app.add_option_function<std::string>(
         "--log-level",
         [&o](const std::string& v) {
           o.log_level = log_level_name(v);
           o.log_level_given = true;
         },
         "hvdrun's and (as HOROVOD_LOG_LEVEL) libhvd's: trace, debug, info, warn, error or off, "
         "in any case; horovodrun's WARNING and FATAL too")
      ->type_name("LEVEL");
  define_engine_flags(app, o.knobs);
  define_horovod_flags(app, o);
  app.add_option("--config-file", o.config_file,
                 "horovodrun's YAML file of engine settings (controller, params, autotune, "
                 "timeline, stall_check, library_options, logging); flags on the command line win "
                 "over it")
      ->type_name("FILE");
  auto interfaces = [&o](const std::vector<std::string>& v) {
    for (const std::string& names : v) {
      o.network_interface = o.network_interface ? *o.network_interface + "," + names : names;
    }
  };
  app.add_option_function<std::vector<std::string>>(
         "--network-interface,--network-interfaces", interfaces,
         "Interfaces the ranks use, by name, first match per host (names may differ "
         "per host): eth1,ens5 (repeatable)")
      ->type_name("NAME[,NAME]")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--network-cidr", o.network_cidr,
                 "The ranks use each host's address inside this CIDR, whatever its NIC is "
                 "called")
      ->type_name("CIDR");
  app.add_option_function<std::string>(
         "--gpus-per-rank",
         [&o](const std::string& v) { o.gpus_per_rank = parse_int("--gpus-per-rank", v); },
         "Give each rank N GPUs of its host: CUDA_VISIBLE_DEVICES=local_rank*N..+N-1")
      ->type_name("N");
  app.footer(
      "The command and its arguments follow hvdrun's own options (or `--`) and are passed on "
      "untouched.\nExit codes: docs/exit-codes.md. Environment: docs/environment.md.");
}

namespace {

bool takes_value(const CLI::App& app, const std::string& name) {
  const CLI::Option* opt = app.get_option_no_throw(name);
  return opt != nullptr && opt->get_expected_min() > 0;
}

// How many words follow the option (2 for --blacklist-cooldown-range MIN MAX), 0 for a flag.
std::size_t values_of(const CLI::App& app, const std::string& name) {
  const CLI::Option* opt = app.get_option_no_throw(name);
  if (opt == nullptr || opt->get_expected_min() <= 0) return 0;
  return static_cast<std::size_t>(std::max(1, opt->get_items_expected_min()));
}

// Finds where hvdrun's options end, using `app` to know which options take a value.
CommandLine split_with(const CLI::App& app, const std::vector<std::string>& args) {
  CommandLine out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string token = args[i];
    if (token == "--") {
      ++i;
      break;
    }
    if (token.size() < 2 || token[0] != '-') break;  // the command starts here
    const auto eq = token.find('=');
    const std::string name = token.substr(0, eq);
    for (const auto& [alias, canonical] : kSingleDashLong) {
      if (name == alias) token = std::string(canonical) + token.substr(name.size());
    }
    out.own.push_back(token);
    if (token.starts_with("--")) {
      if (token.find('=') == std::string::npos) {
        for (std::size_t n = values_of(app, token); n > 0 && i + 1 < args.size(); --n) {
          out.own.push_back(args[++i]);
        }
      }
      continue;
    }
    // Short options: bundled flags (-vx VAR) or one with its value attached (-Ha:1).
    for (size_t k = 1; k < token.size(); ++k) {
      const std::string option = {'-', token[k]};
      if (takes_value(app, option)) {
        if (k + 1 == token.size() && i + 1 < args.size()) out.own.push_back(args[++i]);
        break;
      }
      if (app.get_option_no_throw(option) == nullptr) break;  // unknown: CLI11 reports it
    }
  }
  out.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

// horovodrun's -v is --version: alone it prints the version; with anything else it is refused,
// so that an old `hvdrun -v -np 4 ./train` (hvdrun's verbose, once) cannot print a version and
// exit 0 as if the job had passed.
void version_short_flag(const CLI::App& app, const CommandLine& line) {
  // "-v" alone, or first in a bundle of short options ("-vx FOO": -v, then -x FOO, once); not
  // an option's value (--mpi-args -v is mpirun's).
  bool given = false;
  for (size_t i = 0; i < line.own.size() && !given; ++i) {
    const std::string& t = line.own[i];
    if (t.starts_with("--")) {
      if (t.find('=') == std::string::npos) i += values_of(app, t);
    } else if (t.size() == 2 && t[0] == '-' && t[1] != 'v' && takes_value(app, t)) {
      ++i;  // -x VAR, -H LIST
    } else {
      given = t.size() >= 2 && t[0] == '-' && t[1] == 'v';
    }
  }
  if (!given) return;
  if (line.own == std::vector<std::string>{"-v"} && line.command.empty()) {
    throw EarlyExit{fmt::format("hvdrun {}\n", HVD_VERSION_STRING)};
  }
  throw UsageError(
      "-v is --version (horovodrun's meaning), but other options or a command "
      "were given",
      "use --verbose for more detail; hvdrun -v alone prints the version");
}

// --config-file's path among hvdrun's own tokens, if given.
std::optional<std::string> config_path(const std::vector<std::string>& own) {
  constexpr std::string_view kFlag = "--config-file";
  for (size_t i = 0; i < own.size(); ++i) {
    if (own[i] == kFlag && i + 1 < own.size()) return own[i + 1];
    if (own[i].starts_with(std::string(kFlag) + "=")) return own[i].substr(kFlag.size() + 1);
  }
  return std::nullopt;
}

bool on_command_line(const std::vector<std::string>& own, const std::vector<std::string>& flags) {
  return std::any_of(own.begin(), own.end(), [&](const std::string& token) {
    const std::string name = token.substr(0, token.find('='));
    return std::find(flags.begin(), flags.end(), name) != flags.end();
  });
}

// One setting of the file, parsed alone: a bad value is reported at its key's place.
void check_setting(const ConfigSetting& setting) {
  Options scratch;
  CLI::App app;
  define_options(app, scratch);
  std::vector<std::string> reversed(setting.args.rbegin(), setting.args.rend());
  auto located = [&](const std::string& message) {
    return fmt::format("{}: {}: {}", setting.where, setting.key, message);
  };
  try {
    app.parse(reversed);
  } catch (const UsageError& e) {
    throw UsageError(located(e.what()), e.hint());
  } catch (const CLI::ParseError& e) {
    throw UsageError(located(cli11_message(e)), "run 'hvdrun --help' for the flag it sets");
  }
}

// The file's settings, as the flags they stand for, in front of the command line's own: each
// one the command line does not give itself (horovodrun's rule: the command line wins).
void apply_config_file(CommandLine& line) {
  const auto path = config_path(line.own);
  if (!path) return;
  std::vector<std::string> from_file;
  for (const ConfigSetting& setting : load_config_file(*path)) {
    if (on_command_line(line.own, setting.conflicts)) continue;
    check_setting(setting);
    from_file.insert(from_file.end(), setting.args.begin(), setting.args.end());
  }
  line.own.insert(line.own.begin(), from_file.begin(), from_file.end());
}

}  // namespace

std::vector<std::string> usage_lines() {
  return {"hvdrun [OPTIONS] COMMAND [ARGS...]", "hvdrun --check-ssh [OPTIONS]",
          "hvdrun --check-net [--check-ssh] [--check-net-full] [OPTIONS]",
          "hvdrun --check-build [--json]", "hvdrun --dry-run [--json] [OPTIONS] COMMAND [ARGS...]"};
}

std::vector<std::pair<std::string, std::string>> single_dash_spellings() {
  return {kSingleDashLong.begin(), kSingleDashLong.end()};
}

CommandLine split_command_line(const std::vector<std::string>& args) {
  Options scratch;
  CLI::App app;
  define_options(app, scratch);
  return split_with(app, args);
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  CLI::App app("hvdrun: start a data-parallel training job on hosts reached over SSH", "hvdrun");
  define_options(app, o);

  CommandLine line = split_with(app, args);
  version_short_flag(app, line);
  apply_config_file(line);
  std::vector<std::string> reversed(line.own.rbegin(), line.own.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw EarlyExit{app.help()};
  } catch (const CLI::CallForVersion&) {
    throw EarlyExit{fmt::format("hvdrun {}\n", HVD_VERSION_STRING)};
  } catch (const CLI::ParseError& e) {
    throw UsageError(cli11_message(e), "run 'hvdrun --help' for the options");
  }
  o.command = std::move(line.command);
  o.host_failures.cooldown_given = app.count("--blacklist-cooldown-range") > 0;
  finish_horovod_flags(o);
  validate_options(o);
  return o;
}

}  // namespace hvd::cli
