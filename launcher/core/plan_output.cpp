#include "launcher/core/plan_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/shell_quote.h"

namespace hvd::launcher {
namespace {

std::string ssh_target(const HostPlan& host) {
  if (host.local) return "- (local)";
  return fmt::format("{}@{}:{}", host.ssh_user, format_host(host.spec.host), host.ssh_port);
}

std::string forwarded_summary(const RankPlan& rank) {
  std::string names;
  int count = 0;
  for (const EnvEntry& e : rank.env) {
    if (e.source != EnvSource::kInherited && e.source != EnvSource::kExplicit &&
        e.source != EnvSource::kKnob) {
      continue;
    }
    names += (count++ == 0 ? "" : ", ") + e.name;
  }
  return count == 0 ? "none" : fmt::format("{} ({})", count, names);
}

// A launcher command's words as a shell would read them; "<set at launch: ...>" stays as is.
std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& w : argv) {
    if (!out.empty()) out += ' ';
    out += w.starts_with("<set at launch:") ? w : shell_quote(w);
  }
  return out;
}

}  // namespace

std::string format_launcher_commands(std::string_view launcher,
                                     const std::vector<LaunchCommand>& commands) {
  std::string out = fmt::format("\nlauncher: {}; it would run:\n", launcher);
  for (const LaunchCommand& c : commands) {
    out += fmt::format("  {}:\n    {}\n", c.where, command_text(c.argv));
  }
  return out;
}

bool is_placeholder(const EnvEntry& entry, const PlanOutputOptions& options) {
  return entry.secret || entry.deferred.has_value() ||
         (entry.source == EnvSource::kExplicit && !options.show_env_values);
}

std::string display_value(const EnvEntry& entry, const PlanOutputOptions& options) {
  if (entry.secret) return "<redacted>";
  if (entry.deferred) return fmt::format("<set at launch: {}>", entry.value);
  if (entry.source == EnvSource::kExplicit && !options.show_env_values) return "<redacted>";
  return entry.value;
}

std::string format_plan_table(const Plan& plan, const PlanOutputOptions& options) {
  std::string out = fmt::format(
      "hvdrun dry run: {} rank{} on {} host{} ({} slot{}); nothing is started.\n",
      plan.ranks.size(), plan.ranks.size() == 1 ? "" : "s", plan.hosts.size(),
      plan.hosts.size() == 1 ? "" : "s", plan.total_slots, plan.total_slots == 1 ? "" : "s");
  // Hosts the user did not type: say where they came from (JSON: always, as hosts_source).
  if (plan.hosts_origin.kind != "host_list" && plan.hosts_origin.kind != "localhost") {
    out += fmt::format("hosts from: {}\n", plan.hosts_origin.description);
  }
  out += fmt::format("command: {}\n\n", shell_join(plan.command));

  size_t host_width = 4;
  for (const HostPlan& h : plan.hosts) host_width = std::max(host_width, h.spec.host.size());
  out += fmt::format("{:>5}  {:<{}}  {:<6}  {:>10}  {:>10}  {:>10}  {:>10}  {}\n", "rank", "host",
                     host_width, "where", "local_rank", "local_size", "cross_rank", "cross_size",
                     "ssh");
  for (const RankPlan& r : plan.ranks) {
    const HostPlan& h = plan.hosts[r.host_index];
    const auto& t = r.topology;
    out += fmt::format("{:>5}  {:<{}}  {:<6}  {:>10}  {:>10}  {:>10}  {:>10}  {}\n", t.rank,
                       h.spec.host, host_width, h.local ? "local" : "remote", t.local_rank,
                       t.local_size, t.cross_rank, t.cross_size, ssh_target(h));
  }
  if (!plan.ranks.empty()) {
    out += fmt::format("\nforwarded to every rank: {}\n", forwarded_summary(plan.ranks.front()));
  }
  for (const std::string& n : plan.notices) out += fmt::format("notice: {}\n", n);
  if (!plan.forwarding_notice.empty()) out += fmt::format("notice: {}\n", plan.forwarding_notice);
  if (options.show_env) {
    for (const RankPlan& r : plan.ranks) {
      out += fmt::format("\nrank {} environment:\n", r.topology.rank);
      for (const EnvEntry& e : r.env) {
        const std::string value = display_value(e, options);
        out += fmt::format("  {}={}\n", e.name,
                           is_placeholder(e, options) ? value : shell_quote(value));
      }
    }
  }
  return out;
}

nlohmann::ordered_json plan_json(const Plan& plan, const PlanOutputOptions& options,
                                 std::string_view launcher,
                                 const std::vector<LaunchCommand>& commands) {
  using json = nlohmann::ordered_json;  // keys in the order written: schema_version first
  json hosts = json::array();
  for (const HostPlan& h : plan.hosts) {
    json host = {{"host", h.spec.host},      {"slots", h.spec.slots},
                 {"local", h.local},         {"first_rank", h.first_rank},
                 {"num_ranks", h.num_ranks}, {"origin", h.spec.origin}};
    host["ssh"] = h.local ? json(nullptr) : json{{"user", h.ssh_user}, {"port", h.ssh_port}};
    hosts.push_back(std::move(host));
  }
  json ranks = json::array();
  for (const RankPlan& r : plan.ranks) {
    json env = json::object();
    for (const EnvEntry& e : r.env) env[e.name] = display_value(e, options);
    const auto& t = r.topology;
    ranks.push_back({{"rank", t.rank},
                     {"host", plan.hosts[r.host_index].spec.host},
                     {"host_index", r.host_index},
                     {"local", plan.hosts[r.host_index].local},
                     {"local_rank", t.local_rank},
                     {"local_size", t.local_size},
                     {"cross_rank", t.cross_rank},
                     {"cross_size", t.cross_size},
                     {"env", std::move(env)}});
  }
  json doc;
  doc["schema_version"] = kPlanSchemaVersion;
  doc["mode"] = launcher;
  doc["dry_run"] = true;
  doc["np"] = plan.ranks.size();
  doc["total_slots"] = plan.total_slots;
  doc["job_id"] = plan.job_id;
  doc["command"] = plan.command;
  doc["hosts_source"] = {{"kind", plan.hosts_origin.kind},
                         {"description", plan.hosts_origin.description}};
  doc["hosts"] = std::move(hosts);
  doc["ranks"] = std::move(ranks);
  doc["warnings"] = plan.warnings;
  doc["notices"] = plan.notices;
  if (!plan.forwarding_notice.empty()) doc["notices"].push_back(plan.forwarding_notice);
  json launch = json::array();
  for (const LaunchCommand& c : commands) launch.push_back({{"where", c.where}, {"argv", c.argv}});
  doc["launcher_commands"] = std::move(launch);
  return doc;
}

}  // namespace hvd::launcher
