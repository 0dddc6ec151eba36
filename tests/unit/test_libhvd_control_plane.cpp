// libhvd's control-plane set-up (ControlPlane::connect) against connections that are not ranks:
// rank 0's listener must not let idle or slow connections (a port scanner, an attacker who found
// the port) hold up the ranks' handshakes, and it must bind the address it was given. Two ranks
// run in threads over a Backend that carries only the one broadcast connect() makes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "allreduce/api/status_error.h"
#include "allreduce/backends/backend.h"
#include "allreduce/engine/control_plane.h"
#include "common/unique_fd.h"

using namespace hvd::runtime;
using Catch::Matchers::ContainsSubstring;

namespace {

// Rank 0's broadcasts reach rank 1 through a mailbox; `before_receive` runs in rank 1's thread
// once rank 0's address text is known (the length broadcast and the text broadcast), so a test
// can act on the port before rank 1 connects.
struct Mailbox {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> sent;  // rank 0's broadcasts, in order
  std::function<void(const std::string&)> before_connect;
};

class MailboxBackend final : public Backend {
 public:
  MailboxBackend(Mailbox& box, int rank) : box_(box), rank_(rank) {}
  std::string_view name() const override { return "mailbox"; }
  void broadcast(void* data, std::size_t bytes, int) override {
    std::unique_lock<std::mutex> lock(box_.mutex);
    if (rank_ == 0) {
      box_.sent.emplace_back(static_cast<const char*>(data), bytes);
      box_.cv.notify_all();
      return;
    }
    const std::size_t index = received_++;
    box_.cv.wait(lock, [&] { return box_.sent.size() > index; });
    std::memcpy(data, box_.sent[index].data(), bytes);
    if (index == 1 && box_.before_connect) {
      lock.unlock();
      box_.before_connect(box_.sent[1]);  // "token port addr,..."
    }
  }
  void allreduce(void*, std::size_t, hvd::DataType, hvd::ReduceOp) override { unused(); }
  void allgatherv(const void*, void*, const std::vector<std::size_t>&) override { unused(); }
  void alltoallv(const void*, const std::vector<std::size_t>&, void*,
                 const std::vector<std::size_t>&) override {
    unused();
  }
  void reducescatter(const void*, void*, const std::vector<std::size_t>&, hvd::DataType,
                     hvd::ReduceOp) override {
    unused();
  }
  void barrier() override { unused(); }

 private:
  [[noreturn]] static void unused() { throw std::logic_error("connect() made another call"); }
  Mailbox& box_;
  int rank_;
  std::size_t received_ = 0;
};

int port_of(const std::string& shared) {  // "token port addrs"
  const auto a = shared.find(' ');
  return std::stoi(shared.substr(a + 1, shared.find(' ', a + 1) - a - 1));
}

hvd::UniqueFd connect_loopback(int port) {
  hvd::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

struct Outcome {
  std::optional<ControlPlane> plane;
  std::string error;
};

Outcome run_rank(Backend& backend, int rank, std::chrono::milliseconds timeout) {
  Outcome out;
  try {
    out.plane = ControlPlane::connect(backend, rank, 2, "127.0.0.1", timeout);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

TEST_CASE("control plane: idle connections to rank 0's port do not hold up the ranks",
          "[libhvd][control_plane]") {
  // Each idle connection used to get 5 s to say hello, one after the other: four of them made a
  // 2-rank init() time out at 10 s. Handshakes now run side by side.
  Mailbox box;
  std::vector<hvd::UniqueFd> idle;
  std::string garbage_answer = "unset";
  box.before_connect = [&](const std::string& shared) {
    for (int i = 0; i < 4; ++i) idle.push_back(connect_loopback(port_of(shared)));
    // One more sends a wrong token with a valid rank: it must be dropped, not answered "ok".
    hvd::UniqueFd liar = connect_loopback(port_of(shared));
    std::string hello(32, 'f');
    const std::uint32_t one = 1;
    hello.append(reinterpret_cast<const char*>(&one), 4);
    REQUIRE(::send(liar.get(), hello.data(), hello.size(), MSG_NOSIGNAL) == 36);
    char buf[2];
    timeval tv{3, 0};
    ::setsockopt(liar.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t n = ::recv(liar.get(), buf, sizeof buf, 0);
    garbage_answer = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "closed";
  };
  MailboxBackend b0(box, 0), b1(box, 1);
  const auto start = std::chrono::steady_clock::now();
  auto r0 =
      std::async(std::launch::async, [&] { return run_rank(b0, 0, std::chrono::seconds(10)); });
  auto r1 =
      std::async(std::launch::async, [&] { return run_rank(b1, 1, std::chrono::seconds(10)); });
  Outcome o0 = r0.get();
  Outcome o1 = r1.get();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(o0.error == "");
  CHECK(o1.error == "");
  CHECK(garbage_answer == "closed");  // a wrong token is never told "ok"
  CHECK(seconds < 8.0);  // the liar's 3 s wait at most, not 4 x 5 s of idle connections
  REQUIRE(o0.plane);
  REQUIRE(o1.plane);
  // The connection rank 0 kept is rank 1's: a message goes through.
  REQUIRE(o1.plane->send(0, "hello from 1"));
  pollfd p{o0.plane->peer(1), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  const auto got = o0.plane->receive(1);
  REQUIRE(got);
  REQUIRE(got->size() == 1);
  CHECK((*got)[0] == "hello from 1");
}

TEST_CASE("control plane: rank 0 listens on the address it is given, not every interface",
          "[libhvd][control_plane]") {
  Mailbox box;
  std::string bound = "none";
  box.before_connect = [&](const std::string& shared) {
    // The listener's own address, read from a connection to it.
    hvd::UniqueFd probe = connect_loopback(port_of(shared));
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    ::getpeername(probe.get(), reinterpret_cast<sockaddr*>(&peer), &len);
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
    bound = text;
    // And the addresses rank 0 advertised: only the one it was given.
    CHECK(shared.substr(shared.rfind(' ') + 1) == "127.0.0.1");
  };
  MailboxBackend b0(box, 0), b1(box, 1);
  auto r0 =
      std::async(std::launch::async, [&] { return run_rank(b0, 0, std::chrono::seconds(10)); });
  auto r1 =
      std::async(std::launch::async, [&] { return run_rank(b1, 1, std::chrono::seconds(10)); });
  CHECK(r0.get().error == "");
  CHECK(r1.get().error == "");
  CHECK(bound == "127.0.0.1");
}

TEST_CASE("control plane: address_in_networks picks this host's address in a CIDR or interface",
          "[libhvd][control_plane]") {
  CHECK(address_in_networks("") == "");
  CHECK(address_in_networks("127.0.0.0/8") == "127.0.0.1");
  CHECK(address_in_networks("10.255.255.0/30,127.0.0.1/32") == "127.0.0.1");
  CHECK(address_in_networks("lo") == "127.0.0.1");
  CHECK(address_in_networks("0.0.0.0/32") == "");  // no interface has that address
  CHECK(address_in_networks("127.0.0.0/99,garbage") == "");
}

TEST_CASE("control plane: two planes through one listener, each connection its own",
          "[libhvd][control_plane]") {
  // The TCP cycles (HOROVOD_GLOO_CYCLES=1) negotiate on a second plane: it must cost no second
  // port (--port-range budgets one for rank 0), and a message on one plane never shows on the
  // other.
  Mailbox box;
  int ports_shared = 0;
  box.before_connect = [&](const std::string&) { ++ports_shared; };
  MailboxBackend b0(box, 0), b1(box, 1);
  const auto connect = [](Backend& b, int rank) {
    return ControlPlane::connect_planes(2, b, rank, 2, "127.0.0.1", std::chrono::seconds(10));
  };
  auto r0 = std::async(std::launch::async, [&] { return connect(b0, 0); });
  auto r1 = std::async(std::launch::async, [&] { return connect(b1, 1); });
  std::vector<ControlPlane> p0 = r0.get();
  std::vector<ControlPlane> p1 = r1.get();
  REQUIRE(p0.size() == 2);
  REQUIRE(p1.size() == 2);
  CHECK(ports_shared == 1);  // one address and port for both planes
  CHECK(box.sent.size() == 2);
  for (int plane = 0; plane < 2; ++plane) {
    INFO("plane " << plane);
    const std::string text = "on plane " + std::to_string(plane);
    REQUIRE(p1[static_cast<std::size_t>(plane)].send(0, text));
    pollfd p{p0[static_cast<std::size_t>(plane)].peer(1), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    const auto got = p0[static_cast<std::size_t>(plane)].receive(1);
    REQUIRE(got);
    REQUIRE(got->size() == 1);
    CHECK((*got)[0] == text);
    // Nothing arrived on the other plane.
    pollfd other{p0[static_cast<std::size_t>(1 - plane)].peer(1), POLLIN, 0};
    CHECK(::poll(&other, 1, 0) == 0);
  }
}
