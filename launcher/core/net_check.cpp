#include "launcher/core/net_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "launcher/plan/host_spec.h"

namespace hvd::launcher {
namespace {

constexpr const char* kSeeDetail =
    "see the detail; `hvdrun --check-net` repeats this check without starting a job";

using agent::ProbeStatus;

std::string to_name(const NetCheck& check, const ProbeRecord& p) {
  return p.to == ProbeRecord::kRendezvous ? "rendezvous" : check.endpoints.host[p.to];
}

std::string where(const ProbeRecord& p) {
  return fmt::format("{}:{}", format_host(p.address), p.port);
}

std::string result_text(const ProbeRecord& p) {
  if (!p.done) return "not run";
  return std::string(agent::probe_status_name(p.status));
}

std::string cell(const ProbeRecord& p) {
  if (p.ok()) return p.ms < 0.1 ? "ok <0.1ms" : fmt::format("ok {:.1f}ms", p.ms);
  return result_text(p);
}

std::string hint_to_rendezvous(const ProbeRecord& p, const std::string& from) {
  switch (p.status) {
    case ProbeStatus::kTimeout:
      return fmt::format(
          "a firewall drops {}'s connections to this machine's port {}: open it for the hosts, "
          "or keep hvdrun's ports in an open range with --port-range",
          from, p.port);
    case ProbeStatus::kNoRoute:
    case ProbeStatus::kRefused:
    case ProbeStatus::kWrongPeer:
      return fmt::format(
          "{} does not reach this machine at {} (the address its SSH connection came from): "
          "with NAT or a jump host in the SSH path, run hvdrun on a machine the hosts reach "
          "directly",
          from, p.address);
    default:
      return kSeeDetail;
  }
}

}  // namespace

bool NetCheck::ok() const { return failed() == 0; }

int NetCheck::failed() const {
  return static_cast<int>(
      std::count_if(probes.begin(), probes.end(), [](const ProbeRecord& p) { return !p.ok(); }));
}

std::vector<agent::ProbeTarget> NetCheck::targets_of(int from) const {
  std::vector<agent::ProbeTarget> out;
  for (size_t i = 0; i < probes.size(); ++i) {
    const ProbeRecord& p = probes[i];
    if (p.from != from) continue;
    out.push_back({.id = static_cast<int>(i),
                   .address = p.address,
                   .port = p.port,
                   .token = p.to == ProbeRecord::kRendezvous ? "" : endpoints.token[p.to]});
  }
  return out;
}

void NetCheck::record(int from, const std::vector<agent::ProbeOutcome>& outcomes) {
  for (const agent::ProbeOutcome& o : outcomes) {
    if (o.id < 0 || static_cast<size_t>(o.id) >= probes.size() || probes[o.id].from != from) {
      throw Error(fmt::format("protocol error: a probe result for unknown probe {}", o.id));
    }
    ProbeRecord& p = probes[o.id];
    p.done = true;
    p.status = o.status;
    p.ms = o.ms;
    p.detail = o.detail;
  }
}

std::vector<ProbeRecord> plan_probes(const ProbeEndpoints& e, bool full) {
  const int n = static_cast<int>(e.host.size());
  std::vector<ProbeRecord> out;
  auto add = [&](int from, int to, std::string purpose) {
    ProbeRecord p;
    p.from = from;
    p.to = to;
    p.purpose = std::move(purpose);
    p.address = to == ProbeRecord::kRendezvous ? e.rendezvous_address[from] : e.address[to];
    p.port = to == ProbeRecord::kRendezvous ? e.rendezvous_port : e.probe_port[to];
    out.push_back(std::move(p));
  };
  for (int from = 0; from < n; ++from) {
    if (n > 1 && full) {
      for (int to = 0; to < n; ++to) {
        if (to != from) add(from, to, "pair");
      }
    } else if (n > 1) {
      const int next = (from + 1) % n;
      add(from, next, next == 0 ? "ring+rank0" : "ring");
      if (from != 0 && next != 0) add(from, 0, "rank0");
    }
    add(from, ProbeRecord::kRendezvous, "rendezvous");
  }
  return out;
}

std::string probe_hint(const NetCheck& check, const ProbeRecord& p) {
  const std::string& from = check.endpoints.host[p.from];
  if (p.to == ProbeRecord::kRendezvous) return hint_to_rendezvous(p, from);
  const std::string& to = check.endpoints.host[p.to];
  const std::string choose =
      "choose an address on a network both share with --network-cidr or "
      "--network-interface";
  switch (p.status) {
    case ProbeStatus::kTimeout:
      return fmt::format(
          "a firewall drops TCP from {} to {}: allow it (every port the job uses; --port-range "
          "keeps hvdrun's own in one range), or {}",
          from, to, choose);
    case ProbeStatus::kRefused:
      return fmt::format(
          "a firewall on {} rejects {}, or {} is not {}'s address as {} sees it (NAT): allow "
          "TCP from {} to {}, or {}",
          to, from, p.address, to, from, from, to, choose);
    case ProbeStatus::kNoRoute:
      return fmt::format(
          "{} has no route to {}: that address is on a network {} is not on (a docker0, "
          "bridge or VPN address?); {}",
          from, p.address, from, choose);
    case ProbeStatus::kReset:
      return fmt::format(
          "a firewall or middlebox between {} and {} resets the connection: "
          "allow TCP from {} to {}",
          from, to, from, to);
    case ProbeStatus::kWrongPeer:
      return fmt::format(
          "{} leads to another machine or service when {} connects (NAT, port forwarding, or "
          "an address like docker0's that several hosts have); choose an address unique to {} "
          "with --network-cidr or --network-interface",
          p.address, from, to);
    default:
      return kSeeDetail;
  }
}

std::string net_failure_message(const NetCheck& check) {
  const auto first = std::find_if(check.probes.begin(), check.probes.end(),
                                  [](const ProbeRecord& p) { return !p.ok(); });
  if (first == check.probes.end()) return "";
  const ProbeRecord& p = *first;
  const std::string target = p.to == ProbeRecord::kRendezvous
                                 ? "this machine's rendezvous server"
                                 : fmt::format("host {}", check.endpoints.host[p.to]);
  const int more = check.failed() - 1;
  return fmt::format(
      "network check failed: host {} cannot reach {} at {} ({}{}{}){}",
      check.endpoints.host[p.from], target, where(p), result_text(p), p.detail.empty() ? "" : ": ",
      p.detail,
      more > 0 ? fmt::format("; {} more probe{} failed", more, more == 1 ? "" : "s") : "");
}

std::string format_net_failures(const NetCheck& check) {
  std::vector<const ProbeRecord*> failed;
  for (const ProbeRecord& p : check.probes) {
    if (!p.ok()) failed.push_back(&p);
  }
  if (failed.empty()) return "";
  size_t wf = 4, wt = 2, wa = 12;
  for (const ProbeRecord* p : failed) {
    wf = std::max(wf, check.endpoints.host[p->from].size());
    wt = std::max(wt, to_name(check, *p).size());
    wa = std::max(wa, where(*p).size());
  }
  std::string out = fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}\n", "FROM", wf, "TO", wt,
                                "ADDRESS:PORT", wa, "RESULT");
  for (const ProbeRecord* p : failed) {
    out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}{}{}\n", check.endpoints.host[p->from], wf,
                       to_name(check, *p), wt, where(*p), wa, result_text(*p),
                       p->detail.empty() ? "" : ": ", p->detail);
    out += fmt::format("      hint: {}\n", probe_hint(check, *p));
  }
  return out;
}

std::string format_net_matrix(const NetCheck& check) {
  const ProbeEndpoints& e = check.endpoints;
  const size_t n = e.host.size();
  std::string out =
      fmt::format("network check: {} host{}, {} probe{}, {} failed\n", n, n == 1 ? "" : "s",
                  check.probes.size(), check.probes.size() == 1 ? "" : "s", check.failed());
  size_t wh = 9;  // "FROM \ TO"
  for (const std::string& h : e.host) wh = std::max(wh, h.size());
  out += fmt::format("  {:<{}}  {:<15}  {:<6}  {}\n", "HOST", wh, "ADDRESS", "PROBE", "INTERFACE");
  for (size_t h = 0; h < n; ++h) {
    out += fmt::format("  {:<{}}  {:<15}  {:<6}  {}\n", e.host[h], wh, e.address[h],
                       e.probe_port[h], e.interface[h].empty() ? "-" : e.interface[h]);
  }
  // The matrix: one row per prober, one column per target host, then the rendezvous server.
  std::vector<std::vector<std::string>> cells(n, std::vector<std::string>(n + 1, "."));
  for (size_t h = 0; h < n; ++h) cells[h][h] = "-";
  for (const ProbeRecord& p : check.probes) {
    cells[p.from][p.to == ProbeRecord::kRendezvous ? n : static_cast<size_t>(p.to)] = cell(p);
  }
  size_t wc = std::max<size_t>(wh, 10);
  for (const auto& row : cells) {
    for (const std::string& c : row) wc = std::max(wc, c.size());
  }
  out += fmt::format("\n  {:<{}}", "FROM \\ TO", wh);
  for (size_t h = 0; h < n; ++h) out += fmt::format("  {:<{}}", e.host[h], wc);
  out += fmt::format("  {}\n", "rendezvous");
  for (size_t from = 0; from < n; ++from) {
    out += fmt::format("  {:<{}}", e.host[from], wh);
    for (size_t to = 0; to <= n; ++to) out += fmt::format("  {:<{}}", cells[from][to], wc);
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  if (!check.full && n > 2) {
    out += "  (.: not probed; --check-net-full probes every pair)\n";
  }
  if (!check.ok()) out += "\nfailed probes:\n" + format_net_failures(check);
  return out;
}

nlohmann::ordered_json net_json(const NetCheck& check) {
  using json = nlohmann::ordered_json;
  const ProbeEndpoints& e = check.endpoints;
  json hosts = json::array();
  for (size_t h = 0; h < e.host.size(); ++h) {
    hosts.push_back({{"host", e.host[h]},
                     {"address", e.address[h]},
                     {"interface", e.interface[h].empty() ? json(nullptr) : json(e.interface[h])},
                     {"probe_port", e.probe_port[h]}});
  }
  json probes = json::array();
  for (const ProbeRecord& p : check.probes) {
    probes.push_back({{"from", e.host[p.from]},
                      {"to", to_name(check, p)},
                      {"purpose", p.purpose},
                      {"address", p.address},
                      {"port", p.port},
                      {"result", result_text(p)},
                      {"ms", p.done ? json(p.ms) : json(nullptr)},
                      {"detail", p.detail},
                      {"hint", p.ok() ? json(nullptr) : json(probe_hint(check, p))}});
  }
  json doc;
  doc["schema_version"] = kNetCheckSchemaVersion;
  doc["ok"] = check.ok();
  doc["full"] = check.full;
  doc["failed"] = check.failed();
  doc["hosts"] = std::move(hosts);
  doc["rendezvous_port"] = e.rendezvous_port;
  doc["probes"] = std::move(probes);
  return doc;
}

}  // namespace hvd::launcher
