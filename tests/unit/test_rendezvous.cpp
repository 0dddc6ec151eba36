// The rendezvous server in-process, over real HTTP on 127.0.0.1: the key-value protocol, the
// token, the limits, and garbage that must not bring it down.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>
#include "tests/support/catch.h"

#include "contract/rendezvous.h"
#include "launcher/native/rendezvous_server.h"

using hvd::launcher::RendezvousServer;

namespace {

httplib::Headers auth(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }

// Sends raw bytes and returns what came back (possibly nothing).
std::string raw_exchange(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    (void)!::write(fd, bytes.data(), bytes.size());
    ::shutdown(fd, SHUT_WR);
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("rendezvous: put, get, delete and 404", "[rendezvous]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  httplib::Client client("127.0.0.1", port);
  const auto h = auth(server.token());
  auto put =
      client.Put("/gloo/rank0", h, std::string("addr\x00\xff", 6), "application/octet-stream");
  REQUIRE(put);
  CHECK(put->status == 200);
  auto get = client.Get("/gloo/rank0", h);
  REQUIRE(get);
  CHECK(get->status == 200);
  CHECK(get->body == std::string("addr\x00\xff", 6));
  CHECK(client.Get("/gloo/rank1", h)->status == 404);
  CHECK(client.Get("/other/rank0", h)->status == 404);  // scopes are separate
  CHECK(client.Delete("/gloo/rank0", h)->status == 200);
  CHECK(client.Delete("/gloo/rank0", h)->status == 404);
  CHECK(client.Get("/gloo/rank0", h)->status == 404);
  CHECK(server.size() == 0);
}

TEST_CASE("rendezvous: scope rounds are named <scope>.r<N>", "[rendezvous]") {
  using hvd::contract::rendezvous::scope_round;
  CHECK(scope_round("job.global").base == "job.global");
  CHECK(scope_round("job.global").round == 0);
  CHECK(scope_round("job.global.r12").base == "job.global");
  CHECK(scope_round("job.global.r12").round == 12);
  CHECK(scope_round("job.gen3.r2").base == "job.gen3");
  // Not rounds: names of their own.
  for (const char* name : {"job.global.r0", "job.global.r007", "job.global.r-5", "job.global.r+5",
                           "job.global.r", "job.global.rx", ".r5", "job.global.r1234567890"}) {
    INFO(name);
    CHECK(scope_round(name).base == name);
    CHECK(scope_round(name).round == 0);
  }
}

TEST_CASE("rendezvous: a round's first key drops the rounds every rank is done with",
          "[rendezvous]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  httplib::Client client("127.0.0.1", port);
  const auto h = auth(server.token());
  auto put = [&](const std::string& path) {
    auto r = client.Put(path, h, "v", "application/octet-stream");
    REQUIRE(r);
    CHECK(r->status == 200);
  };
  auto status = [&](const std::string& path) { return client.Get(path, h)->status; };
  put("/job.global/rank0");
  put("/job.global/rank1");
  put("/job.global.r1/rank0");
  put("/other/rank0");           // another scope: kept
  put("/job.globalx.r9/rank0");  // another base: kept
  CHECK(server.size() == 5);     // round 1 keeps round 0: a rank may still read it
  put("/job.global.r2/rank0");   // every rank is past round 0
  CHECK(status("/job.global/rank0") == 404);
  CHECK(status("/job.global/rank1") == 404);
  CHECK(status("/job.global.r1/rank0") == 200);
  CHECK(status("/job.global.r2/rank0") == 200);
  CHECK(status("/other/rank0") == 200);
  CHECK(status("/job.globalx.r9/rank0") == 200);
  CHECK(server.size() == 4);
  put("/job.global.r1/rank1");  // a late key of round 1 (round 2 has begun): stored
  CHECK(status("/job.global.r1/rank1") == 200);
  server.put("job.global.r5", "rank0", "v");  // the launcher's own writes count too
  CHECK(status("/job.global.r1/rank0") == 404);
  CHECK(status("/job.global.r2/rank0") == 404);
  CHECK(status("/job.global.r5/rank0") == 200);
  CHECK(server.size() == 3);  // other, job.globalx.r9, job.global.r5
}

TEST_CASE("rendezvous: a missing or wrong token is refused", "[rendezvous]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  httplib::Client client("127.0.0.1", port);
  CHECK(client.Put("/s/k", "v", "text/plain")->status == 401);
  CHECK(client.Get("/s/k", auth("0123"))->status == 401);
  CHECK(client.Get("/s/k", auth(server.token() + "x"))->status == 401);
  CHECK(client.Get("/s/k", {{"Authorization", server.token()}})->status == 401);  // no Bearer
  CHECK(server.size() == 0);
  CHECK(server.token().size() == 64);
  CHECK(server.token() != hvd::launcher::random_token());
}

TEST_CASE("rendezvous: bad names and oversized values get a 4xx", "[rendezvous]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  httplib::Client client("127.0.0.1", port);
  const auto h = auth(server.token());
  CHECK(client.Get("/s/a%20b", h)->status == 400);
  CHECK(client.Get("/s/" + std::string(300, 'k'), h)->status == 400);
  CHECK(client.Get("/only-one-part", h)->status == 404);
  const std::string huge(hvd::contract::rendezvous::kMaxValue + 1, 'x');
  auto res = client.Put("/s/big", h, huge, "application/octet-stream");
  CHECK((!res || res->status == 413));
  CHECK(server.size() == 0);
}

TEST_CASE("rendezvous: garbage on the socket does not bring it down", "[rendezvous]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  for (const std::string& junk :
       {std::string("\x16\x03\x01\x02\x00garbage", 10), std::string("GET\r\n\r\n"),
        std::string("PUT /s/k HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n"),
        std::string(100000, 'A'), std::string("")}) {
    const std::string answer = raw_exchange(port, junk);
    if (!answer.empty()) CHECK_THAT(answer, Catch::Matchers::StartsWith("HTTP/1.1 4"));
  }
  httplib::Client client("127.0.0.1", port);
  auto res = client.Put("/s/k", auth(server.token()), "still here", "text/plain");
  REQUIRE(res);
  CHECK(res->status == 200);
}

TEST_CASE("rendezvous: many ranks at once", "[rendezvous]") {
  RendezvousServer server(hvd::launcher::random_token());
  const int port = server.start("127.0.0.1");
  std::vector<int> status(64, 0);  // more than the library's default backlog of 5
  std::vector<std::thread> ranks;
  for (int r = 0; r < 64; ++r) {
    ranks.emplace_back([&, r] {
      httplib::Client client("127.0.0.1", port);
      auto res = client.Put("/job/rank" + std::to_string(r), auth(server.token()),
                            std::to_string(r), "text/plain");
      status[r] = res ? res->status : -1;
    });
  }
  for (auto& t : ranks) t.join();
  for (int s : status) CHECK(s == 200);  // asserted on the main thread
  CHECK(server.size() == 64);
}

// A job that ends at once (a missing --wd) destroys the server right after start(): cpp-httplib's
// stop() used to miss a listening thread that had not started yet, which then accepted forever.
TEST_CASE("rendezvous: a server destroyed right after start() does not hang", "[rendezvous]") {
  for (int i = 0; i < 200; ++i) {
    RendezvousServer server("token");
    REQUIRE(server.start("127.0.0.1") > 0);
  }  // each destructor must return; a hang is ctest's timeout
  SUCCEED("200 start/stop cycles");
}
