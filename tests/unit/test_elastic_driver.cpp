// Elastic training's driver (launcher/elastic/elastic_driver.h): generations as workers fail,
// join and finish, slots' cooldowns, --min-np/--max-np/--reset-limit, hosts discovered. Pure: no
// process, no clock but the tests' own. The world document and the slots a generation takes are
// test_elastic_world.cpp's; the discovery script's output and runs,
// test_elastic_discovery_cost.cpp's.
#include "tests/support/catch.h"

#include <string>

#include "common/error.h"
#include "contract/elastic.h"
#include "launcher/elastic/elastic_driver.h"
#include "launcher/elastic/elastic_world.h"

using Catch::Matchers::ContainsSubstring;
using hvd::contract::decode_world;
using hvd::contract::encode_world;
using hvd::contract::RankTopology;
using hvd::launcher::SlotKey;

namespace {

using hvd::launcher::ElasticAction;
using hvd::launcher::ElasticDriver;
using hvd::launcher::ElasticPolicy;
using hvd::launcher::ElasticWorker;
namespace act = hvd::launcher::elastic_action;
using Clock = ElasticDriver::Clock;

ElasticPolicy policy(int min_np, int max_np, std::optional<int> reset_limit = std::nullopt,
                     std::chrono::milliseconds form_timeout = std::chrono::seconds(30)) {
  ElasticPolicy p;
  p.min_np = min_np;
  p.max_np = max_np;
  p.reset_limit = reset_limit;
  p.form_timeout = form_timeout;
  return p;
}

// Four workers on a:2, b:2, ranks 0..3 in slot order.
ElasticDriver four_workers(ElasticPolicy policy, Clock::time_point now) {
  return ElasticDriver(policy, {{"a", 2}, {"b", 2}},
                       {{0, {"a", 0}}, {1, {"a", 1}}, {2, {"b", 0}}, {3, {"b", 1}}}, "a", 29500,
                       now);
}

// A pointer into `actions`: keep the vector alive while using it.
template <class T>
const T* find_action(const std::vector<ElasticAction>& actions) {
  for (const ElasticAction& a : actions) {
    if (const T* t = std::get_if<T>(&a)) return t;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("elastic driver: a failed worker's generation shrinks, ranks compacted", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(policy(2, 4), t0);
  CHECK(d.generation() == 0);
  CHECK(d.formed());
  const auto actions = d.on_exit(1, 137, "rank 1 on a was killed by signal 9", t0);
  const auto* publish = find_action<act::Publish>(actions);
  REQUIRE(publish != nullptr);
  CHECK(publish->doc.generation == 1);
  CHECK(publish->doc.reason == "rank 1 on a was killed by signal 9");
  CHECK(publish->doc.master_addr == "a");
  CHECK(publish->doc.master_port == 29500);
  CHECK(publish->workers == std::vector<int>{0, 2, 3});
  REQUIRE(publish->doc.workers.size() == 3);
  CHECK(publish->doc.workers[1].worker == 2);
  CHECK(publish->doc.workers[1].host == "b");
  CHECK(publish->doc.workers[1].topology == RankTopology{1, 3, 0, 2, 1, 2});
  CHECK(publish->doc.workers[0].topology == RankTopology{0, 3, 0, 1, 0, 2});
  CHECK(hvd::contract::decode_world(hvd::contract::encode_world(publish->doc)) == publish->doc);
  REQUIRE(find_action<act::Log>(actions) != nullptr);
  CHECK_THAT(
      find_action<act::Log>(actions)->line,
      ContainsSubstring("elastic: generation 1: 3 ranks on 2 hosts (rank 1 on a was killed"));
  CHECK_FALSE(d.formed());
  REQUIRE(d.next_deadline().has_value());
  // The survivors join; the generation is formed and no deadline is left.
  for (int w : {0, 2}) CHECK(d.on_joined(w, 1, t0).empty());
  CHECK(d.on_joined(3, 0, t0).empty());  // an old generation's word does not count
  const auto formed = d.on_joined(3, 1, t0);
  REQUIRE(find_action<act::Formed>(formed) != nullptr);
  CHECK(find_action<act::Formed>(formed)->generation == 1);
  CHECK(d.formed());
  CHECK_FALSE(d.next_deadline().has_value());
}

TEST_CASE("elastic driver: rank 0 dies: the next rank 0 is the first survivor", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(policy(1, 4), t0);
  const auto actions = d.on_exit(0, 1, "rank 0 exited with 1", t0);
  const auto* publish = find_action<act::Publish>(actions);
  REQUIRE(publish != nullptr);
  CHECK(publish->doc.workers[0].worker == 1);
  CHECK(publish->doc.workers[0].topology.rank == 0);
  CHECK(publish->doc.sync_root == 0);
}

TEST_CASE("elastic driver: a failure while a generation forms supersedes it", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(policy(1, 4), t0);
  d.on_exit(3, 137, "rank 3 killed", t0);
  d.on_joined(0, 1, t0);
  // Worker 2 dies inside generation 1's sync: generation 2 at once, without waiting.
  const auto actions = d.on_exit(2, 137, "rank 2 killed", t0);
  const auto* publish = find_action<act::Publish>(actions);
  REQUIRE(publish != nullptr);
  CHECK(publish->doc.generation == 2);
  CHECK(publish->workers == std::vector<int>{0, 1});
  CHECK(d.members() == std::vector<int>{0, 1});
}

TEST_CASE("elastic driver: below --min-np, over --reset-limit, a generation that never forms",
          "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver below = four_workers(policy(3, 4), t0);
  CHECK(find_action<act::Publish>(below.on_exit(3, 137, "rank 3 killed", t0)) != nullptr);
  const auto below_actions = below.on_exit(0, 9, "rank 0 exited with 9", t0);
  const auto* fail = find_action<act::Fail>(below_actions);
  REQUIRE(fail != nullptr);
  CHECK(fail->exit_code == 9);  // the failure that took the job below min-np
  CHECK(fail->message == "elastic: 2 ranks left, fewer than --min-np 3");
  CHECK(fail->worker == 0);
  CHECK(below.done());
  CHECK(below.on_exit(1, 1, "x", t0).empty());  // done: nothing more

  ElasticDriver limited = four_workers(policy(1, 4, 1), t0);
  CHECK(find_action<act::Publish>(limited.on_exit(3, 137, "rank 3 killed", t0)) != nullptr);
  const auto limited_actions = limited.on_exit(2, 137, "rank 2 killed", t0);
  fail = find_action<act::Fail>(limited_actions);
  REQUIRE(fail != nullptr);
  CHECK(fail->exit_code == 137);
  CHECK_THAT(fail->message, ContainsSubstring("--reset-limit 1 reached"));
  CHECK(fail->worker == 2);

  ElasticDriver slow = four_workers(policy(1, 4, std::nullopt, std::chrono::milliseconds(500)), t0);
  slow.on_exit(3, 137, "rank 3 killed", t0);
  slow.on_joined(0, 1, t0);
  CHECK(slow.on_tick(t0 + std::chrono::milliseconds(499)).empty());
  const auto slow_actions = slow.on_tick(t0 + std::chrono::milliseconds(500));
  fail = find_action<act::Fail>(slow_actions);
  REQUIRE(fail != nullptr);
  CHECK(fail->exit_code == to_int(hvd::exit_code_of(hvd::ErrorKind::kTimeout)));
  CHECK_THAT(fail->message,
             ContainsSubstring("generation 1 did not form within 0 s: workers 1, 2 never "
                               "joined"));
  CHECK_FALSE(fail->worker.has_value());
}

TEST_CASE("elastic driver: the job finishes when the current generation exits 0", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(policy(1, 4), t0);
  d.on_exit(3, 137, "rank 3 killed", t0);
  for (int w : {0, 1}) CHECK(d.on_exit(w, 0, "", t0).empty());
  const auto last = d.on_exit(2, 0, "", t0);
  CHECK(find_action<act::Finish>(last) != nullptr);
  CHECK(d.done());

  // After a member finished, another's failure is the job's (as in a static job).
  ElasticDriver e = four_workers(policy(1, 4), t0);
  CHECK(e.on_exit(0, 0, "", t0).empty());
  const auto e_actions = e.on_exit(1, 3, "rank 1 exited with 3", t0);
  const auto* fail = find_action<act::Fail>(e_actions);
  REQUIRE(fail != nullptr);
  CHECK(fail->exit_code == 3);
  CHECK(fail->message.empty());  // reported as a static job's first failure
  CHECK(fail->worker == 1);
}

TEST_CASE("elastic driver: a lost host takes its workers and leaves the pool", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(policy(2, 4), t0);
  const auto actions = d.on_host_lost("b", "lost the agent on b", t0);
  const auto* publish = find_action<act::Publish>(actions);
  REQUIRE(publish != nullptr);
  CHECK(publish->workers == std::vector<int>{0, 1});
  CHECK(publish->doc.reason == "lost the agent on b");
  CHECK(publish->doc.workers[1].topology == RankTopology{1, 2, 1, 2, 0, 1});
  // Rank 0's host next: below --min-np, a host-lost failure naming it.
  const auto below = d.on_host_lost("a", "lost the agent on a", t0);
  const auto* fail = find_action<act::Fail>(below);
  REQUIRE(fail != nullptr);
  CHECK(fail->exit_code == 74);
  CHECK(fail->kind == hvd::ErrorKind::kHostLost);
  CHECK_FALSE(fail->worker.has_value());
  CHECK(fail->message == "lost the agent on a; elastic: 0 ranks left, fewer than --min-np 2");

  // A host without live workers of the generation: logged, nothing else.
  ElasticDriver e = four_workers(policy(1, 4), t0);
  e.on_exit(2, 137, "rank 2 killed", t0);
  e.on_exit(3, 137, "rank 3 killed", t0);
  const auto quiet = e.on_host_lost("b", "lost the agent on b", t0);
  CHECK(find_action<act::Publish>(quiet) == nullptr);
  REQUIRE(find_action<act::Log>(quiet) != nullptr);
}

namespace {

ElasticPolicy cooling_policy(int min_np, int max_np, double cooldown_s) {
  ElasticPolicy p = policy(min_np, max_np);
  p.cooldown = std::pair{cooldown_s, cooldown_s};
  p.elastic_timeout = std::chrono::seconds(60);
  return p;
}

// Whether one of the Log actions contains `text`.
bool has_log(const std::vector<ElasticAction>& actions, const std::string& text) {
  return std::any_of(actions.begin(), actions.end(), [&](const ElasticAction& a) {
    const auto* log = std::get_if<act::Log>(&a);
    return log != nullptr && log->line.find(text) != std::string::npos;
  });
}

// Every worker of the current generation says "joined".
std::vector<ElasticAction> join_all(ElasticDriver& d, Clock::time_point now) {
  std::vector<ElasticAction> last;
  for (int w : d.members()) last = d.on_joined(w, d.generation(), now);
  return last;
}

}  // namespace

TEST_CASE("elastic driver: a failed slot comes back after its cooldown with a new worker",
          "[elastic]") {
  using namespace std::chrono_literals;
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(cooling_policy(2, 4, 5), t0);
  CHECK(d.start({}, t0).empty());  // all four slots taken: nothing to grow
  const auto shrink = d.on_exit(1, 137, "rank 1 killed", t0);
  REQUIRE(find_action<act::Publish>(shrink) != nullptr);
  CHECK(find_action<act::Start>(shrink) == nullptr);  // the slot cools down: no new worker
  CHECK(has_log(shrink, "elastic: slot a#1 cools down for 5.0 s"));
  join_all(d, t0 + 100ms);
  CHECK(d.formed());
  // The deadline is the cooldown's end; before it, nothing.
  REQUIRE(d.next_deadline().has_value());
  CHECK(*d.next_deadline() == t0 + 5s);
  CHECK(d.on_tick(t0 + 4s).empty());
  const auto grow = d.on_tick(t0 + 5s);
  const auto* publish = find_action<act::Publish>(grow);
  const auto* start = find_action<act::Start>(grow);
  REQUIRE(publish != nullptr);
  REQUIRE(start != nullptr);
  CHECK(publish->doc.generation == 2);
  CHECK(publish->doc.reason == "growing: a#1 back after its cooldown");
  // A new worker (id 4) takes a#1, rank 1; the survivors keep their slots; state from rank 0.
  CHECK(publish->workers == std::vector<int>{0, 4, 2, 3});
  CHECK(publish->doc.sync_root == 0);
  REQUIRE(start->workers.size() == 1);
  CHECK(start->workers[0].worker == 4);
  CHECK(start->workers[0].slot == SlotKey{"a", 1});
  CHECK(start->workers[0].generation == 2);
  CHECK(start->workers[0].placement.topology == RankTopology{1, 4, 1, 2, 0, 2});
  CHECK(hvd::contract::decode_world(hvd::contract::encode_world(publish->doc)) == publish->doc);
  // A growth waits for the running workers' next commit: --elastic-timeout, not --start-timeout.
  CHECK(*d.next_deadline() == t0 + 5s + 60s);
  // The blacklist (--json) remembers the slot, back now.
  const auto blacklist = d.blacklist(t0 + 5s);
  REQUIRE(blacklist.size() == 1);
  CHECK(blacklist[0].key == "a#1");
  CHECK_FALSE(blacklist[0].back_at.has_value());
  CHECK(blacklist[0].times == 1);
}

TEST_CASE("elastic driver: without a cooldown a failed slot is out for good, as in horovodrun",
          "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(policy(2, 4), t0);
  const auto shrink = d.on_exit(1, 137, "rank 1 killed", t0);
  CHECK(has_log(shrink, "elastic: slot a#1 is out for good"));
  join_all(d, t0);
  CHECK_FALSE(d.next_deadline().has_value());  // nothing will come back: no timer
  CHECK(d.on_tick(t0 + std::chrono::hours(1)).empty());
  // Below --min-np with nothing to come back: the job fails at once.
  d.on_exit(2, 137, "rank 2 killed", t0);
  join_all(d, t0);
  const auto below = d.on_exit(3, 1, "rank 3 exited with 1", t0);
  REQUIRE(find_action<act::Fail>(below) != nullptr);
  CHECK(find_action<act::Fail>(below)->exit_code == 1);
}

TEST_CASE("elastic driver: a slot under --host-failure-limit is refilled at once", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticPolicy p = policy(2, 4);
  p.failure_limit = 2;
  ElasticDriver d = four_workers(p, t0);
  const auto first = d.on_exit(3, 1, "rank 3 exited with 1", t0);
  const auto* start = find_action<act::Start>(first);
  REQUIRE(start != nullptr);  // one failure of b#1: a new worker takes it in generation 1
  CHECK(start->workers[0].slot == SlotKey{"b", 1});
  CHECK(find_action<act::Publish>(first)->workers == std::vector<int>{0, 1, 2, 4});
  // Its second failure charges it out.
  const auto second = d.on_exit(4, 1, "worker 4 exited with 1", t0);
  CHECK(find_action<act::Start>(second) == nullptr);
  CHECK(find_action<act::Publish>(second)->workers == std::vector<int>{0, 1, 2});
  // A worker that could not start counts as a failure of its slot.
  ElasticDriver e = four_workers(p, t0);
  e.on_exit(0, 1, "rank 0 exited with 1", t0);
  const auto failed = e.on_start_failed(4, "no such program", t0);
  const auto* publish = find_action<act::Publish>(failed);
  REQUIRE(publish != nullptr);
  CHECK(publish->doc.generation == 2);
  CHECK(publish->workers == std::vector<int>{1, 2, 3});  // a#0's second failure: out
}

TEST_CASE("elastic driver: -np below --max-np grows onto free slots once generation 0 runs",
          "[elastic]") {
  const auto t0 = Clock::now();
  // Two workers on a:2, b:2 (slots a#0, a#1), --max-np 3.
  ElasticDriver d(policy(1, 3), {{"a", 2}, {"b", 2}}, {{0, {"a", 0}}, {1, {"a", 1}}}, "a", 29500,
                  t0);
  const auto grow = d.start({}, t0);
  const auto* publish = find_action<act::Publish>(grow);
  const auto* start = find_action<act::Start>(grow);
  REQUIRE(publish != nullptr);
  REQUIRE(start != nullptr);
  CHECK(publish->doc.reason == "growing: b#0 free slot up to --max-np 3");
  CHECK(publish->workers == std::vector<int>{0, 1, 2});
  CHECK(start->workers[0].slot == SlotKey{"b", 0});
  REQUIRE(find_action<act::Log>(grow) != nullptr);
  CHECK_FALSE(find_action<act::Log>(grow)->warning);  // growing is not a warning
  // Once formed, at --max-np: no more growth.
  const auto formed = join_all(d, t0);
  CHECK(find_action<act::Formed>(formed) != nullptr);
  CHECK(find_action<act::Publish>(formed) == nullptr);
}

TEST_CASE("elastic driver: the training ends before a new worker joined: it does not count",
          "[elastic]") {
  const auto t0 = Clock::now();
  ElasticDriver d(policy(1, 3), {{"a", 3}}, {{0, {"a", 0}}, {1, {"a", 1}}}, "a", 29500, t0);
  REQUIRE(find_action<act::Start>(d.start({}, t0)) != nullptr);  // worker 2 for generation 1
  // The two running workers finish without another commit; worker 2 waits for them in vain.
  CHECK(d.on_exit(0, 0, "", t0).empty());
  const auto last = d.on_exit(1, 0, "", t0);
  CHECK(find_action<act::Finish>(last) != nullptr);
  CHECK(d.done());
  CHECK(d.on_exit(2, 143, "worker 2 was terminated", t0).empty());  // stopped by the end
}

TEST_CASE("elastic driver: below --min-np it waits for a cooldown, then for --elastic-timeout",
          "[elastic]") {
  using namespace std::chrono_literals;
  const auto t0 = Clock::now();
  ElasticDriver d = four_workers(cooling_policy(4, 4, 2), t0);
  const auto below = d.on_exit(2, 137, "rank 2 killed", t0);
  CHECK(find_action<act::Publish>(below) == nullptr);
  CHECK(find_action<act::Fail>(below) == nullptr);
  CHECK(has_log(below, "3 ranks left, fewer than --min-np 4: waiting up to 60 s"));
  REQUIRE(d.next_deadline().has_value());
  CHECK(*d.next_deadline() == t0 + 2s);
  const auto back = d.on_tick(t0 + 2s);
  const auto* publish = find_action<act::Publish>(back);
  REQUIRE(publish != nullptr);
  CHECK(publish->doc.reason == "rank 2 killed");
  CHECK(publish->workers == std::vector<int>{0, 1, 4, 3});
  REQUIRE(find_action<act::Start>(back) != nullptr);

  // With a cooldown longer than --elastic-timeout nothing can come back in time: fail at once.
  ElasticPolicy p = cooling_policy(4, 4, 120);
  ElasticDriver e = four_workers(p, t0);
  const auto at_once = e.on_exit(2, 137, "rank 2 killed", t0);
  const auto* fail = find_action<act::Fail>(at_once);
  REQUIRE(fail != nullptr);
  CHECK(fail->exit_code == 137);

  // Waiting, and another slot fails meanwhile: the wait keeps its deadline and ends in the
  // failure that took the job below --min-np (at its deadline, or at once when what is still
  // cooling cannot be back before it).
  ElasticPolicy q = cooling_policy(4, 4, 50);
  ElasticDriver f = four_workers(q, t0);
  f.on_exit(2, 137, "rank 2 killed", t0);
  CHECK(find_action<act::Publish>(f.on_exit(1, 1, "rank 1 exited with 1", t0 + 20s)) == nullptr);
  CHECK(*f.next_deadline() == t0 + 50s);
  ElasticDriver g = f;
  const auto early_actions = g.on_tick(t0 + 50s);  // a#1 is back only at 70 s
  const auto* early = find_action<act::Fail>(early_actions);
  REQUIRE(early != nullptr);
  CHECK(early->worker == 2);
  CHECK_THAT(early->message, ContainsSubstring("3 ranks left, fewer than --min-np 4"));
  const auto timeout = f.on_tick(t0 + 60s);  // a tick that came late
  fail = find_action<act::Fail>(timeout);
  REQUIRE(fail != nullptr);
  CHECK(fail->exit_code == 137);
  CHECK(fail->worker == 2);
  CHECK_THAT(fail->message,
             ContainsSubstring("fewer than --min-np 4 ranks for 60 s (--elastic-timeout)"));
}

TEST_CASE("elastic driver: --reset-limit stops growth without failing the job", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticPolicy p = policy(1, 3, 0);
  ElasticDriver d(p, {{"a", 3}}, {{0, {"a", 0}}, {1, {"a", 1}}}, "a", 29500, t0);
  const auto grow = d.start({}, t0);
  CHECK(find_action<act::Publish>(grow) == nullptr);
  CHECK(find_action<act::Fail>(grow) == nullptr);
  CHECK(has_log(grow, "--reset-limit 0 reached"));
  CHECK_FALSE(d.done());
}

TEST_CASE("elastic driver: a discovered host gets an agent, then its slots", "[elastic]") {
  const auto t0 = Clock::now();
  ElasticPolicy p = policy(1, 1 << 20);
  p.discovery = true;
  ElasticDriver d(p, {{"a", 2}}, {{0, {"a", 0}}, {1, {"a", 1}}}, "a", 29500, t0);
  CHECK(d.start({}, t0).empty());
  const auto listed = d.on_discovered({{"a", 2}, {"c", 1}}, t0);
  const auto* start_agent = find_action<act::StartAgent>(listed);
  REQUIRE(start_agent != nullptr);
  CHECK(start_agent->host == "c");
  CHECK(has_log(listed, "the host discovery lists 2 hosts; new: c"));
  CHECK(find_action<act::Publish>(listed) == nullptr);  // not before its agent is up
  CHECK(d.joining("c"));
  CHECK(d.on_discovered({{"a", 2}, {"c", 1}}, t0).empty());  // the same list: nothing
  const auto ready = d.on_agent_ready("c", t0);
  const auto* publish = find_action<act::Publish>(ready);
  REQUIRE(publish != nullptr);
  CHECK(publish->workers == std::vector<int>{0, 1, 2});
  CHECK(find_action<act::Start>(ready)->workers[0].slot == SlotKey{"c", 0});
  join_all(d, t0);
  // c leaves the list: the next generation is without it, and once it formed c's agent ends.
  const auto gone = d.on_discovered({{"a", 2}}, t0);
  publish = find_action<act::Publish>(gone);
  REQUIRE(publish != nullptr);
  CHECK(publish->workers == std::vector<int>{0, 1});
  CHECK_THAT(publish->doc.reason, ContainsSubstring("c#0 no longer listed"));
  CHECK(d.on_exit(2, 3, "worker 2 exited with 3 (HVD_ERR_REMOVED)", t0).empty());  // removed
  const auto formed = join_all(d, t0);
  const auto* stop = find_action<act::StopAgent>(formed);
  REQUIRE(stop != nullptr);
  CHECK(stop->host == "c");
}

TEST_CASE("elastic driver: a host that cannot join is charged, a removal below --min-np waits",
          "[elastic]") {
  using namespace std::chrono_literals;
  const auto t0 = Clock::now();
  ElasticPolicy p = cooling_policy(2, 1 << 20, 5);
  p.discovery = true;
  ElasticDriver d(p, {{"a", 1}, {"b", 1}}, {{0, {"a", 0}}, {1, {"b", 0}}}, "a", 29500, t0);
  d.start({}, t0);
  d.on_discovered({{"a", 1}, {"b", 1}, {"c", 1}}, t0);
  const auto failed = d.on_join_failed("c", "connection_refused: ...", t0);
  CHECK(has_log(failed, "host c could not join: connection_refused"));
  CHECK(has_log(failed, "host c cools down for 5.0 s"));
  CHECK_FALSE(d.joining("c"));
  // After its cooldown it is tried again.
  CHECK(find_action<act::StartAgent>(d.on_tick(t0 + 4s)) == nullptr);
  const auto again = d.on_tick(t0 + 5s);
  REQUIRE(find_action<act::StartAgent>(again) != nullptr);
  // b leaves the list, but without it 1 rank would remain (--min-np 2): it stays, said once.
  const auto kept = d.on_discovered({{"a", 1}, {"c", 1}}, t0 + 6s);
  CHECK(find_action<act::Publish>(kept) == nullptr);
  CHECK(has_log(kept, "b#0 left the host discovery's list, but without it fewer than --min-np 2"));
  // c's agent comes up: now b can go and c takes its place.
  const auto swap = d.on_agent_ready("c", t0 + 7s);
  const auto* publish = find_action<act::Publish>(swap);
  REQUIRE(publish != nullptr);
  CHECK(publish->workers == std::vector<int>{0, 2});
  CHECK(publish->doc.workers[1].host == "c");
}
