// A rank program for tests: proves MASTER_ADDR:MASTER_PORT works as torch.distributed's env://
// initialisation uses it. Rank 0 listens there; every other rank connects (retrying while rank 0
// starts) and sends one line, which rank 0 prints. Exits non-zero with a message on any failure.
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

addrinfo* resolve(const std::string& host, const std::string& port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* ai = nullptr;
  return getaddrinfo(host.c_str(), port.c_str(), &hints, &ai) == 0 ? ai : nullptr;
}

int serve(const std::string& host, const std::string& port, int peers) {
  addrinfo* ai = resolve(host, port, true);
  if (ai == nullptr) return std::fprintf(stderr, "rank 0: cannot resolve %s\n", host.c_str()), 2;
  const int fd = socket(ai->ai_family, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
  freeaddrinfo(ai);
  if (!bound || listen(fd, 16) != 0) {
    std::fprintf(stderr, "rank 0: cannot listen on %s:%s\n", host.c_str(), port.c_str());
    return 3;
  }
  for (int i = 0; i < peers; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 15000) != 1) return std::fprintf(stderr, "rank 0: nobody came\n"), 4;
    const int c = accept(fd, nullptr, nullptr);
    char buf[256] = {};
    const ssize_t n = read(c, buf, sizeof buf - 1);
    std::printf("rank 0 got: %.*s\n", static_cast<int>(n > 0 ? n : 0), buf);
    close(c);
  }
  return 0;
}

int call(const std::string& host, const std::string& port, const std::string& rank) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo* ai = resolve(host, port, false);
    if (ai != nullptr) {
      const int fd = socket(ai->ai_family, SOCK_STREAM, 0);
      const bool connected = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
      freeaddrinfo(ai);
      if (connected) {
        const std::string line = "hello from rank " + rank;
        (void)!write(fd, line.data(), line.size());
        close(fd);
        return 0;
      }
      close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "rank %s: cannot reach %s:%s\n", rank.c_str(), host.c_str(), port.c_str());
  return 5;
}

}  // namespace

int main() {
  const std::string host = env("MASTER_ADDR"), port = env("MASTER_PORT"), rank = env("RANK");
  if (host.empty() || port.empty() || rank.empty()) {
    std::fprintf(stderr, "MASTER_ADDR, MASTER_PORT and RANK must be set\n");
    return 1;
  }
  if (rank == "0") return serve(host, port, std::atoi(env("WORLD_SIZE").c_str()) - 1);
  return call(host, port, rank);
}
