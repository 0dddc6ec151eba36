#include "launcher/core/ssh_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ssh/check.h"
#include "ssh/config.h"
#include "ssh/session.h"

namespace hvd::launcher {
namespace {

constexpr std::string_view kRed = "\033[31m";
constexpr std::string_view kGreen = "\033[32m";
constexpr std::string_view kReset = "\033[0m";

ssh::HostCheck local_result(const HostSpec& host) {
  ssh::HostCheck r;
  r.host = host.host;
  r.port = 0;
  r.local = true;
  r.code = ssh::CheckCode::kOk;
  r.message = "local host: started without SSH";
  return r;
}

std::string_view host_key_text(ssh::HostKeyOutcome outcome) {
  switch (outcome) {
    case ssh::HostKeyOutcome::kKnown:
      return "known";
    case ssh::HostKeyOutcome::kRecorded:
      return "recorded";
    case ssh::HostKeyOutcome::kNotChecked:
      break;
  }
  return "";
}

}  // namespace

bool CheckReport::ok() const { return failures() == 0; }

size_t CheckReport::failures() const {
  return static_cast<size_t>(
      std::count_if(hosts.begin(), hosts.end(), [](const ssh::HostCheck& r) { return !r.ok(); }));
}

CheckReport run_ssh_check(const std::vector<HostSpec>& hosts, const ssh::SshOptions& options,
                          const LocalIdentity& self) {
  std::vector<ssh::SshTarget> targets;
  std::vector<size_t> remote_index;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (is_local_host(hosts[i].host, self)) continue;
    targets.push_back({hosts[i].host, hosts[i].port, hosts[i].user});
    remote_index.push_back(i);
  }
  std::vector<ssh::HostCheck> remote = ssh::check_hosts(targets, options);

  CheckReport report;
  size_t next_remote = 0;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (next_remote < remote_index.size() && remote_index[next_remote] == i) {
      report.hosts.push_back(std::move(remote[next_remote++]));
    } else {
      report.hosts.push_back(local_result(hosts[i]));
    }
  }
  return report;
}

std::string format_check_table(const CheckReport& report, bool colour) {
  size_t host_width = 4;
  for (const auto& r : report.hosts) host_width = std::max(host_width, r.host.size());
  std::string out = fmt::format("hvdrun --check-ssh: {} host{}, {} failed\n", report.hosts.size(),
                                report.hosts.size() == 1 ? "" : "s", report.failures());
  out += fmt::format("{:<{}}  {:>5}  {:<8}  {:<21}  {:>6}  {}\n", "host", host_width, "port",
                     "user", "result", "ms", "message");
  const std::string indent(host_width + 2, ' ');
  for (const auto& r : report.hosts) {
    const std::string code(ssh::to_string(r.code));
    const std::string shown = colour
                                  ? fmt::format("{}{:<21}{}", r.ok() ? kGreen : kRed, code, kReset)
                                  : fmt::format("{:<21}", code);
    out += fmt::format("{:<{}}  {:>5}  {:<8}  {}  {:>6}  {}\n", r.host, host_width,
                       r.local ? "-" : std::to_string(r.port), r.local ? "-" : r.user, shown,
                       r.elapsed.count(), r.message);
    if (!r.ok()) {
      if (!r.hint.empty()) out += fmt::format("{}hint: {}\n", indent, r.hint);
      if (!r.reproduce.empty()) out += fmt::format("{}reproduce: {}\n", indent, r.reproduce);
    }
  }
  return out;
}

nlohmann::ordered_json check_json(const CheckReport& report) {
  using json = nlohmann::ordered_json;
  json hosts = json::array();
  for (const auto& r : report.hosts) {
    json stages = json::array();
    for (const auto& s : r.stages) {
      stages.push_back({{"name", ssh::to_string(s.stage)},
                        {"ms", std::chrono::duration<double, std::milli>(s.elapsed).count()},
                        {"ok", s.ok}});
    }
    json host = {{"host", r.host},
                 {"port", r.local ? json(nullptr) : json(r.port)},
                 {"user", r.local ? json(nullptr) : json(r.user)},
                 {"address", r.address.empty() ? json(nullptr) : json(r.address)},
                 {"local", r.local},
                 {"code", ssh::to_string(r.code)},
                 {"message", r.message},
                 {"hint", r.hint},
                 {"reproduce", r.reproduce},
                 {"elapsed_ms", r.elapsed.count()},
                 {"stages", std::move(stages)}};
    if (const auto key = host_key_text(r.host_key); !key.empty()) host["host_key"] = key;
    if (r.remote) {
      host["remote"] = {{"hostname", r.remote->hostname},
                        {"boot_id", r.remote->boot_id},
                        {"agent",
                         {{"path", r.remote->agent_path},
                          {"present", r.remote->agent_present},
                          {"version", r.remote->agent_version}}}};
    } else {
      host["remote"] = nullptr;
    }
    hosts.push_back(std::move(host));
  }
  json doc;
  doc["schema_version"] = kCheckSchemaVersion;
  doc["ok"] = report.ok();
  doc["hosts"] = std::move(hosts);
  return doc;
}

void apply_ssh_config(Plan& plan, const ssh::SshOptions& options) {
  for (HostPlan& h : plan.hosts) {
    if (h.local) continue;
    ssh::Session session = ssh::new_session();
    const ssh::ResolvedTarget resolved =
        ssh::apply_config(session, {h.spec.host, h.spec.port, h.spec.user}, options);
    h.ssh_port = resolved.port;
    h.ssh_user = resolved.user;
  }
}

}  // namespace hvd::launcher
