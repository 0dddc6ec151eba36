#include "cli/app.h"

#include <fmt/format.h>
#include <pwd.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <regex>

#include "cli/options.h"
#include "common/error.h"
#include "launcher/plan.h"
#include "launcher/plan_output.h"

namespace hvd::cli {
namespace {

void setup_logging(const Options& o) {
  auto logger = spdlog::stderr_logger_st("hvdrun");
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

launcher::PlanRequest plan_request(const Options& o) {
  if (o.command.empty()) {
    throw UsageError("no command to run",
                     "put the program after hvdrun's options, e.g. hvdrun -np 2 ./train "
                     "--epochs 3");
  }
  launcher::PlanRequest request;
  if (o.hosts) request.hosts = launcher::parse_host_list(*o.hosts);
  if (o.hostfile) request.hosts = launcher::read_hostfile(*o.hostfile);
  request.num_proc = o.num_proc;
  request.oversubscribe = o.oversubscribe;
  request.ssh_port = o.ssh_port;
  request.default_user = current_user();
  for (const std::string& x : o.forward) {
    request.forward.push_back(launcher::parse_forward_spec(x));
  }
  request.command = o.command;
  request.job_id = random_job_id();
  return request;
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

int execute(const Options& o) {
  launcher::PlanRequest request = plan_request(o);
  warn_if_command_looks_like_a_host(o);
  const launcher::Plan plan =
      launcher::make_plan(request, launcher::local_identity(), launcher::current_environment());
  for (const std::string& w : plan.warnings) spdlog::warn("{}", w);

  if (!o.dry_run) {
    throw Error("starting ranks is not available in this build yet; only --dry-run is",
                "run with --dry-run to see the plan; native launch is being built "
                "(docs/cli.md)");
  }
  const launcher::PlanOutputOptions output{.show_env_values = o.show_env_values,
                                           .show_env = o.verbose};
  const std::string text =
      o.json ? launcher::format_plan_json(plan, output) : launcher::format_plan_table(plan, output);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return to_int(ExitCode::kSuccess);
}

void print_error(const std::string& kind, const std::string& what, const std::string& hint) {
  fmt::print(stderr, "hvdrun: {}: {}\n", kind, what);
  if (!hint.empty()) fmt::print(stderr, "hvdrun: hint: {}\n", hint);
}

}  // namespace

int run(int argc, char** argv) {
  try {
    const Options options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
    setup_logging(options);
    return execute(options);
  } catch (const EarlyExit& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    return to_int(ExitCode::kSuccess);
  } catch (const Error& e) {
    print_error(e.exit_code() == ExitCode::kUsage ? "error" : "internal error", e.what(), e.hint());
    return to_int(e.exit_code());
  } catch (const std::exception& e) {
    print_error("internal error", e.what(), "this is a bug in hvdrun; please report it");
    return to_int(ExitCode::kInternal);
  }
}

}  // namespace hvd::cli
