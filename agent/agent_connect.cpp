#include "agent/agent_connect.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "agent/agent.h"
#include "agent/sealed_link.h"
#include "common/fd_io.h"
#include "common/unique_fd.h"

namespace hvd::agent {
namespace {

// The launcher answers a hello at once; it may be busy accepting the other nodes' agents.
constexpr auto kReplyTime = std::chrono::seconds(30);

// One connect with a deadline; an invalid fd when it did not work.
UniqueFd connect_to(const std::string& host, const std::string& port,
                    std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return {};
  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  bool ok = fd.valid();
  if (ok && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) != 0) {
    pollfd p{fd.get(), POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    ok = errno == EINPROGRESS && ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
         ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  ::freeaddrinfo(res);
  if (!ok) return {};
  ::fcntl(fd.get(), F_SETFL, 0);  // blocking, as a pipe would be
  int yes = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  return fd;
}

// Reads exactly `size` bytes within `timeout`; shorter when the peer closes or is silent.
std::string read_exactly(int fd, std::size_t size, std::chrono::milliseconds timeout) {
  std::string out;
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (out.size() < size) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) break;
    char buf[kSealReplyBytes];
    const long n = read_some(fd, buf, std::min(sizeof buf, size - out.size()));
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// The end of the link, the agent's side, once everything of ours is in the kernel's hands: our
// FIN goes after the bytes still queued there, then the launcher's bytes (its pings) are read
// and dropped until it closes its end. Closing at once with some of them unread would make the
// kernel answer with a reset, which throws away whatever of ours the launcher has not read yet:
// with a console that is paused, that is the job's last output and the agent's kDone, and the
// launcher says the host was lost (issue 51, finding 2, through srun). A launcher that stays
// silent for kLingerSilence (frozen, or gone without a close) is not waited for longer.
constexpr auto kLingerSilence = std::chrono::seconds(10);
void close_gracefully(int fd) {
  if (::shutdown(fd, SHUT_WR) != 0) return;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready =
        ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kLingerSilence).count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;  // the launcher's FIN (or its reset): nothing of ours is left to lose
  }
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

}  // namespace

int run_connecting_agent() {
  const std::string target = env_or(std::string(kAgentConnectVar).c_str(), "");
  const std::string token = env_or(std::string(kAgentTokenVar).c_str(), "");
  ::unsetenv(std::string(kAgentConnectVar).c_str());
  ::unsetenv(std::string(kAgentTokenVar).c_str());
  // srun passes the user's environment on: a login session's SSH_CONNECTION says nothing about
  // how this agent was reached, and the hello must not claim it.
  ::unsetenv("SSH_CONNECTION");
  std::istringstream words(target);
  std::string addresses, port;
  if (!(words >> addresses >> port) || token.empty()) {
    std::fprintf(stderr, "hvdrun agent: %s and %s must be set by the launcher\n",
                 std::string(kAgentConnectVar).c_str(), std::string(kAgentTokenVar).c_str());
    return 2;
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string node = env_or("SLURMD_NODENAME", host);
  UniqueFd fd;
  std::stringstream list(addresses);
  for (std::string address; !fd.valid() && std::getline(list, address, ',');) {
    if (address == kAgentConnectSrunHost) address = env_or("SLURM_SRUN_COMM_HOST", "");
    if (!address.empty()) fd = connect_to(address, port, std::chrono::milliseconds(5000));
  }
  if (!fd.valid()) {
    std::fprintf(stderr, "hvdrun agent on %s: cannot connect to the launcher at %s port %s\n",
                 node.c_str(), addresses.c_str(), port.c_str());
    return 2;
  }
  // The exchange (agent/sealed_link.h): the launcher proves the secret before this agent sends
  // anything of its host, and the agent proves it before the launcher sends anything of the job.
  try {
    AgentHandshake handshake(token, node);
    if (!write_all(fd.get(), handshake.hello())) return 2;
    const std::string reply = read_exactly(fd.get(), kSealReplyBytes, kReplyTime);
    if (reply.size() < kSealReplyBytes) {
      std::fprintf(stderr,
                   "hvdrun agent on %s: the launcher at %s port %s closed or went silent during "
                   "the sealed link's exchange (a launcher of another hvdrun version does: the "
                   "launcher and every node must run one version)\n",
                   node.c_str(), addresses.c_str(), port.c_str());
      return 2;
    }
    if (!write_all(fd.get(), handshake.on_reply(reply))) return 2;
    const int code = run_agent_sealed(fd.get(), handshake.keys());
    close_gracefully(fd.get());
    return code;
  } catch (const SealError& e) {
    std::fprintf(stderr, "hvdrun agent on %s: refused the launcher at %s port %s: %s (%s)\n",
                 node.c_str(), addresses.c_str(), port.c_str(), e.what(), e.hint().c_str());
    return 2;
  }
}

}  // namespace hvd::agent
