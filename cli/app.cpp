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

#include "cli/check_build.h"
#include "cli/engine_flags.h"
#include "cli/launch_setup.h"
#include "cli/option_checks.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/process.h"
#include "launcher/core/json_text.h"
#include "launcher/core/launch_report.h"
#include "launcher/core/launcher.h"
#include "launcher/core/net_check.h"
#include "launcher/core/output_router.h"
#include "launcher/core/plan_output.h"
#include "launcher/core/restarts.h"
#include "launcher/core/run_record.h"
#include "launcher/core/session.h"
#include "launcher/core/ssh_check.h"
#include "launcher/core/status_line.h"
#include "launcher/plan/discovery.h"
#include "launcher/plan/plan.h"
#include "launcher/plan/scheduler_hosts.h"
#include "launcher/registry.h"

namespace hvd::cli {
namespace {

// hvdrun's log lines on stderr, after the rank output already received (output_router.h) and
// clearing an elastic job's status line first (status_line.h).
class StatusAwareSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    launcher::before_own_console_line();
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

launcher::CheckReport run_check_ssh(const Options& o) {
  std::vector<launcher::HostSpec> hosts = hosts_source(o).hosts;
  if (hosts.empty()) {
    hosts.push_back({.host = "localhost", .port = {}, .user = {}, .origin = "default host"});
  }
  ssh::SshOptions options = ssh_options(o);
  // On a terminal (and not --json): a live line while the hosts answer, gone before the table.
  auto& status = launcher::StatusLine::get();
  const bool live = launcher::stderr_wants_status_line(o.json);
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
    result = launcher::check_network(launch_options(o), plan);
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

int execute(const Options& o) {
  if (o.check_build) return check_build(o.json);
  if (o.check_ssh && !checking_net(o)) return check_ssh(o);
  std::vector<std::string> warnings = o.warnings;
  if (auto moot = rsh_agent_warning(o)) warnings.push_back(*moot);
  // The session makes the first attempt's plan and checks it, with the launcher's own checks (-i
  // or --ssh-config not readable, --launcher srun outside an allocation), before anything is
  // printed: a refused command prints nothing but its error.
  launcher::Session session({.request = plan_request(o),
                             .launch = launch_options(o),
                             .restarts = o.restarts,
                             .make_launcher =
                                 [&o, own = launcher_options(o)](launcher::LaunchOptions options) {
                                   return launcher::make_launcher(o.launcher, std::move(options),
                                                                  own);
                                 },
                             .new_job_id = random_job_id,
                             .warnings = std::move(warnings)});
  const launcher::Plan& plan = session.plan();
  // One that goes on says its warnings and notices before anything else.
  if (!o.command.empty()) warn_if_command_looks_like_a_host(o);
  for (const std::string& w : plan.warnings) spdlog::warn("{}", w);
  // Notices are defaults the user may want to change: said when the job starts; a dry run shows
  // them in its plan (--json: "notices") instead.
  if (!o.dry_run) {
    for (const std::string& n : plan.notices) spdlog::info("{}", n);
    if (!plan.forwarding_notice.empty()) spdlog::debug("{}", plan.forwarding_notice);
  }
  if (checking_net(o)) return check_net(o, plan);
  if (o.dry_run) {
    // --dry-run: the plan and what the launcher would run, as a table or JSON; nothing starts.
    const launcher::PlanOutputOptions output{.show_env_values = o.show_env_values,
                                             .show_env = o.verbose};
    if (o.json) {
      print_json(session.describe_json(output));
    } else {
      const std::string text = session.describe_text(output);
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    return to_int(ExitCode::kSuccess);
  }
  // Opened once the plan is checked (a refused command leaves no file behind).
  const auto record = o.record ? launcher::RunRecord::open(*o.record) : nullptr;
  return session.run(o.json, print_json, record);
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
