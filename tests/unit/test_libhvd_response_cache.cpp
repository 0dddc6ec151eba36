// libhvd's response cache (allreduce/engine/response_cache.h) and the negotiation cycles'
// messages (messages.h): slots, least recently used out, and the codecs' round trips and refusals.
#include "allreduce/backends/backend.h"
#include "allreduce/engine/response_cache.h"

#include <algorithm>
#include <list>
#include <random>
#include "tests/unit/libhvd_control_helpers.h"

using hvd::runtime::CycleContribution;
using hvd::runtime::CycleSignal;
using hvd::runtime::Request;
using hvd::runtime::ResponseCache;

namespace {

Request named(const std::string& name, std::int64_t n = 8) {
  Request r;
  r.name = name;
  r.shape = {n};
  return r;
}

}  // namespace

TEST_CASE("response cache: a hit needs the same request, and a slot names one tensor", "[libhvd]") {
  ResponseCache cache(4);
  CHECK_FALSE(cache.hit(named("a")));
  cache.put(named("a"));
  cache.put(named("b"));
  REQUIRE(cache.hit(named("a")));
  REQUIRE(cache.hit(named("b")));
  const auto a = *cache.hit(named("a"));
  CHECK(a != *cache.hit(named("b")));
  CHECK(cache.at(a)->name == "a");
  CHECK_FALSE(cache.hit(named("a", 9)));  // another shape: a miss, negotiated in full
  Request other_op = named("a");
  other_op.op = hvd::ReduceOp::kMax;
  CHECK_FALSE(cache.hit(other_op));
  cache.put(named("a", 9));  // ran with the new shape: the slot keeps its number, new request
  CHECK(cache.hit(named("a", 9)) == a);
  CHECK_FALSE(cache.hit(named("a")));
  CHECK(cache.at(99) == nullptr);
}

TEST_CASE("response cache: random puts, refreshes and erases keep the order of a plain LRU list",
          "[libhvd]") {
  // Reference model: names, most recently used first.
  std::mt19937 rng(7);
  for (const std::size_t capacity : {1u, 3u, 8u}) {
    ResponseCache cache(capacity);
    std::list<std::string> model;
    for (int step = 0; step < 4000; ++step) {
      const std::string name = "t" + std::to_string(rng() % 12);
      const auto in_model = std::find(model.begin(), model.end(), name);
      if (rng() % 5 == 0) {
        cache.erase(name);
        if (in_model != model.end()) model.erase(in_model);
      } else {
        // Sometimes with the slot it had as the hint, as the engine does.
        const auto hint = cache.hit(named(name));
        cache.put(named(name), hint && rng() % 2 == 0 ? *hint : ResponseCache::kNoSlot);
        if (in_model != model.end()) model.erase(in_model);
        model.push_front(name);
        if (model.size() > capacity) model.pop_back();
      }
      INFO("capacity " << capacity << ", step " << step << ", " << name);
      REQUIRE(cache.size() == model.size());
      for (int t = 0; t < 12; ++t) {
        const std::string n = "t" + std::to_string(t);
        const bool cached = std::find(model.begin(), model.end(), n) != model.end();
        REQUIRE(cache.hit(named(n)).has_value() == cached);
      }
    }
  }
}

TEST_CASE("response cache: full, the least recently used goes and its slot is reused", "[libhvd]") {
  ResponseCache cache(2);
  cache.put(named("a"));
  cache.put(named("b"));
  const auto slot_a = *cache.hit(named("a"));
  cache.put(named("a"));  // a ran again: b is now the least recently used
  cache.put(named("c"));
  CHECK(cache.size() == 2);
  CHECK(cache.hit(named("a")));
  CHECK_FALSE(cache.hit(named("b")));
  REQUIRE(cache.hit(named("c")));
  CHECK(*cache.hit(named("c")) != slot_a);

  // 10 names in turn through 2 slots: never a hit (the classic LRU worst case).
  int hits = 0;
  for (int round = 0; round < 5; ++round) {
    for (int t = 0; t < 10; ++t) {
      const Request r = named("cycle." + std::to_string(t));
      if (cache.hit(r)) ++hits;
      cache.put(r);
    }
  }
  CHECK(hits == 0);
  CHECK(cache.size() == 2);
}

TEST_CASE("response cache: put's slot hint refreshes its own name only", "[libhvd]") {
  ResponseCache cache(2);
  cache.put(named("a"));
  cache.put(named("b"));
  const auto slot_a = *cache.hit(named("a"));
  const auto slot_b = *cache.hit(named("b"));
  cache.put(named("a"), slot_a);  // a ran again, found by its hint: b is the least recently used
  cache.put(named("c"), ResponseCache::kNoSlot);
  CHECK(cache.hit(named("a")) == slot_a);
  CHECK_FALSE(cache.hit(named("b")));
  CHECK(cache.hit(named("c")) == slot_b);  // c took b's slot

  // A stale hint (b's old slot, now c's) is ignored: b is cached as a new name, c stays
  // where it was until the least recently used (a) makes room.
  cache.put(named("b"), slot_b);
  CHECK(cache.hit(named("b")) == slot_a);
  CHECK(cache.hit(named("c")) == slot_b);
  CHECK_FALSE(cache.hit(named("a")));
  // A hint with the right name but another request: the slot takes the new request.
  cache.put(named("c", 9), slot_b);
  CHECK(cache.hit(named("c", 9)) == slot_b);
  CHECK_FALSE(cache.hit(named("c")));
  CHECK(cache.size() == 2);
}

TEST_CASE("response cache: erase frees the slot for the next name, capacity 0 keeps nothing",
          "[libhvd]") {
  ResponseCache cache(3);
  cache.put(named("a"));
  cache.put(named("b"));
  const auto slot_a = *cache.hit(named("a"));
  cache.erase("a");  // a failed (a mismatch): negotiated in full next time
  CHECK_FALSE(cache.hit(named("a")));
  CHECK(cache.at(slot_a) == nullptr);
  cache.put(named("d"));
  CHECK(cache.hit(named("d")) == slot_a);
  cache.erase("never cached");
  CHECK(cache.size() == 2);

  ResponseCache off(0);
  off.put(named("a"));
  CHECK(off.size() == 0);
  CHECK_FALSE(off.hit(named("a")));
}

TEST_CASE("response cache: two ranks fed the same sequence agree on every slot", "[libhvd]") {
  // What keeps slots meaningful across ranks: the same puts and erases in the same order give
  // the same slots, whatever each rank's own requests hold (an allgather's first dimension).
  ResponseCache rank0(3), rank1(3);
  const std::vector<std::string> sequence{"a", "b", "c", "a", "d", "e", "b", "a", "f"};
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    rank0.put(named(sequence[i], 4));
    rank1.put(named(sequence[i], 5));
    if (i == 4) {
      rank0.erase("c");
      rank1.erase("c");
    }
  }
  for (const std::string n : {"a", "b", "c", "d", "e", "f"}) {
    INFO(n);
    CHECK(rank0.hit(named(n, 4)) == rank1.hit(named(n, 5)));
  }
}

TEST_CASE("codec: cycle contributions and signals round-trip and refuse garbage", "[libhvd]") {
  CycleContribution c;
  c.hits = {0, 7, 1023};
  c.misses = full_request_list();
  CHECK(hvd::runtime::decode_contribution(hvd::runtime::encode(c)) == c);
  CHECK(hvd::runtime::decode_contribution(hvd::runtime::encode(CycleContribution{})) ==
        CycleContribution{});
  CycleSignal signal;
  signal.doorbell = 12345678901ull;
  CHECK(hvd::runtime::decode_signal(hvd::runtime::encode(signal)) == signal);
  signal.fatal = "stalled";
  signal.fatal_status = HVD_ERR_PEER_LOST;
  CHECK(hvd::runtime::decode_signal(hvd::runtime::encode(signal)) == signal);

  const std::string contribution = hvd::runtime::encode(c);
  for (std::size_t n = 0; n < contribution.size(); ++n) {
    INFO(n << " of " << contribution.size() << " bytes");
    REQUIRE(status_thrown([&] { hvd::runtime::decode_contribution(contribution.substr(0, n)); }) ==
            HVD_ERR_INTERNAL);
  }
  const std::string wire = hvd::runtime::encode(signal);
  for (std::size_t n = 0; n < wire.size(); ++n) {
    INFO(n << " of " << wire.size() << " bytes");
    REQUIRE(status_thrown([&] { hvd::runtime::decode_signal(wire.substr(0, n)); }) ==
            HVD_ERR_INTERNAL);
  }
  CHECK(status_thrown([&] { hvd::runtime::decode_signal(wire + "x"); }) == HVD_ERR_INTERNAL);
  // 2^32-1 hits announced, four bytes follow: refused before allocating.
  CHECK(status_thrown([] { hvd::runtime::decode_contribution("\xFF\xFF\xFF\xFF\0\0\0\0"s); }) ==
        HVD_ERR_INTERNAL);
}

TEST_CASE(
    "codec: a contribution framed with eager data splits back, aligned, and garbage is refused",
    "[libhvd]") {
  for (const std::size_t head_size : {0, 1, 15, 16, 17, 90}) {
    for (const std::size_t data_size : {0, 1, 4096}) {
      INFO("head " << head_size << " bytes, data " << data_size);
      const std::string head(head_size, 'h');
      std::string data(data_size, '\0');
      for (std::size_t i = 0; i < data_size; ++i) data[i] = static_cast<char>(i * 7 + 1);
      std::string framed = head;
      hvd::runtime::frame_contribution(framed, data);
      const auto split = hvd::runtime::unframe_contribution(framed);
      CHECK(split.head == head);
      CHECK(split.data == data);
      if (data_size > 0) {
        CHECK(static_cast<std::size_t>(split.data.data() - framed.data()) %
                  hvd::runtime::kEagerAlign ==
              0);
      }
      for (std::size_t n = 0; n < framed.size(); ++n) {  // any cut breaks the trailer's sums
        INFO("cut to " << n);
        REQUIRE(status_thrown([&] { hvd::runtime::unframe_contribution(framed.substr(0, n)); }) ==
                HVD_ERR_INTERNAL);
      }
    }
  }
  // A trailer that claims more than the message holds (4 GiB of data): refused, no overflow.
  CHECK(status_thrown([] { hvd::runtime::unframe_contribution("\x10\0\0\0\xFF\xFF\xFF\xFF"s); }) ==
        HVD_ERR_INTERNAL);
}

TEST_CASE("Open MPI's btl parameters: whether the shared-memory transport is left in", "[libhvd]") {
  using hvd::runtime::open_mpi_btl_shared_memory;
  CHECK(open_mpi_btl_shared_memory("", ""));
  CHECK(open_mpi_btl_shared_memory("^openib,ofi", ""));              // hvdrun's choice on one host
  CHECK_FALSE(open_mpi_btl_shared_memory("^openib,ofi", "vader"));   // the bench's mpi-tcp
  CHECK_FALSE(open_mpi_btl_shared_memory("^openib,vader,ofi", ""));  // two loopback "hosts"
  CHECK_FALSE(open_mpi_btl_shared_memory("^sm", ""));
  CHECK(open_mpi_btl_shared_memory("self,vader,tcp", ""));
  CHECK_FALSE(open_mpi_btl_shared_memory("self,tcp", ""));
  CHECK_FALSE(open_mpi_btl_shared_memory("self,vaderx,tcp", ""));  // names, not substrings
  CHECK_FALSE(open_mpi_btl_shared_memory("", "tcp,vader"));
}

TEST_CASE("response cache: the synchronous calls' automatic names are never kept", "[libhvd]") {
  using hvd::runtime::automatic_name;
  using hvd::runtime::is_automatic_name;
  using hvd::runtime::OpKind;
  CHECK(automatic_name(OpKind::kAllreduce, 0) == "hvd.allreduce.0");
  CHECK(automatic_name(OpKind::kReducescatter, 1234567890123) == "hvd.reducescatter.1234567890123");
  for (int k = 0; k <= static_cast<int>(OpKind::kBarrier); ++k) {
    CHECK(is_automatic_name(automatic_name(static_cast<OpKind>(k), 42)));
  }
  for (const char* name :
       {"hvd.allreduce.", "hvd.allreduce", "hvd.allreduce.1x", "hvd.sum.1", "hvd.allreduce.grad.1",
        "allreduce.1", "xhvd.allreduce.1", "hvd..1", ""}) {
    INFO(name);
    CHECK_FALSE(is_automatic_name(name));
  }
  ResponseCache cache(2);
  cache.put(named("grad"));
  cache.put(named(automatic_name(OpKind::kAllreduce, 7)));
  cache.put(named(automatic_name(OpKind::kBroadcast, 8)));
  CHECK(cache.size() == 1);  // the automatic names took no slot and evicted nothing
  CHECK(cache.hit(named("grad")));
  CHECK_FALSE(cache.hit(named(automatic_name(OpKind::kAllreduce, 7))));
}
