// ElasticDriver's hosts (elastic_driver.h): what the host discovery lists, the agents started
// on them, and the failures charged to hosts and slots (out for good at --host-failure-limit, or
// cooled down with --blacklist-cooldown-range). The generations are in elastic_driver.cpp.
#include "launcher/elastic/elastic_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <unordered_map>

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
  // By host (first listing wins), so that a list of thousands costs n log n, not n^2.
  std::unordered_map<std::string, const PoolHost*> listed;
  for (const PoolHost& h : hosts) listed.emplace(h.host, &h);
  // Horovod's order: hosts already known keep their places, new ones follow in output order.
  std::vector<PoolHost> order;
  std::vector<std::string> added, removed;
  bool slots_changed = false;
  for (const PoolHost& h : discovered_) {
    if (const auto it = listed.find(h.host); it != listed.end()) {
      order.push_back(*it->second);
      slots_changed |= it->second->slots != h.slots;
    } else {
      removed.push_back(h.host);
    }
  }
  for (const PoolHost& h : hosts) {
    if (discovered_at_.count(h.host) == 0 && listed.at(h.host) == &h) {
      order.push_back(h);
      added.push_back(h.host);
    }
  }
  if (added.empty() && removed.empty() && !slots_changed) return {};
  set_discovered(std::move(order));
  forget_unlisted(removed);
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

void ElasticDriver::forget_unlisted(const std::vector<std::string>& removed) {
  for (auto it = unlisted_for_.begin(); it != unlisted_for_.end();) {
    const std::string& host = it->first;
    if (discovered_at_.count(host) != 0 || with_agent_.count(host) != 0) {
      it = unlisted_for_.erase(it);  // back, or its agent still runs
      continue;
    }
    if (++it->second < kForgetAfterLists) {
      ++it;
      continue;
    }
    const auto of_host = [&](const std::string& key) {
      return key == host || (key.size() > host.size() && key.starts_with(host) &&
                             key[host.size()] == '#');  // "host#slot"
    };
    std::erase_if(failures_, [&](const auto& entry) { return of_host(entry.first); });
    for (const std::string& key : health_.keys()) {
      if (of_host(key)) health_.forget(key);
    }
    it = unlisted_for_.erase(it);
  }
  for (const std::string& host : removed) unlisted_for_.emplace(host, 0);
}

void ElasticDriver::set_discovered(std::vector<PoolHost> hosts) {
  discovered_ = std::move(hosts);
  discovered_at_.clear();
  for (size_t i = 0; i < discovered_.size(); ++i) {
    discovered_at_.emplace(discovered_[i].host, std::pair{i, discovered_[i].slots});
  }
}

std::optional<std::pair<size_t, int>> ElasticDriver::pool_position(const std::string& key) const {
  if (const auto it = discovered_at_.find(key); it != discovered_at_.end()) {
    return std::pair{it->second.first, -1};
  }
  const auto hash = key.rfind('#');  // slot_name(): "host#slot"
  if (hash == std::string::npos) return std::nullopt;
  const auto it = discovered_at_.find(key.substr(0, hash));
  if (it == discovered_at_.end()) return std::nullopt;
  int slot = -1;
  const char* first = key.data() + hash + 1;
  const char* last = key.data() + key.size();
  const auto [end, error] = std::from_chars(first, last, slot);
  if (error != std::errc() || end != last || slot < 0 || slot >= it->second.second) {
    return std::nullopt;
  }
  return std::pair{it->second.first, slot};
}

std::vector<std::string> ElasticDriver::charged_pool_keys() const {
  std::vector<std::pair<std::pair<size_t, int>, std::string>> keyed;
  for (const std::string& key : health_.keys()) {
    if (const auto at = pool_position(key)) keyed.emplace_back(*at, key);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::string> keys;
  for (auto& [at, key] : keyed) keys.push_back(std::move(key));
  return keys;
}

std::vector<ElasticBlacklistEntry> ElasticDriver::blacklist(Clock::time_point now) const {
  std::vector<ElasticBlacklistEntry> out;
  for (const std::string& key : charged_pool_keys()) {
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
