#include "launcher/plan/plan.h"

#include <arpa/inet.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "common/error.h"
#include "contract/elastic.h"
#include "contract/env_table.h"
#include "launcher/plan/rank_defaults.h"

namespace hvd::launcher {
namespace {

std::string slots_summary(const std::vector<HostSpec>& hosts) {
  std::string out;
  for (const HostSpec& h : hosts) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}:{}", format_host(h.host), h.slots);
  }
  return out;
}

// Ranks per host: fill hosts in input order slot by slot; with oversubscribe, the ranks beyond
// the slots go round-robin over the hosts, one each.
std::vector<int> ranks_per_host(const std::vector<HostSpec>& hosts, int np) {
  std::vector<int> counts(hosts.size(), 0);
  int left = np;
  for (size_t i = 0; i < hosts.size() && left > 0; ++i) {
    counts[i] = std::min(hosts[i].slots, left);
    left -= counts[i];
  }
  for (size_t i = 0; left > 0; i = (i + 1) % hosts.size()) {
    ++counts[i];
    --left;
  }
  return counts;
}

EnvEntry entry(const contract::EnvVar& var, std::string value, EnvSource source) {
  return {std::string(var.name), std::move(value), source, std::nullopt, false};
}

EnvEntry deferred(const contract::EnvVar& var, Deferred what, std::string in_words,
                  EnvSource source) {
  return {std::string(var.name), std::move(in_words), source, what, false};
}

// An IPv4 or IPv6 address, not a name (HostSpec::host holds IPv6 without its brackets).
bool is_address(const std::string& host) {
  in6_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

// The address other hosts use for `host`, when the plan can know it: a remote host written as
// an address. Deferred otherwise, and learnt at launch from the host's SSH_CONNECTION: a local
// host in a job with remote ones (this machine as they reach it), and a remote host written as a
// name (an ssh_config alias need not resolve anywhere, and a hostname may resolve to 127.0.1.1
// on its own host), which gets the address its SSH connection arrived at.
std::optional<std::string> reachable_address(const HostPlan& host, bool all_local) {
  if (!host.local) return is_address(host.spec.host) ? std::optional(host.spec.host) : std::nullopt;
  if (all_local) return std::string("127.0.0.1");
  return std::nullopt;
}

std::vector<EnvEntry> rank_env(const contract::RankPlacement& placement, const Plan& plan,
                               bool all_local, const ForwardResult& forwarded,
                               const std::vector<std::pair<std::string, std::string>>& knobs,
                               std::optional<int> gpus_per_rank, const PortRange& port_range) {
  using contract::EnvVar;
  std::vector<EnvEntry> env;
  for (auto& [name, value] : contract::topology_env(placement)) {
    env.push_back({name, value, EnvSource::kPerRank, std::nullopt, false});
  }
  const HostPlan& host = plan.hosts[placement.host_index];
  env.push_back(entry(contract::kHorovodHostname, host.spec.host, EnvSource::kPerRank));

  const auto master = reachable_address(plan.hosts.front(), all_local);
  env.push_back(master ? entry(contract::kMasterAddr, *master, EnvSource::kPerRank)
                       : deferred(contract::kMasterAddr, Deferred::kMasterAddr,
                                  plan.hosts.front().local
                                      ? "the launcher's address as the other hosts reach it"
                                      : "the address rank 0's host was reached at over SSH",
                                  EnvSource::kPerRank));
  env.push_back(deferred(contract::kMasterPort, Deferred::kMasterPort,
                         "a free port on rank 0's host", EnvSource::kPerRank));

  env.push_back(deferred(contract::kRendezvousAddr, Deferred::kRendezvousAddr,
                         "the launcher's rendezvous server", EnvSource::kInternal));
  EnvEntry token = deferred(contract::kRendezvousToken, Deferred::kRendezvousToken,
                            "a random per-job token", EnvSource::kInternal);
  token.secret = true;
  env.push_back(token);
  env.push_back(entry(contract::kJobId, plan.job_id, EnvSource::kInternal));
  const auto advertise = reachable_address(host, all_local);
  env.push_back(advertise ? entry(contract::kAdvertiseAddr, *advertise, EnvSource::kInternal)
                          : deferred(contract::kAdvertiseAddr, Deferred::kAdvertiseAddr,
                                     "this host's address as the other hosts reach it",
                                     EnvSource::kInternal));

  if (!port_range.any()) {
    env.push_back(entry(contract::kPortRange, port_range.text(), EnvSource::kInternal));
  }

  for (const ForwardedVar& var : forwarded.vars) {
    if (std::any_of(knobs.begin(), knobs.end(),
                    [&](const auto& k) { return k.first == var.name; })) {
      continue;  // an hvdrun flag sets it
    }
    env.push_back({var.name, var.value,
                   var.explicit_spec ? EnvSource::kExplicit : EnvSource::kInherited, std::nullopt,
                   false});
  }
  if (plan.network.active()) {
    // Chosen per host once its agent lists its interfaces (launcher/plan/network_choice.h).
    const std::string how =
        plan.network.cidr
            ? fmt::format("in {}", plan.network.cidr->text)
            : fmt::format("on the first of {} it has", fmt::join(plan.network.interfaces, ","));
    for (EnvEntry& e : env) {
      if (e.name == contract::kAdvertiseAddr.name) {
        e = deferred(contract::kAdvertiseAddr, Deferred::kAdvertiseAddr,
                     "this host's address " + how, EnvSource::kInternal);
      } else if (e.name == contract::kMasterAddr.name) {
        e = deferred(contract::kMasterAddr, Deferred::kMasterAddr, "rank 0's host's address " + how,
                     EnvSource::kPerRank);
      }
    }
    for (const contract::EnvVar* var :
         {&contract::kNcclSocketIfname, &contract::kGlooIface, &contract::kGlooSocketIfname}) {
      std::erase_if(env, [&](const EnvEntry& e) { return e.name == var->name; });
      env.push_back(deferred(*var, Deferred::kInterfaceName,
                             "the interface of this host's chosen address", EnvSource::kPerRank));
    }
  }
  // Defaults for what ranks commonly run, unless the user set them (forwarded above):
  // rank_defaults.h, the one writer of these rules.
  const auto is_set = [&](std::string_view name) {
    return std::any_of(env.begin(), env.end(), [&](const EnvEntry& e) { return e.name == name; });
  };
  for (auto& [name, value] : rank_defaults(placement.topology.local_size, is_set)) {
    env.push_back({name, value, EnvSource::kPerRank, std::nullopt, false});
  }
  if (gpus_per_rank) {
    std::erase_if(env,
                  [](const EnvEntry& e) { return e.name == contract::kCudaVisibleDevices.name; });
    env.push_back(entry(contract::kCudaVisibleDevices,
                        cuda_visible_devices(placement.topology.local_rank, *gpus_per_rank),
                        EnvSource::kPerRank));
  }
  for (size_t i = 0; i < knobs.size(); ++i) {
    const bool later = std::any_of(knobs.begin() + static_cast<std::ptrdiff_t>(i) + 1, knobs.end(),
                                   [&](const auto& k) { return k.first == knobs[i].first; });
    if (!later) {
      env.push_back({knobs[i].first, knobs[i].second, EnvSource::kKnob, std::nullopt, false});
    }
  }
  return env;
}

// The ports of --port-range one machine needs (docs/network.md, "Firewalls"): on the launcher's
// machine its rendezvous server and one probe listener per local host entry; on a remote host
// one listener per entry with that name; and on rank 0's host one more for libhvd's control
// plane (MASTER_PORT is rank 0's host's probe port). Entries that turn out to be one machine
// (same boot id) are known only at launch, which then names the range that ran out.
int ports_needed(const Plan& plan) {
  std::map<std::string, int> per_machine;  // "" is the launcher's machine
  per_machine[""] = 1;
  for (size_t i = 0; i < plan.hosts.size(); ++i) {
    const HostPlan& h = plan.hosts[i];
    per_machine[h.local ? std::string() : h.spec.host] += i == 0 ? 2 : 1;
  }
  int most = 0;
  for (const auto& [machine, ports] : per_machine) most = std::max(most, ports);
  return most;
}

// A range too small for the plan fails before anything starts, with the number it needs.
void check_port_range(const Plan& plan, const PortRange& range) {
  if (range.any()) return;
  const int needed = ports_needed(plan);
  const int size = range.high - range.low + 1;
  if (size >= needed) return;
  const int low = std::min(range.low, 65536 - needed);
  throw UsageError(
      fmt::format("--port-range {} has {} port{}; this job needs {} on one machine", range.text(),
                  size, size == 1 ? "" : "s", needed),
      fmt::format("widen it to at least {} ports, e.g. --port-range {}-{}: the launcher's "
                  "rendezvous server takes one, each host entry one (its network probes; rank 0's "
                  "host hands it to the job as MASTER_PORT), and rank 0's host one more for "
                  "libhvd's control plane; entries on one machine share its range "
                  "(docs/network.md)",
                  needed, low, low + needed - 1));
}

}  // namespace

bool is_local_host(std::string_view host, const LocalIdentity& self) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  if (!self.hostname.empty() && host == self.hostname) return true;
  return std::find(self.addresses.begin(), self.addresses.end(), host) != self.addresses.end();
}

Plan make_plan(const PlanRequest& request, const LocalIdentity& self, const EnvList& launcher_env) {
  std::vector<HostSpec> hosts = request.hosts;
  if (hosts.empty()) {
    hosts.push_back({.host = "localhost",
                     .slots = request.num_proc.value_or(1),
                     .port = std::nullopt,
                     .user = std::nullopt,
                     .origin = "default host"});
  }
  Plan plan;
  plan.command = request.command;
  plan.job_id = request.job_id;
  plan.hosts_origin = request.hosts_origin;
  plan.network = request.network;
  plan.total_slots = std::accumulate(hosts.begin(), hosts.end(), 0,
                                     [](int sum, const HostSpec& h) { return sum + h.slots; });
  const int np = request.num_proc.value_or(plan.total_slots);
  if (np < 1) {
    throw UsageError(fmt::format("-np {}: a job needs at least 1 process", np),
                     "give -np 1 or more, or leave it out to use every slot");
  }
  if (np > plan.total_slots && !request.oversubscribe) {
    const bool scheduled = request.hosts_origin.kind != "host_list" &&
                           request.hosts_origin.kind != "hostfile" &&
                           request.hosts_origin.kind != "localhost";
    throw UsageError(
        fmt::format("-np {} is more than the {} slots of {} ({})", np, plan.total_slots,
                    scheduled ? request.hosts_origin.description : "the hosts",
                    slots_summary(hosts)),
        scheduled ? "lower -np, ask the scheduler for more tasks, or allow it with --oversubscribe"
                  : "lower -np, give the hosts more slots (host:N), or allow it with "
                    "--oversubscribe");
  }

  const std::vector<int> counts = ranks_per_host(hosts, np);
  std::vector<int> used_counts;
  std::vector<std::string> unused;
  int next_rank = 0;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (counts[i] == 0) {
      unused.push_back(format_host(hosts[i].host));
      plan.unused_hosts.push_back(hosts[i]);
      continue;
    }
    HostPlan host;
    host.spec = hosts[i];
    host.local = is_local_host(hosts[i].host, self);
    host.ssh_port = hosts[i].port.value_or(request.ssh_port.value_or(kDefaultSshPort));
    host.ssh_user = hosts[i].user.value_or(request.default_user);
    host.first_rank = next_rank;
    host.num_ranks = counts[i];
    next_rank += counts[i];
    plan.hosts.push_back(std::move(host));
    used_counts.push_back(counts[i]);
  }
  // The hosts without a rank, named up to a few dozen (a discovery may list thousands).
  constexpr size_t kNamedUnused = 32;
  const std::string unused_text =
      unused.size() <= kNamedUnused
          ? fmt::format("{}", fmt::join(unused, ", "))
          : fmt::format("{} and {} more",
                        fmt::join(unused.begin(), unused.begin() + kNamedUnused, ", "),
                        unused.size() - kNamedUnused);
  if (!unused.empty() && request.elastic) {
    // Not a mistake in an elastic job: it may grow onto them (--max-np, a discovery script).
    plan.notices.push_back(fmt::format("-np {} starts on {} of {} slots; no rank on {} yet", np, np,
                                       plan.total_slots, unused_text));
  } else if (!unused.empty()) {
    plan.warnings.push_back(fmt::format("-np {} uses {} of {} slots; no rank on: {}", np, np,
                                        plan.total_slots, unused_text));
  }
  if (np > plan.total_slots) {
    plan.warnings.push_back(
        fmt::format("--oversubscribe: {} ranks on {} slots", np, plan.total_slots));
  }

  const bool all_local =
      std::all_of(plan.hosts.begin(), plan.hosts.end(), [](const HostPlan& h) { return h.local; });
  ForwardResult forwarded = forward_environment(request.forward, launcher_env);
  plan.warnings.insert(plan.warnings.end(), forwarded.warnings.begin(), forwarded.warnings.end());
  if (forwarded.invalid_names > 0) {
    plan.forwarding_notice = fmt::format(
        "-x '*': {} entr{} of hvdrun's environment skipped: not variable names (e.g. bash's "
        "exported functions, BASH_FUNC_name%%)",
        forwarded.invalid_names, forwarded.invalid_names == 1 ? "y" : "ies");
  } else if (forwarded.not_forwarded > 0 && !forwarded.everything) {
    plan.forwarding_notice = fmt::format(
        "{} variable{} of hvdrun's environment {} not forwarded to the ranks (only PATH, "
        "LD_LIBRARY_PATH, PYTHONPATH, CUDA_*, NCCL_*, HOROVOD_*, OMP_* and -x are): -x NAME "
        "forwards one, -x '*' every one but this session's (as horovodrun)",
        forwarded.not_forwarded, forwarded.not_forwarded == 1 ? "" : "s",
        forwarded.not_forwarded == 1 ? "is" : "are");
  }
  for (const contract::RankPlacement& placement : contract::compute_topology(used_counts)) {
    plan.ranks.push_back({placement.host_index, placement.topology,
                          rank_env(placement, plan, all_local, forwarded, request.knobs,
                                   request.gpus_per_rank, request.port_range)});
    if (request.elastic) {
      // Generation 0: each process's worker id is its rank; the channel is set up by the agent.
      std::vector<EnvEntry>& env = plan.ranks.back().env;
      env.push_back(entry(contract::kHorovodElastic, "1", EnvSource::kPerRank));
      env.push_back(entry(contract::kElasticFd, std::to_string(contract::kElasticChannelFd),
                          EnvSource::kInternal));
      env.push_back(entry(contract::kElasticWorker, std::to_string(placement.topology.rank),
                          EnvSource::kInternal));
      env.push_back(entry(contract::kElasticGeneration, "0", EnvSource::kInternal));
    }
  }
  plan.elastic = request.elastic;
  plan.gpus_per_rank = request.gpus_per_rank;
  // The notice says what rank_env decided: the first rank it gave OMP_NUM_THREADS=1.
  const auto defaulted = std::find_if(plan.ranks.begin(), plan.ranks.end(), [](const RankPlan& r) {
    return std::any_of(r.env.begin(), r.env.end(), [](const EnvEntry& e) {
      return e.name == contract::kOmpNumThreads.name && e.source == EnvSource::kPerRank;
    });
  });
  if (defaulted != plan.ranks.end()) {
    const HostPlan& crowded = plan.hosts[static_cast<size_t>(defaulted->host_index)];
    plan.notices.push_back(fmt::format(
        "OMP_NUM_THREADS=1 for every rank, as torchrun does: {} ranks share {} and OMP_NUM_THREADS "
        "is not set (ranks with a thread per core each would overload its cores); set it, or "
        "-x OMP_NUM_THREADS=N, to choose",
        crowded.num_ranks, format_host(crowded.spec.host)));
  }
  check_port_range(plan, request.port_range);
  return plan;
}

}  // namespace hvd::launcher
