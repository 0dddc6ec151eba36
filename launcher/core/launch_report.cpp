#include "launcher/core/launch_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "launcher/core/ssh_check.h"

namespace hvd::launcher {
namespace {

// A rank's host: the one it was started on (elastic workers may be on hosts the plan lacks).
const std::string& host_name(const Plan& plan, const RankOutcome& r) {
  return r.host.empty() ? plan.hosts[static_cast<size_t>(r.host_index)].spec.host : r.host;
}

// The library the dynamic loader could not load, when a rank's exit 127 came from it (its
// stderr ends with "PROG: error while loading shared libraries: LIB: cannot open ..."), not
// from a shell that did not find the command.
std::optional<std::string> library_not_loaded(const RankOutcome& rank) {
  static constexpr std::string_view kLoader = "error while loading shared libraries: ";
  if (rank.signaled || rank.value != 127) return std::nullopt;
  for (const std::string& line : rank.last_stderr) {
    const auto at = line.find(kLoader);
    if (at == std::string::npos) continue;
    const std::string rest = line.substr(at + kLoader.size());
    return rest.substr(0, rest.find(':'));
  }
  return std::nullopt;
}

// A launch that stopped at SSH has no error of its own: its hosts' rows say what failed.
std::optional<Failure> launch_error(const LaunchResult& result) {
  if (result.error || result.ssh_failures.empty()) return result.error;
  std::vector<std::string> hosts;
  for (const ssh::HostCheck& h : result.ssh_failures) {
    hosts.push_back(fmt::format("{} ({})", h.host, ssh::to_string(h.code)));
  }
  return Failure{ErrorKind::kSsh,
                 fmt::format("cannot reach every host over SSH: {}; nothing was started",
                             fmt::join(hosts, ", ")),
                 "each host's row under check_ssh says why, what to do and the ssh command that "
                 "reproduces it; `hvdrun --check-ssh` runs the same check"};
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

std::string describe_exit(const RankOutcome& rank) {
  if (const auto library = library_not_loaded(rank)) {
    return fmt::format(
        "exited with code 127: the dynamic loader could not load {}, so the program never ran "
        "(fix: make the library findable on that host: forward its folder with -x "
        "LD_LIBRARY_PATH, or -x LD_LIBRARY_PATH=DIR, or link the program with an rpath, "
        "-Wl,-rpath,DIR)",
        *library);
  }
  if (!rank.signaled) return fmt::format("exited with code {}", rank.value);
  std::string text = fmt::format("was killed by signal {} ({}, exit code {}", rank.value,
                                 signal_name(rank.value), rank.exit_code());
  if (rank.value == SIGKILL) text += ": often the kernel's OOM killer; check `dmesg`";
  if (rank.value == SIGSEGV) text += ": a crash; a core dump or gdb will say where";
  return text + ")";
}

std::string format_failure_report(const Plan& plan, const LaunchResult& result) {
  std::string out;
  if (result.error) {
    out += fmt::format("hvdrun: error: {}\n", result.error->message);
    if (!result.error->hint.empty()) out += fmt::format("hvdrun: hint: {}\n", result.error->hint);
    if (result.net && !result.net->ok()) out += format_net_failures(*result.net);
  }
  if (result.first_failure) {
    const RankOutcome& r = result.ranks[*result.first_failure];
    int stopped = 0;
    for (const RankOutcome& o : result.ranks) stopped += o.stopped_by_hvdrun ? 1 : 0;
    out += fmt::format("hvdrun: rank {} (host {}, local rank {}) {}.\n", r.rank, host_name(plan, r),
                       r.local_rank, describe_exit(r));
    if (!result.elastic_end.empty()) {
      out += fmt::format("hvdrun: {}; hvdrun stopped {} other rank{}.\n", result.elastic_end,
                         stopped, stopped == 1 ? "" : "s");
    } else if (result.stopped_by != "hvdrun") {
      out += fmt::format("hvdrun: it was the first rank to fail; {} stopped the others.\n",
                         result.stopped_by);
    } else {
      out += fmt::format("hvdrun: it was the first rank to fail; hvdrun stopped {} other rank{}.\n",
                         stopped, stopped == 1 ? "" : "s");
    }
    if (r.last_stderr.empty()) {
      out += fmt::format("hvdrun: rank {} wrote nothing on stderr.\n", r.rank);
    } else {
      out += fmt::format("hvdrun: the last {} line{} of rank {}'s stderr:\n", r.last_stderr.size(),
                         r.last_stderr.size() == 1 ? "" : "s", r.rank);
      for (const std::string& line : r.last_stderr) out += "    " + line + "\n";
    }
  } else if (result.interrupted_by != 0) {
    out += fmt::format("hvdrun: interrupted by {}; {} ranks were stopped.\n",
                       signal_name(result.interrupted_by),
                       result.abandoned.empty() ? "all" : "the other");
  }
  if (!result.abandoned.empty()) {
    out += fmt::format(
        "hvdrun: not known to be stopped: the ranks on {}, whose agent did not answer; it stops "
        "them when it finds its link closed.\n",
        fmt::join(result.abandoned, ", "));
  }
  return out;
}

nlohmann::ordered_json timings_json(const LaunchResult& result) {
  using json = nlohmann::ordered_json;
  return {{"start", result.start_time ? json(result.start_time->count()) : json(nullptr)},
          {"total", result.total_time.count()}};
}

nlohmann::ordered_json launch_json(const Plan& plan, const LaunchResult& result) {
  using json = nlohmann::ordered_json;
  auto rank_json = [&](const RankOutcome& r) {
    return json{{"rank", r.rank},
                {"host", host_name(plan, r)},
                {"local_rank", r.local_rank},
                {"pid", r.started ? json(r.pid) : json(nullptr)},
                {"exit_code", r.exited && !r.signaled ? json(r.value) : json(nullptr)},
                {"signal", r.exited && r.signaled ? json(signal_name(r.value)) : json(nullptr)},
                {"stopped_by_hvdrun", r.stopped_by_hvdrun}};
  };
  // A launch that stopped before its ranks were set up (at SSH) has no outcomes: its planned
  // ranks, none started.
  std::vector<RankOutcome> planned;
  if (result.ranks.empty()) {
    for (const RankPlan& r : plan.ranks) {
      RankOutcome o;
      o.rank = r.topology.rank;
      o.host_index = r.host_index;
      o.local_rank = r.topology.local_rank;
      planned.push_back(o);
    }
  }
  const std::vector<RankOutcome>& outcomes = result.ranks.empty() ? planned : result.ranks;
  json ranks = json::array();
  for (const RankOutcome& r : outcomes) ranks.push_back(rank_json(r));
  json doc;
  doc["schema_version"] = kLaunchSchemaVersion;
  doc["ok"] = result.exit_code == 0;
  doc["exit_code"] = result.exit_code;
  doc["np"] = outcomes.size();
  doc["launcher"] = result.launcher;
  doc["launcher_command"] = result.command;
  if (result.first_failure) {
    const RankOutcome& r = result.ranks[*result.first_failure];
    json failure = rank_json(r);
    failure["description"] = describe_exit(r);
    if (!result.elastic_end.empty()) failure["elastic"] = result.elastic_end;
    failure["last_stderr"] =
        json(std::vector<std::string>(r.last_stderr.begin(), r.last_stderr.end()));
    doc["first_failure"] = std::move(failure);
  } else {
    doc["first_failure"] = nullptr;
  }
  const std::optional<Failure> error = launch_error(result);
  doc["error"] = error ? json{{"kind", kind_name(error->kind)},
                              {"message", error->message},
                              {"hint", error->hint}}
                       : json(nullptr);
  doc["interrupted_by"] =
      result.interrupted_by != 0 ? json(signal_name(result.interrupted_by)) : json(nullptr);
  doc["abandoned"] = result.abandoned;
  for (const auto& [key, value] : result.details.items()) doc[key] = value;
  // A launch that stopped at SSH: the hosts that failed, rows of --check-ssh's document.
  doc["check_ssh"] =
      result.ssh_failures.empty() ? json(nullptr) : check_json(CheckReport{result.ssh_failures});
  doc["net_check"] = result.net ? net_json(*result.net) : json(nullptr);
  doc["timings_ms"] = timings_json(result);
  doc["ranks"] = std::move(ranks);
  return doc;
}

}  // namespace hvd::launcher
