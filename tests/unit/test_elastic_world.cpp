// Elastic training's pure parts: the world document every rank reads per generation
// (contract/elastic.h) and which slots a generation takes (launcher/elastic/elastic_world.h); the
// driver is test_elastic_driver.cpp's.
#include "tests/support/catch.h"

#include <string>

#include "common/error.h"
#include "contract/elastic.h"
#include "launcher/elastic/elastic_world.h"

using Catch::Matchers::ContainsSubstring;
using hvd::contract::decode_world;
using hvd::contract::encode_world;
using hvd::contract::RankTopology;
using hvd::contract::WorldDoc;
using hvd::launcher::choose_world;
using hvd::launcher::PoolHost;
using hvd::launcher::SlotKey;
using hvd::launcher::WorldChoice;

namespace {

WorldDoc three_ranks() {
  WorldDoc doc;
  doc.generation = 3;
  doc.reason = "rank 1 on 127.0.0.3 was killed by signal 9\n(SIGKILL)";
  doc.master_addr = "127.0.0.2";
  doc.master_port = 41234;
  doc.sync_root = 1;
  doc.workers = {{0, RankTopology{0, 3, 0, 2, 0, 2}, "127.0.0.2"},
                 {2, RankTopology{1, 3, 1, 2, 0, 1}, "127.0.0.2"},
                 {5, RankTopology{2, 3, 0, 1, 1, 2}, "127.0.0.3"}};
  return doc;
}

// decode_world(text) must throw ContractError whose message contains `what`.
void require_refused(const std::string& text, const std::string& what) {
  INFO(text);
  try {
    decode_world(text);
    FAIL("accepted");
  } catch (const hvd::ContractError& e) {
    CHECK_THAT(e.what(), ContainsSubstring(what));
  }
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("elastic world: the document round-trips, one line per record", "[elastic]") {
  const WorldDoc doc = three_ranks();
  const std::string text = encode_world(doc);
  CHECK(text ==
        "hvd-world 1\n"
        "generation 3\n"
        "reason rank 1 on 127.0.0.3 was killed by signal 9 (SIGKILL)\n"
        "master 127.0.0.2 41234\n"
        "sync_root 1\n"
        "size 3\n"
        "worker 0 rank 0 local 0 2 cross 0 2 host 127.0.0.2\n"
        "worker 2 rank 1 local 1 2 cross 0 1 host 127.0.0.2\n"
        "worker 5 rank 2 local 0 1 cross 1 2 host 127.0.0.3\n");
  WorldDoc back = decode_world(text);
  CHECK(back.reason == "rank 1 on 127.0.0.3 was killed by signal 9 (SIGKILL)");
  back.reason = doc.reason;
  CHECK(back == doc);
  REQUIRE(back.find_worker(5) != nullptr);
  CHECK(back.find_worker(5)->topology.rank == 2);
  CHECK(back.find_worker(1) == nullptr);  // not in this generation
}

// Found by tests/fuzz/world (regressions/world/master-address-with-tab): words are split on ' '
// only, so a tab inside the master address or a host was accepted, and encode_world() then
// refused the document decode_world() had accepted.
TEST_CASE("elastic world: a tab or CR inside an address is refused as encode_world refuses it",
          "[elastic]") {
  const std::string good = encode_world(three_ranks());
  require_refused(replace(good, "master 127.0.0.2 41234", "master 127.0.\t2 41234"),
                  "line 4: a master address with whitespace in it");
  require_refused(replace(good, "host 127.0.0.3", "host 127.0.0.3\r"),
                  "line 9: a host with whitespace in it");
}

TEST_CASE("elastic world: a malformed document is refused, naming the line", "[elastic]") {
  const std::string good = encode_world(three_ranks());
  require_refused("", "line 1: missing; expected 'hvd-world'");
  require_refused(replace(good, "hvd-world 1", "hvd-world 2"),
                  "line 1: format 2, this libhvd reads format 1");
  require_refused(replace(good, "generation 3", "generation -1"), "line 2: the generation '-1'");
  require_refused(replace(good, "master 127.0.0.2 41234", "master 127.0.0.2 70000"),
                  "line 4: the master port '70000' is not a number from 0 to 65535");
  require_refused(replace(good, "sync_root 1", "sync_root 3"), "the sync root '3'");
  require_refused(replace(good, "size 3", "size 0"), "line 6: the size '0'");
  require_refused(replace(good, "size 3", "size 4"), "line 10: missing; expected 'worker'");
  require_refused(replace(good, "size 3", "size 2"), "line 9: expected 'end of the document'");
  require_refused(replace(good, "worker 2 rank 1", "worker 2 rank 2"),
                  "line 8: rank 2 where rank 1 was expected");
  require_refused(replace(good, "worker 5 rank 2", "worker 0 rank 2"),
                  "line 9: worker 0 appears twice");
  require_refused(replace(good, "local 1 2 cross 0 1", "local 2 2 cross 0 1"),
                  "line 8: the local rank '2' is not a number from 0 to 1");
  require_refused(replace(good, "cross 1 2 host", "cross 2 2 host"), "line 9: the cross rank");
  require_refused(replace(good, "host 127.0.0.3", "host 127.0.0.3 extra"),
                  "line 9: expected 12 words, found 13");
  require_refused(good.substr(0, good.size() - 1), "line 9: no newline at its end");
  require_refused(std::string(hvd::contract::kMaxWorldBytes + 1, 'x'), "more than the limit");
}

TEST_CASE("elastic world: the encoder refuses what the decoder would", "[elastic]") {
  WorldDoc doc = three_ranks();
  doc.workers[2].host = "two words";
  CHECK_THROWS_AS(encode_world(doc), hvd::ContractError);
  doc = three_ranks();
  std::swap(doc.workers[0], doc.workers[1]);  // out of rank order
  CHECK_THROWS_AS(encode_world(doc), hvd::ContractError);
}

TEST_CASE("elastic world: keys and scopes", "[elastic]") {
  CHECK(hvd::contract::elastic_scope("job7") == "job7.elastic");
  CHECK(hvd::contract::world_key(4) == "world.4");
  CHECK(hvd::contract::generation_scope("job7", 4) == "job7.gen4");
}

namespace {

std::vector<std::string> slots_text(const WorldChoice& c) {
  std::vector<std::string> out;
  for (const SlotKey& s : c.slots) out.push_back(s.host + "#" + std::to_string(s.slot));
  return out;
}

const hvd::launcher::CoolingFn kNoneCooling = [](const SlotKey&) { return false; };

}  // namespace

TEST_CASE("elastic slots: a first world fills slots in order up to max-np", "[elastic]") {
  const std::vector<PoolHost> pool{{"a", 2}, {"b", 2}, {"c", 1}};
  const WorldChoice c = choose_world(pool, {}, kNoneCooling, 4);
  CHECK(slots_text(c) == std::vector<std::string>{"a#0", "a#1", "b#0", "b#1"});
  REQUIRE(c.placements.size() == 4);
  CHECK(c.placements[2].host_index == 1);
  CHECK(c.placements[2].topology == RankTopology{2, 4, 0, 2, 1, 2});
  CHECK(c.sync_root == 0);
}

TEST_CASE("elastic slots: survivors keep their slots and ranks compact in slot order",
          "[elastic]") {
  const std::vector<PoolHost> pool{{"a", 2}, {"b", 2}};
  // a#1 died and cools down: the three survivors form ranks 0..2 in slot order.
  const auto cooling = [](const SlotKey& s) { return s == SlotKey{"a", 1}; };
  const WorldChoice c = choose_world(pool, {{"b", 1}, {"a", 0}, {"b", 0}}, cooling, 4);
  CHECK(slots_text(c) == std::vector<std::string>{"a#0", "b#0", "b#1"});
  CHECK(c.placements[0].topology == RankTopology{0, 3, 0, 1, 0, 2});
  CHECK(c.placements[1].topology == RankTopology{1, 3, 0, 2, 1, 2});
  CHECK(c.placements[2].topology == RankTopology{2, 3, 1, 2, 0, 1});
  CHECK(c.sync_root == 0);
}

TEST_CASE("elastic slots: a refilled slot before the survivors moves the sync root", "[elastic]") {
  const std::vector<PoolHost> pool{{"a", 1}, {"b", 2}};
  // a#0's worker died; its cooldown ended: a new worker takes it and becomes rank 0, but has no
  // state, so the first survivor (rank 1) is the root everyone syncs from.
  const WorldChoice c = choose_world(pool, {{"b", 0}, {"b", 1}}, kNoneCooling, 8);
  CHECK(slots_text(c) == std::vector<std::string>{"a#0", "b#0", "b#1"});
  CHECK(c.sync_root == 1);
}

TEST_CASE("elastic slots: max-np, removed hosts and cooling slots", "[elastic]") {
  // A lower max-np keeps the first survivors in slot order and adds nothing.
  WorldChoice c =
      choose_world({{"a", 2}, {"b", 2}}, {{"b", 1}, {"a", 1}, {"b", 0}}, kNoneCooling, 2);
  CHECK(slots_text(c) == std::vector<std::string>{"a#1", "b#0"});
  // A survivor whose host left the pool (or lost that slot) is not kept.
  c = choose_world({{"a", 1}}, {{"a", 0}, {"b", 0}, {"a", 1}}, kNoneCooling, 8);
  CHECK(slots_text(c) == std::vector<std::string>{"a#0"});
  // Every free slot cooling: only the survivors.
  c = choose_world(
      {{"a", 2}, {"b", 1}}, {{"a", 1}}, [](const SlotKey&) { return true; }, 8);
  CHECK(slots_text(c) == std::vector<std::string>{"a#1"});
  CHECK(c.placements[0].topology == RankTopology{0, 1, 0, 1, 0, 1});
  // Nothing at all.
  c = choose_world({}, {}, kNoneCooling, 8);
  CHECK(c.size() == 0);
}
