// The rendezvous server under unauthenticated traffic (issue 18, finding 1): what a client without
// the token can make it hold (memory, threads, time) is bounded, and the ranks are served while
// hostile connections are open. In-process, over real TCP on 127.0.0.1.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include "tests/support/catch.h"

#include "common/unique_fd.h"
#include "launcher/native/rendezvous_server.h"

using hvd::UniqueFd;
using hvd::launcher::HttpLimits;
using hvd::launcher::RendezvousServer;
using Clock = std::chrono::steady_clock;

namespace {

httplib::Headers auth(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }

UniqueFd connect_to(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return {};
  return fd;
}

bool send_text(int fd, const std::string& s) {
  return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
}

// Seconds until the server closes `fd` (reading and discarding what it sends), or -1 when it is
// still open after `limit` seconds.
double seconds_until_closed(int fd, double limit, std::string* answer = nullptr) {
  const auto start = Clock::now();
  char buf[4096];
  for (;;) {
    const double used = std::chrono::duration<double>(Clock::now() - start).count();
    if (used >= limit) return -1;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>((limit - used) * 1000) + 1) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return std::chrono::duration<double>(Clock::now() - start).count();
    if (answer != nullptr) answer->append(buf, static_cast<size_t>(n));
  }
}

// The process's peak resident set (VmHWM), in KiB.
long peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmHWM:") {
      status >> value;
      return value;
    }
    status.ignore(1 << 20, '\n');
  }
  return -1;
}

// PUT then GET of one key, as a rank does; true when both answered as they should.
bool rank_round_trip(int port, const std::string& token, int rank) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  const std::string key = "/job/rank" + std::to_string(rank);
  auto put = client.Put(key, auth(token), std::to_string(rank), "text/plain");
  auto get = client.Get(key, auth(token));
  return put && put->status == 200 && get && get->status == 200 &&
         get->body == std::to_string(rank);
}

}  // namespace

TEST_CASE("rendezvous under attack: bytes without a newline do not grow the server",
          "[rendezvous][hostile]") {
  // Debian's cpp-httplib keeps a header line in memory until its newline: 64 MiB of 'A' grew
  // the server by at least as much. Each connection now holds at most 8 KiB, then gets 431.
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  const long before = peak_rss_kib();
  static const std::string chunk(64 * 1024, 'A');
  std::vector<std::thread> attackers;
  std::atomic<long> refused{0};
  for (int t = 0; t < 4; ++t) {
    attackers.emplace_back([&] {
      UniqueFd fd = connect_to(port);
      send_text(fd.get(), "PUT /s/k HTTP/1.1\r\nX-Long: ");
      std::size_t sent = 0;
      while (sent < (16u << 20) && send_text(fd.get(), chunk)) sent += chunk.size();
      if (sent < (16u << 20)) ++refused;  // the server closed it before the 16 MiB were through
    });
  }
  for (auto& t : attackers) t.join();
  const long grown = peak_rss_kib() - before;
  INFO("peak RSS grew by " << grown << " KiB");
  CHECK(grown < 8 * 1024);
  CHECK(refused == 4);
  CHECK(rank_round_trip(port, server.token(), 0));
}

TEST_CASE("rendezvous under attack: a head over 8 KiB is answered 431 and closed",
          "[rendezvous][hostile]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  UniqueFd fd = connect_to(port);
  std::string head = "GET /s/k HTTP/1.1\r\n";
  while (head.size() < 9000) head += "X-Filler: " + std::string(50, 'f') + "\r\n";
  send_text(fd.get(), head);  // many short lines, no blank line
  std::string answer;
  CHECK(seconds_until_closed(fd.get(), 5, &answer) >= 0);
  CHECK_THAT(answer, Catch::Matchers::StartsWith("HTTP/1.1 431"));
}

TEST_CASE("rendezvous under attack: ranks are served while 50 hostile connections are open",
          "[rendezvous][hostile]") {
  // cpp-httplib's 8 threads each took one connection and waited on it with a per-read timeout:
  // clients that send a byte now and then held them all, and the ranks waited behind them.
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  std::vector<UniqueFd> hostile;
  for (int i = 0; i < 50; ++i) {
    hostile.push_back(connect_to(port));
    REQUIRE(hostile.back().valid());
    if (i % 2 == 0) send_text(hostile.back().get(), "GET /s/k HTTP/1.1\r\nX-Slow: ");
  }
  std::atomic<bool> stop{false};
  std::thread slowloris([&] {  // a byte every 100 ms on every other connection
    while (!stop) {
      for (std::size_t i = 0; i < hostile.size(); i += 2) send_text(hostile[i].get(), "a");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the attack is under way
  const auto start = Clock::now();
  std::vector<int> ok(8, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.emplace_back([&, r] { ok[r] = rank_round_trip(port, server.token(), r) ? 1 : 0; });
  }
  for (auto& t : ranks) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  slowloris.join();
  for (int v : ok) CHECK(v == 1);
  CHECK(seconds < 3.0);
  CHECK(server.size() == 8);
}

TEST_CASE("rendezvous under attack: a slow head is cut at its deadline", "[rendezvous][hostile]") {
  HttpLimits limits;
  limits.head_time = std::chrono::milliseconds(500);
  RendezvousServer server(hvd::launcher::random_token(), limits);
  const int port = server.start("127.0.0.1");
  UniqueFd idle = connect_to(port);
  UniqueFd slow = connect_to(port);
  std::thread dribble([&] {
    for (int i = 0; i < 30 && send_text(slow.get(), "a"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const double idle_closed = seconds_until_closed(idle.get(), 5);
  const double slow_closed = seconds_until_closed(slow.get(), 5);
  dribble.join();
  CHECK(idle_closed >= 0.3);
  CHECK(idle_closed < 2.0);
  CHECK(slow_closed >= 0);  // a byte every 100 ms does not keep it open
  CHECK(slow_closed < 2.0);
}

TEST_CASE("rendezvous under attack: an unauthorized request is answered and closed, body unread",
          "[rendezvous][hostile]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  UniqueFd fd = connect_to(port);
  // Announces 16 MiB and sends none of it: the server must not wait for it.
  send_text(fd.get(),
            "PUT /s/k HTTP/1.1\r\nAuthorization: Bearer wrong\r\nContent-Length: 16000000\r\n\r\n");
  std::string answer;
  const double closed = seconds_until_closed(fd.get(), 5, &answer);
  CHECK(closed >= 0);
  CHECK(closed < 2.0);
  CHECK_THAT(answer, Catch::Matchers::StartsWith("HTTP/1.1 401"));
  CHECK(server.stats().rejected == 1);
  CHECK(server.size() == 0);
}

TEST_CASE("rendezvous under attack: the oldest unauthenticated connection makes room",
          "[rendezvous][hostile]") {
  HttpLimits limits;
  limits.max_untrusted = 4;
  RendezvousServer server(hvd::launcher::random_token(), limits);
  const int port = server.start("127.0.0.1");
  // A rank's keep-alive connection, authorized once: never dropped for strangers.
  httplib::Client rank("127.0.0.1", port);
  REQUIRE(rank.Put("/s/k", auth(server.token()), "v", "text/plain")->status == 200);
  std::vector<UniqueFd> strangers;
  for (int i = 0; i < 5; ++i) {
    strangers.push_back(connect_to(port));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // accepted in this order
  }
  CHECK(seconds_until_closed(strangers[0].get(), 2) >= 0);   // the oldest went
  CHECK(seconds_until_closed(strangers[4].get(), 0.3) < 0);  // the newest stays
  auto get = rank.Get("/s/k", auth(server.token()));
  REQUIRE(get);
  CHECK(get->body == "v");
  CHECK(server.stats().requests == 2);
}

TEST_CASE("rendezvous: a keep-alive client's pipelined requests are all answered", "[rendezvous]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  UniqueFd fd = connect_to(port);
  const std::string a = "Authorization: Bearer " + server.token() + "\r\n";
  send_text(fd.get(), "PUT /s/k HTTP/1.1\r\n" + a + "Content-Length: 3\r\n\r\nabc" +
                          "GET /s/k HTTP/1.1\r\n" + a + "\r\n" + "GET /s/k HTTP/1.1\r\n" + a +
                          "Connection: close\r\n\r\n");
  std::string answer;
  CHECK(seconds_until_closed(fd.get(), 5, &answer) >= 0);
  std::size_t replies = 0;
  for (std::size_t at = 0; (at = answer.find("HTTP/1.1 200", at)) != std::string::npos; ++at) {
    ++replies;
  }
  CHECK(replies == 3);
  CHECK(answer.substr(answer.size() - 3) == "abc");
}
