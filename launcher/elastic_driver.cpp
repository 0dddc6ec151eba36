#include "launcher/elastic_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"

namespace hvd::launcher {
namespace {

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

ElasticDriver::ElasticDriver(ElasticPolicy policy, std::vector<PoolHost> pool,
                             std::vector<ElasticWorker> workers, std::string master_addr,
                             int master_port, Clock::time_point)
    : policy_(policy),
      pool_(std::move(pool)),
      workers_(std::move(workers)),
      master_addr_(std::move(master_addr)),
      master_port_(master_port) {
  for (const ElasticWorker& w : workers_) {
    alive_.push_back(w.id);
    members_.push_back(w.id);
  }
  joined_ = members_;  // generation 0 is the launch itself
}

const ElasticWorker& ElasticDriver::worker(int id) const {
  const auto it = std::find_if(workers_.begin(), workers_.end(),
                               [&](const ElasticWorker& w) { return w.id == id; });
  if (it == workers_.end()) throw Error(fmt::format("elastic: no worker {}", id));
  return *it;
}

std::vector<ElasticAction> ElasticDriver::on_exit(int id, int exit_code, const std::string& why,
                                                  Clock::time_point now) {
  if (done_ || !contains(alive_, id)) return {};
  std::erase(alive_, id);
  const bool member = contains(members_, id);
  if (exit_code == 0) {
    if (!member) return {};
    // The training finished: the others finish too; no more generations.
    finishing_ = true;
    if (std::none_of(members_.begin(), members_.end(),
                     [&](int m) { return contains(alive_, m); })) {
      done_ = true;
      return {elastic_action::Finish{}};
    }
    return {};
  }
  if (finishing_) {  // a failure after the training finished elsewhere is the job's failure
    done_ = true;
    return {elastic_action::Fail{exit_code, "", ErrorKind::kRemote, id}};
  }
  if (!member)
    return {
        elastic_action::Log{fmt::format("elastic: {} (not in generation {})", why, generation_)}};
  cooling_.push_back(worker(id).slot);
  return next_generation(why, id, exit_code, ErrorKind::kRemote, now);
}

std::vector<ElasticAction> ElasticDriver::on_host_lost(const std::string& host,
                                                       const std::string& why,
                                                       Clock::time_point now) {
  if (done_) return {};
  std::erase_if(pool_, [&](const PoolHost& h) { return h.host == host; });
  std::vector<int> gone;
  for (int id : alive_) {
    if (worker(id).slot.host == host) gone.push_back(id);
  }
  std::erase_if(alive_, [&](int id) { return contains(gone, id); });
  const bool member =
      std::any_of(gone.begin(), gone.end(), [&](int id) { return contains(members_, id); });
  const int code = to_int(exit_code_of(ErrorKind::kHostLost));
  if (!member) {
    return {elastic_action::Log{
        fmt::format("elastic: {} (no rank of generation {} there)", why, generation_)}};
  }
  if (finishing_) {
    done_ = true;
    return {elastic_action::Fail{code, why, ErrorKind::kHostLost, std::nullopt}};
  }
  return next_generation(why, std::nullopt, code, ErrorKind::kHostLost, now);
}

std::vector<ElasticAction> ElasticDriver::next_generation(const std::string& reason,
                                                          std::optional<int> failed, int exit_code,
                                                          ErrorKind kind, Clock::time_point now) {
  std::vector<SlotKey> survivors;
  for (int id : alive_) survivors.push_back(worker(id).slot);
  // Shrink only: no slot without a live worker is taken (refilling is a later step).
  const auto unavailable = [&](const SlotKey& s) {
    return std::find(survivors.begin(), survivors.end(), s) == survivors.end();
  };
  const WorldChoice choice = choose_world(pool_, survivors, unavailable, policy_.max_np);
  // With a failed worker the report names it already; a lost host is named here.
  const std::string cause = failed ? "" : reason + "; ";
  if (choice.size() < policy_.min_np) {
    done_ = true;
    return {elastic_action::Fail{
        exit_code,
        fmt::format("{}elastic: {} rank{} left, fewer than --min-np {}", cause, choice.size(),
                    choice.size() == 1 ? "" : "s", policy_.min_np),
        kind, failed}};
  }
  if (policy_.reset_limit && generation_ + 1 > *policy_.reset_limit) {
    done_ = true;
    return {elastic_action::Fail{
        exit_code,
        fmt::format("{}elastic: --reset-limit {} reached (generation {} was the last)", cause,
                    *policy_.reset_limit, generation_),
        kind, failed}};
  }
  ++generation_;
  members_.clear();
  joined_.clear();
  contract::WorldDoc doc;
  doc.generation = generation_;
  doc.reason = reason;
  doc.master_addr = master_addr_;
  doc.master_port = master_port_;
  doc.sync_root = choice.sync_root;
  for (int r = 0; r < choice.size(); ++r) {
    const SlotKey& slot = choice.slots[static_cast<std::size_t>(r)];
    const auto it =
        std::find_if(alive_.begin(), alive_.end(), [&](int id) { return worker(id).slot == slot; });
    members_.push_back(*it);
    doc.workers.push_back(
        {*it, choice.placements[static_cast<std::size_t>(r)].topology, slot.host});
  }
  form_deadline_ = now + policy_.form_timeout;
  std::vector<std::string> hosts;
  for (const auto& e : doc.workers) {
    if (std::find(hosts.begin(), hosts.end(), e.host) == hosts.end()) hosts.push_back(e.host);
  }
  return {elastic_action::Log{fmt::format("elastic: generation {}: {} rank{} on {} host{} ({})",
                                          generation_, choice.size(), choice.size() == 1 ? "" : "s",
                                          hosts.size(), hosts.size() == 1 ? "" : "s", reason)},
          elastic_action::Publish{std::move(doc), members_}};
}

std::vector<ElasticAction> ElasticDriver::on_joined(int id, int generation, Clock::time_point) {
  if (done_ || generation != generation_ || !contains(members_, id) || contains(joined_, id)) {
    return {};
  }
  joined_.push_back(id);
  if (!formed()) return {};
  form_deadline_.reset();
  return {elastic_action::Formed{generation_}};
}

std::vector<ElasticAction> ElasticDriver::on_tick(Clock::time_point now) {
  if (done_ || !form_deadline_ || now < *form_deadline_) return {};
  std::vector<int> missing;
  for (int m : members_) {
    if (!contains(joined_, m)) missing.push_back(m);
  }
  done_ = true;
  return {elastic_action::Fail{
      to_int(exit_code_of(ErrorKind::kTimeout)),
      fmt::format("elastic: generation {} did not form within {:.0f} s: worker{} {} never joined",
                  generation_, std::chrono::duration<double>(policy_.form_timeout).count(),
                  missing.size() == 1 ? "" : "s", fmt::join(missing, ", ")),
      ErrorKind::kTimeout, std::nullopt}};
}

std::optional<ElasticDriver::Clock::time_point> ElasticDriver::next_deadline() const {
  if (done_) return std::nullopt;
  return form_deadline_;
}

}  // namespace hvd::launcher
