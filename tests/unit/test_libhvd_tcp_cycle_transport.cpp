// The negotiation cycles' collectives over TCP (allreduce/engine/tcp_cycle_transport.h), with
// ranks as threads on real sockets (socketpairs in a star around rank 0, as ControlPlane::adopt
// takes them): allgather and AND rounds in turn, a part larger than the sockets' buffers, a job of
// one rank, and the errors that end the cycles.
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include "tests/support/catch.h"

#include "allreduce/api/status_error.h"
#include "allreduce/engine/control_plane.h"
#include "allreduce/engine/tcp_cycle_transport.h"
#include "common/unique_fd.h"
#include "tests/unit/libhvd_engine_helpers.h"

using Catch::Matchers::ContainsSubstring;
using hvd::runtime::ControlPlane;
using hvd::runtime::StatusError;
using hvd::runtime::TcpCycleTransport;

namespace {

std::vector<std::unique_ptr<TcpCycleTransport>> star(int n) {
  auto peers = hvd::test::socketpair_star(n);
  std::vector<std::unique_ptr<TcpCycleTransport>> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(std::make_unique<TcpCycleTransport>(
        ControlPlane::adopt(r, n, std::move(peers[static_cast<std::size_t>(r)]))));
  }
  return out;
}

// Runs `start`, then polls `t`'s allgather round (`polls` times at most) until it throws: the
// error that ends the cycles. FAILs with `what` if the round completes or never fails.
template <class Start>
StatusError round_error(TcpCycleTransport& t, Start start, const char* what, int polls = 1000) {
  try {
    start();
    for (int i = 0; i < polls && t.gathered() == nullptr; ++i) std::this_thread::yield();
  } catch (const StatusError& e) {
    return e;
  }
  FAIL(what);
  return StatusError(HVD_ERR_INTERNAL, "not reached");
}

// Rank `r`'s part of allgather round `k`: round 3 brings 3 MiB from every rank, more than a
// socketpair buffers, so the members' sends take several polls.
std::string part(int r, int k) {
  const std::size_t n =
      k == 3 ? (3u << 20) + static_cast<std::size_t>(r) : 10u * static_cast<std::size_t>(r + k);
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>('a' + (i + static_cast<std::size_t>(r * 7 + k)) % 26);
  return s;
}

std::vector<std::uint64_t> words(int r, int k) {
  // Bit r of word 0 is clear on rank r only; word 1 is the same everywhere.
  return {~(std::uint64_t{1} << r), 0xF0F0ull + static_cast<std::uint64_t>(k)};
}

}  // namespace

TEST_CASE("tcp cycles: 3 ranks in threads, allgather and AND rounds in turn", "[libhvd][engine]") {
  constexpr int kRanks = 3, kRounds = 10;
  auto t = star(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      TcpCycleTransport& tr = *t[static_cast<std::size_t>(r)];
      try {
        for (int k = 0; k < kRounds; ++k) {
          if (k % 2 == 1) {
            tr.start(part(r, k), 0);
            const std::vector<std::string>* all = nullptr;
            while ((all = tr.gathered()) == nullptr) std::this_thread::yield();
            for (int from = 0; from < kRanks; ++from) {
              if ((*all)[static_cast<std::size_t>(from)] != part(from, k)) {
                errors[static_cast<std::size_t>(r)] += "round " + std::to_string(k) + ": rank " +
                                                       std::to_string(from) + "'s part differs; ";
              }
            }
          } else {
            tr.start_and(words(r, k));
            std::optional<std::vector<std::uint64_t>> anded;
            while (!(anded = tr.anded())) std::this_thread::yield();
            const std::vector<std::uint64_t> expected{~std::uint64_t{0b111},
                                                      0xF0F0ull + static_cast<std::uint64_t>(k)};
            if (*anded != expected) errors[static_cast<std::size_t>(r)] += "AND differs; ";
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] += e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    CHECK(errors[static_cast<std::size_t>(r)].empty());
  }
}

TEST_CASE("tcp cycles: a job of one rank completes each round at once", "[libhvd][engine]") {
  TcpCycleTransport alone(ControlPlane::adopt(0, 1, {}));
  alone.start("mine", 0);
  const auto* all = alone.gathered();
  REQUIRE(all != nullptr);
  REQUIRE(all->size() == 1);
  CHECK((*all)[0] == "mine");
  alone.start_and({0b1010, 7});
  const auto anded = alone.anded();
  REQUIRE(anded);
  CHECK(*anded == std::vector<std::uint64_t>{0b1010, 7});
}

TEST_CASE("tcp cycles: a rank whose connection closes is named, with PEER_LOST",
          "[libhvd][engine]") {
  SECTION("rank 0 waits for a member that is gone") {
    auto t = star(3);
    t[2].reset();  // rank 2's end closes
    t[1]->start("one", 0);
    const StatusError e = round_error(
        *t[0], [&] { t[0]->start("root", 0); },  // polls once: may see it at once
        "rank 0's round completed without rank 2");
    CHECK(e.status() == HVD_ERR_PEER_LOST);
    CHECK_THAT(e.what(), ContainsSubstring("rank 2") && ContainsSubstring("closed"));
  }
  SECTION("a member waits for rank 0, which is gone") {
    auto t = star(2);
    t[0].reset();
    const StatusError e = round_error(
        *t[1], [&] { t[1]->start("one", 0); },  // sends, then polls once: may see it at once
        "rank 1's round completed without rank 0");
    CHECK(e.status() == HVD_ERR_PEER_LOST);
    CHECK_THAT(e.what(), ContainsSubstring("rank 0"));
  }
}

TEST_CASE("tcp cycles: a part of another round is a protocol error, not a result",
          "[libhvd][engine]") {
  auto t = star(2);
  t[0]->start("gather", 0);  // rank 0 gathers
  t[1]->start_and({1, 2});   // rank 1 brings words: the ranks disagree on the round
  const StatusError e = round_error(
      *t[0], [] {}, "rank 0 took an AND part for its allgather", 100000);
  CHECK(e.status() == HVD_ERR_BACKEND);
  CHECK_THAT(e.what(), ContainsSubstring("another round"));
}

TEST_CASE("tcp cycles: rank 0's abort reaches a member in a round ahead of its departure",
          "[libhvd][engine]") {
  auto t = star(3);
  t[1]->start("one", 0);  // in a round rank 0 will never finish
  t[0]->abort("rank 2 left the job without calling hvd::shutdown()", HVD_ERR_PEER_LOST);
  t[0].reset();  // then rank 0 leaves: its connections close after the abort
  const StatusError e = round_error(
      *t[1], [] {}, "rank 1's round completed");
  CHECK(e.status() == HVD_ERR_PEER_LOST);
  CHECK(std::string(e.what()) == "rank 2 left the job without calling hvd::shutdown()");
  t[2]->abort("a member's abort does nothing", HVD_ERR_BACKEND);  // only rank 0 speaks for all
}

TEST_CASE("tcp cycles: a member that sent its part and stopped reading is a timeout, not a hang",
          "[libhvd][engine]") {
  auto peers = hvd::test::socketpair_star(2);
  TcpCycleTransport root(ControlPlane::adopt(0, 2, std::move(peers[0])),
                         std::chrono::milliseconds(300));
  TcpCycleTransport member(ControlPlane::adopt(1, 2, std::move(peers[1])));
  member.start("one", 0);  // its part goes out whole; then it never polls again (frozen)
  const auto start = std::chrono::steady_clock::now();
  // A result of 8 MiB: more than the member's socket buffers hold.
  const StatusError e = round_error(
      root, [&] { root.start(std::string(8u << 20, 'x'), 0); },
      "rank 0 sent 8 MiB to a rank that reads nothing");
  CHECK(e.status() == HVD_ERR_TIMEOUT);
  CHECK_THAT(e.what(), ContainsSubstring("rank 1 did not read") && ContainsSubstring("300 ms"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}
