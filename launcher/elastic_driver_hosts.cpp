// ElasticDriver's hosts (elastic_driver.h): what the host discovery lists, the agents started
// on them, and the failures charged to hosts and slots (out for good at --host-failure-limit, or
// cooled down with --blacklist-cooldown-range). The generations are in elastic_driver.cpp.
#include "launcher/elastic_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/plural.h"

namespace hvd::launcher {

void ElasticDriver::refresh_pool() {
  pool_.clear();
  for (const PoolHost& h : discovered_) {
    if (with_agent_.count(h.host) != 0) pool_.push_back(h);
  }
}

// Whether a slot ("host#slot") or a host is charged out now.
bool ElasticDriver::charged_out(const std::string& key, Clock::time_point now) const {
  if (policy_.cooldown) return health_.blacklisted(key, now);
  const auto it = failures_.find(key);
  return it != failures_.end() && it->second >= policy_.failure_limit;
}

bool ElasticDriver::host_out(const std::string& host, Clock::time_point now) const {
  return charged_out(host, now);
}

// One failure against `key` (a slot, "host#slot", or a host; `kind` says which); the log line
// when it is charged out by it. `why`: what failed, for a host (its slots' failures are named in
// the generation's line).
void ElasticDriver::charge(const char* kind, const std::string& key, const std::string& why,
                           Clock::time_point now, std::vector<ElasticAction>& out) {
  const bool warning = !why.empty();
  if (policy_.cooldown) {
    const double jitter = policy_.jitter ? policy_.jitter() : 0.0;
    if (const auto cooldown = health_.record_failure(key, now, jitter)) {
      out.push_back(
          elastic_action::Log{fmt::format("elastic: {} {} cools down for {:.1f} s{}", kind, key,
                                          std::chrono::duration<double>(*cooldown).count(),
                                          why.empty() ? "" : " (" + why + ")"),
                              warning});
    }
    return;
  }
  if (++failures_[key] == policy_.failure_limit) {
    out.push_back(elastic_action::Log{
        fmt::format("elastic: {} {} is out for good ({}--blacklist-cooldown-range gives it a "
                    "cooldown)",
                    kind, key, why.empty() ? "" : why + "; "),
        warning});
  }
}

void ElasticDriver::charge_host(const std::string& host, const std::string& why,
                                Clock::time_point now, std::vector<ElasticAction>& out) {
  charge("host", host, why, now, out);
}

// An agent is started on a listed host only when the job could grow onto it: while the slots
// of the hosts with an agent (or one on its way) are fewer than --max-np.
void ElasticDriver::request_agents(Clock::time_point now, std::vector<ElasticAction>& out) {
  if (done_ || finishing_) return;
  int slots = 0;
  for (const PoolHost& h : discovered_) {
    if ((with_agent_.count(h.host) != 0 || joining_.count(h.host) != 0) && !host_out(h.host, now)) {
      slots += h.slots;
    }
  }
  for (const PoolHost& h : discovered_) {
    if (slots >= policy_.max_np) return;
    if (with_agent_.count(h.host) != 0 || joining_.count(h.host) != 0 || host_out(h.host, now)) {
      continue;
    }
    joining_.insert(h.host);
    slots += h.slots;
    out.push_back(elastic_action::StartAgent{h.host});
  }
}

std::vector<ElasticAction> ElasticDriver::on_discovered(const std::vector<PoolHost>& hosts,
                                                        Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_) return {};
  const auto listed = [&](const std::vector<PoolHost>& in, const std::string& host) {
    return std::find_if(in.begin(), in.end(), [&](const PoolHost& p) { return p.host == host; });
  };
  // Horovod's order: hosts already known keep their places, new ones follow in output order.
  std::vector<PoolHost> order;
  std::vector<std::string> added, removed;
  for (const PoolHost& h : discovered_) {
    if (const auto it = listed(hosts, h.host); it != hosts.end()) {
      order.push_back(*it);
    } else {
      removed.push_back(h.host);
    }
  }
  for (const PoolHost& h : hosts) {
    if (listed(order, h.host) == order.end()) {
      order.push_back(h);
      added.push_back(h.host);
    }
  }
  const bool slots_changed =
      std::any_of(discovered_.begin(), discovered_.end(), [&](const PoolHost& h) {
        const auto it = listed(hosts, h.host);
        return it != hosts.end() && it->slots != h.slots;
      });
  if (added.empty() && removed.empty() && !slots_changed) return {};
  discovered_ = std::move(order);
  std::vector<ElasticAction> out;
  out.push_back(elastic_action::Log{
      fmt::format("elastic: the host discovery lists {}{}{}", plural(discovered_.size(), "host"),
                  added.empty() ? "" : fmt::format("; new: {}", fmt::join(added, ", ")),
                  removed.empty() ? "" : fmt::format("; gone: {}", fmt::join(removed, ", "))),
      false});
  for (const std::string& h : removed) {
    joining_.erase(h);  // an agent still starting there is closed when it is ready
    if (with_agent_.erase(h) != 0) retiring_.push_back(h);
  }
  for (const std::string& h : added) {  // back before its agent was stopped: keep it
    if (const auto it = std::find(retiring_.begin(), retiring_.end(), h); it != retiring_.end()) {
      retiring_.erase(it);
      with_agent_.insert(h);
    }
  }
  refresh_pool();
  request_agents(now, out);
  auto change = shortfall_ ? on_tick(now) : maybe_grow(now);
  out.insert(out.end(), change.begin(), change.end());
  return out;
}

std::vector<ElasticAction> ElasticDriver::on_agent_ready(const std::string& host,
                                                         Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_ || joining_.erase(host) == 0) return {};
  with_agent_.insert(host);
  refresh_pool();
  return shortfall_ ? on_tick(now) : maybe_grow(now);
}

std::vector<ElasticAction> ElasticDriver::on_join_failed(const std::string& host,
                                                         const std::string& why,
                                                         Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_) return {};
  joining_.erase(host);
  std::vector<ElasticAction> out{
      elastic_action::Log{fmt::format("elastic: host {} could not join: {}", host, why)}};
  charge_host(host, why, now, out);
  return out;
}

bool ElasticDriver::cooling(const SlotKey& slot, Clock::time_point now) const {
  return charged_out(slot_name(slot), now);
}

std::vector<std::string> ElasticDriver::pool_keys() const {
  std::vector<std::string> keys;
  for (const PoolHost& h : discovered_) {
    keys.push_back(h.host);
    for (int s = 0; s < h.slots; ++s) keys.push_back(slot_name({h.host, s}));
  }
  return keys;
}

std::vector<ElasticBlacklistEntry> ElasticDriver::blacklist(Clock::time_point now) const {
  std::vector<ElasticBlacklistEntry> out;
  for (const std::string& key : pool_keys()) {
    if (const int times = health_.times_blacklisted(key); times > 0) {
      out.push_back({key, health_.back_at(key, now), times});
    }
  }
  for (const auto& [key, failures] : failures_) {
    if (failures >= policy_.failure_limit) out.push_back({key, std::nullopt, 1});
  }
  return out;
}

}  // namespace hvd::launcher
