// An elastic job's side of NativeJob (docs/elastic.md, docs/design/elastic.md): the launcher
// keeps an ElasticDriver (elastic_driver.h) from the moment the specs went out, feeds it the
// ranks' exits and the "joined G" lines their channels bring back (kRankEvent), and carries out
// what it decides: a world document into the rendezvous store, then "gen G" to the workers of
// the new generation through their agents (kGeneration), or the end of the job.
//
// Frames keep carrying a worker's id where static jobs carry its rank: in generation 0 they are
// the same, and the output is tagged by worker id for the whole job. A worker started later (a
// refilled or free slot) gets the next id, and its agent a kStartRanks frame with its
// environment: that of the generation-0 rank on the same host (the same slot where there was
// one), with the topology of its first generation.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "contract/elastic.h"
#include "contract/env_table.h"
#include "contract/rendezvous.h"
#include "launcher/core/launch_report.h"
#include "launcher/core/net_check.h"
#include "launcher/core/status_line.h"
#include "launcher/native/native_job.h"
#include "launcher/native/rendezvous_server.h"
#include "launcher/plan/rank_defaults.h"

namespace hvd::launcher::native {

// A value of a rank's environment, as its spec gave it (native_job.h).
std::string spec_value(const agent::RankSpec& rank, std::string_view name) {
  for (const auto& [n, v] : rank.env) {
    if (n == name) return v;
  }
  return {};
}

namespace {

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

void set_value(agent::RankSpec& rank, const std::string& name, const std::string& value) {
  for (auto& [n, v] : rank.env) {
    if (n == name) {
      v = value;
      return;
    }
  }
  rank.env.emplace_back(name, value);
}

}  // namespace

// Generation 0 is the launch itself: every rank of the plan, MASTER_* as rank 0 got them.
void NativeJob::start_elastic() {
  const ElasticOptions& o = *options_.elastic;
  std::vector<PoolHost> pool;  // every slot of the hosts with an agent (growth takes free ones)
  for (const HostPlan& h : plan_.hosts) {
    pool.push_back({h.spec.host, std::max(h.num_ranks, h.spec.slots)});
    listed_[h.spec.host] = h.spec;
  }
  std::vector<PoolHost> spare;  // listed hosts without a rank: no agent yet
  for (const HostSpec& h : plan_.unused_hosts) {
    spare.push_back({h.host, h.slots});
    listed_[h.host] = h;
  }
  std::vector<ElasticWorker> workers;
  for (const RankPlan& r : plan_.ranks) {
    workers.push_back(
        {r.topology.rank,
         {plan_.hosts[static_cast<size_t>(r.host_index)].spec.host, r.topology.local_rank}});
  }
  const agent::RankSpec& rank0 =
      specs_.at(static_cast<size_t>(plan_.ranks.front().host_index)).ranks.front();
  const int np = static_cast<int>(plan_.ranks.size());
  const ElasticPolicy policy{.min_np = o.min_np_for(np),
                             .max_np = o.max_np_or_unbounded(),
                             .reset_limit = o.reset_limit,
                             .form_timeout = options_.start_timeout,
                             .elastic_timeout = o.timeout(),
                             .failure_limit = options_.host_failures.limit,
                             .cooldown = options_.host_failures.slot_cooldown(),
                             .jitter = [] { return static_cast<double>(std::rand()) / RAND_MAX; },
                             .discovery = o.discovery_script.has_value()};
  const auto now = Clock::now();
  elastic_.emplace(policy, std::move(pool), std::move(workers),
                   spec_value(rank0, contract::kMasterAddr.name), facts_.master_port, now);
  GenerationRecord first{0, "start", {}, now, now};
  for (const RankPlan& r : plan_.ranks) first.workers.push_back(r.topology.rank);
  generations_.push_back(std::move(first));
  if (o.discovery_script) {
    discovery_.emplace(*o.discovery_script, o.slots(), kDiscoveryTimeout);
    // The list the job starts from: the same output again is no change, not a second parse.
    if (!plan_.hosts_origin.discovery_output.empty()) {
      discovery_->assume_output(plan_.hosts_origin.discovery_output);
    }
    next_discovery_ = now + o.discovery_interval();
  }
  // A terminal on stderr (and no --json): the job's state as one line at its bottom.
  if (stderr_wants_status_line(options_.stdout_to_stderr)) StatusLine::get().enable(STDERR_FILENO);
  apply(elastic_->start(spare, now));
}

// "elastic: 3 ranks on 2 hosts, generation 2; localhost#2 back in 38 s" (status_line.h).
void NativeJob::update_status(Clock::time_point now) {
  // The start-up line (native_job_net.cpp) first, until every rank started.
  if (!elastic_ || !StatusLine::get().enabled() || startup_line_since_) return;
  const std::vector<int>& members = elastic_->members();
  std::set<std::string> hosts;
  for (int m : members) {
    for (const ElasticWorker& w : elastic_->workers()) {
      if (w.id == m) hosts.insert(w.slot.host);
    }
  }
  std::string text =
      members.empty()
          ? fmt::format("elastic: waiting for slots (--min-np {}), generation {}",
                        options_.elastic->min_np_for(static_cast<int>(plan_.ranks.size())),
                        elastic_->generation())
          : fmt::format("elastic: {} rank{} on {} host{}, generation {}{}", members.size(),
                        members.size() == 1 ? "" : "s", hosts.size(), hosts.size() == 1 ? "" : "s",
                        elastic_->generation(), elastic_->formed() ? "" : " (forming)");
  std::vector<std::string> out;
  for (const ElasticBlacklistEntry& b : elastic_->blacklist(now)) {
    if (b.back_at) {
      out.push_back(
          fmt::format("{} back in {:.0f} s", b.key,
                      std::ceil(std::chrono::duration<double>(*b.back_at - now).count())));
    }
  }
  if (!out.empty()) text += "; " + fmt::format("{}", fmt::join(out, ", "));
  StatusLine::get().set(text);
}

AgentConn* NativeJob::live_agent(const std::string& host) {
  for (AgentConn& a : agents_) {
    if (!a.eof && !a.retired && host_of(a) == host) return &a;
  }
  return nullptr;
}

// New workers: each to its host's agent, with its environment (see the top of this file).
void NativeJob::start_workers(const std::vector<elastic_action::StartWorker>& workers) {
  for (const elastic_action::StartWorker& w : workers) {
    AgentConn* agent = live_agent(w.slot.host);
    const auto h = agent != nullptr ? static_cast<size_t>(agent->host_index) : 0;
    const int id =
        sup_.add_worker(static_cast<int>(h), w.slot.host, w.placement.topology.local_rank);
    if (id != w.worker || agent == nullptr || !agent->hello || specs_.empty() ||
        specs_.front().ranks.empty()) {
      apply(elastic_->on_start_failed(
          w.worker,
          fmt::format("worker {} could not be started on {}: no agent runs there", w.worker,
                      w.slot.host),
          Clock::now()));
      continue;
    }
    // The template: the generation-0 rank on that slot, else that host's first; on a host that
    // joined, rank 0's with this host's own addresses.
    agent::RankSpec rank;
    bool own_slot = false;
    if (h < plan_.hosts.size() && h < specs_.size() && !specs_[h].ranks.empty()) {
      rank = specs_[h].ranks.front();
      for (const agent::RankSpec& r : specs_[h].ranks) {
        if (plan_.ranks.at(static_cast<size_t>(r.rank)).topology.local_rank == w.slot.slot) {
          rank = r;
          own_slot = true;
        }
      }
    } else {
      rank = specs_.front().ranks.front();
      const std::string& reached = h < facts_.reached_at.size() ? facts_.reached_at[h] : "";
      const std::string advertise = !reached.empty()                   ? reached
                                    : !facts_.launcher_address.empty() ? facts_.launcher_address
                                                                       : "127.0.0.1";
      set_value(rank, std::string(contract::kHorovodHostname.name), w.slot.host);
      set_value(rank, std::string(contract::kAdvertiseAddr.name), advertise);
      set_value(rank, std::string(contract::kRendezvousAddr.name),
                contract::rendezvous::join_address(facts_.launcher_address_of.at(h),
                                                   facts_.rendezvous_port));
    }
    rank.rank = w.worker;
    for (const auto& [name, value] : contract::topology_env(w.placement)) {
      set_value(rank, name, value);
    }
    set_value(rank, std::string(contract::kElasticWorker.name), std::to_string(w.worker));
    set_value(rank, std::string(contract::kElasticGeneration.name), std::to_string(w.generation));
    // --gpus-per-rank: a slot without a generation-0 rank gets its own devices.
    if (plan_.gpus_per_rank && !own_slot) {
      set_value(rank, std::string(contract::kCudaVisibleDevices.name),
                cuda_visible_devices(w.slot.slot, *plan_.gpus_per_rank));
    }
    agent::JobSpec more = specs_.front();
    more.host = w.slot.host;
    more.ranks = {std::move(rank)};
    if (agent->spec_sent) {
      send(*agent, FrameType::kStartRanks, agent::encode_spec(more));
    } else {  // a joined host's first workers: its job spec
      send(*agent, FrameType::kSpec, agent::encode_spec(more));
      agent->spec_sent = true;
      agent->last_heard = Clock::now();
      agent->next_ping = agent->last_heard + options_.keepalive / 3;
    }
  }
}

// An agent could not start a worker of kStartRanks: that worker's failure.
void NativeJob::on_start_failed(const AgentConn& agent, const std::string& payload) {
  const auto doc = nlohmann::json::parse(payload, nullptr, false);
  if (!doc.is_object() || !doc.contains("worker") || !doc["worker"].is_number_unsigned() ||
      !doc.contains("message") || !doc["message"].is_string()) {
    protocol_error(agent, "a start failure without a worker and a message");
    return;
  }
  const int w = doc["worker"].get<int>();
  const std::string message = doc["message"].get<std::string>();
  spdlog::warn("elastic: {}", message);
  if (elastic_running()) apply(elastic_->on_start_failed(w, message, Clock::now()));
}

void NativeJob::on_elastic_exit(const agent::RankExited& exited) {
  const int w = static_cast<int>(exited.rank);
  sup_.record_exit(w, {exited.signaled, static_cast<int>(exited.value)}, exited.stopped);
  if (w < 0 || w >= static_cast<int>(sup_.result().ranks.size())) return;
  const RankOutcome& outcome = sup_.result().ranks[static_cast<size_t>(w)];
  const std::vector<int>& members = elastic_->members();
  const auto at = std::find(members.begin(), members.end(), w);
  const std::string rank = at == members.end()
                               ? fmt::format("worker {}", w)
                               : fmt::format("rank {} (worker {})", at - members.begin(), w);
  const std::string why = fmt::format("{} on {} {}", rank, outcome.host, describe_exit(outcome));
  apply(elastic_->on_exit(w, outcome.exit_code(), why, Clock::now()));
}

// A line a rank wrote on its channel: "joined G" once its libhvd runs in generation G. Other
// lines are not the launcher's business (a future libhvd's words): logged and ignored.
void NativeJob::on_rank_event(const std::string& payload) {
  const agent::RankEvent event = agent::decode_rank_event(payload);
  int generation = -1;
  if (std::sscanf(event.line.c_str(), "joined %d", &generation) == 1 && elastic_running()) {
    apply(elastic_->on_joined(static_cast<int>(event.worker), generation, Clock::now()));
    return;
  }
  spdlog::debug("elastic: worker {} said '{}'", event.worker, event.line);
}

void NativeJob::apply(std::vector<ElasticAction> actions) {
  const auto now = Clock::now();
  for (ElasticAction& action : actions) {
    if (auto* log = std::get_if<elastic_action::Log>(&action)) {
      if (log->warning) {
        spdlog::warn("{}", log->line);
      } else {
        spdlog::info("{}", log->line);
      }
    } else if (auto* publish = std::get_if<elastic_action::Publish>(&action)) {
      // The document first, then the word: a rank that hears "gen G" finds world.G in the store.
      // Rank 0's host is where the other hosts reach it (generation 0's host may be gone).
      contract::WorldDoc& doc = publish->doc;
      if (!doc.workers.empty()) {
        if (const AgentConn* zero = live_agent(doc.workers.front().host)) {
          doc.master_addr = address_of(zero->host_index);
        }
      }
      rendezvous_->put(contract::elastic_scope(plan_.job_id), contract::world_key(doc.generation),
                       contract::encode_world(doc));
      agent::GenerationNotice notice{static_cast<uint32_t>(doc.generation), {}};
      for (int w : publish->workers) notice.workers.push_back(static_cast<uint32_t>(w));
      const std::string payload = agent::encode_generation(notice);
      for (AgentConn& a : agents_) {
        if (a.spec_sent && !a.eof) send(a, FrameType::kGeneration, payload);
      }
      generations_.push_back({doc.generation, doc.reason, publish->workers, now, std::nullopt});
    } else if (auto* fail = std::get_if<elastic_action::Fail>(&action)) {
      if (fail->worker) {
        sup_.fail_rank(*fail->worker, fail->message);
      } else {
        sup_.fail({fail->kind, fail->message,
                   fail->kind == ErrorKind::kTimeout
                       ? "a rank of the new generation did not rebuild its world in time (it "
                         "hangs in the program, or before hvd::elastic::run's reset); raise "
                         "--start-timeout if the ranks are only slow"
                       : "the host may have rebooted or dropped the connection; its agent stops "
                         "its ranks when its link goes away"});
      }
    } else if (auto* formed = std::get_if<elastic_action::Formed>(&action)) {
      GenerationRecord& g = generations_.back();
      if (g.generation != formed->generation) continue;
      g.formed = now;
      spdlog::info("elastic: generation {} formed in {:.0f} ms: {} rank{}", g.generation,
                   ms_between(g.published, now), g.workers.size(),
                   g.workers.size() == 1 ? "" : "s");
    } else if (auto* start = std::get_if<elastic_action::Start>(&action)) {
      start_workers(start->workers);
    } else if (auto* join = std::get_if<elastic_action::StartAgent>(&action)) {
      start_agent(join->host);
    } else if (auto* leave = std::get_if<elastic_action::StopAgent>(&action)) {
      if (AgentConn* a = live_agent(leave->host)) {
        spdlog::info("elastic: {} left the job: its agent ends", leave->host);
        a->retired = true;
        if (a->spec_sent) {
          send(*a, FrameType::kTerminate);
        } else {
          a->transport->close_input();
        }
      }
    } else if (std::holds_alternative<elastic_action::Finish>(action)) {
      // The agents stay up for workers an elastic job may start later: the job ends them (and
      // any worker that was started for a generation that never formed).
      spdlog::debug("elastic: every rank of generation {} finished", elastic_->generation());
      sup_.stop(StopMode::kTerminate);
    }
  }
  update_status(now);
}

bool NativeJob::status_counting_down(Clock::time_point now) const {
  if (!elastic_ || !StatusLine::get().enabled()) return false;
  const auto list = elastic_->blacklist(now);
  return std::any_of(list.begin(), list.end(),
                     [](const ElasticBlacklistEntry& b) { return b.back_at.has_value(); });
}

nlohmann::ordered_json NativeJob::elastic_json() const {
  using json = nlohmann::ordered_json;
  const ElasticOptions& o = *options_.elastic;
  json generations = json::array();
  for (const GenerationRecord& g : generations_) {
    // Its hosts, in rank order, with their number of ranks.
    json hosts = json::object();
    if (elastic_) {
      for (int w : g.workers) {
        for (const ElasticWorker& e : elastic_->workers()) {
          if (e.id == w) hosts[e.slot.host] = hosts.value(e.slot.host, 0) + 1;
        }
      }
    }
    generations.push_back(
        {{"generation", g.generation},
         {"reason", g.reason},
         {"size", g.workers.size()},
         {"hosts", std::move(hosts)},
         {"workers", g.workers},
         {"published_ms", std::llround(ms_between(started_at_, g.published))},
         {"formed_ms",
          g.formed ? json(std::llround(ms_between(started_at_, *g.formed))) : json(nullptr)}});
  }
  const auto now = Clock::now();
  json blacklisted = json::array();
  json workers = json::array();
  if (elastic_) {
    for (const ElasticBlacklistEntry& b : elastic_->blacklist(now)) {
      blacklisted.push_back(
          {{"name", b.key},
           {"kind", b.key.find('#') == std::string::npos ? "host" : "slot"},
           {"seconds_left",
            b.back_at ? json(std::llround(ms_between(now, *b.back_at)) / 1000.0) : json(nullptr)},
           {"times", b.times}});
    }
    for (const ElasticWorker& w : elastic_->workers()) {
      workers.push_back({{"worker", w.id}, {"host", w.slot.host}, {"slot", w.slot.slot}});
    }
  }
  return {{"min_np", o.min_np_for(static_cast<int>(plan_.ranks.size()))},
          {"max_np", o.max_np ? json(*o.max_np) : json(nullptr)},
          {"reset_limit", o.reset_limit ? json(*o.reset_limit) : json(nullptr)},
          {"resets", generations_.empty() ? 0 : generations_.size() - 1},
          {"generations", std::move(generations)},
          {"workers", std::move(workers)},
          {"blacklisted", std::move(blacklisted)}};
}

}  // namespace hvd::launcher::native
