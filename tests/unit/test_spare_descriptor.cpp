// Accepting while out of descriptors (common/spare_fd.h), issue 51 finding 9: accept4() failing
// with EMFILE leaves the connection pending and the listener readable; a poll loop around it
// spun (the srun listener: 3.79 CPU-s in 4 s). The spare descriptor drops the waiting
// connection, so the listener goes quiet. Run in a child process whose descriptor limit is
// used up (the test runner's own limit stays as it was).
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include "tests/support/catch.h"

#include "common/spare_fd.h"

TEST_CASE("spare descriptor: out of descriptors, a pending connection is dropped, no spin",
          "[toolkit]") {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 16) == 0);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    hvd::SpareDescriptor spare;
    // Use up the descriptor table.
    const rlimit low{64, 64};
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) ::_exit(10);
    while (::dup(listener) >= 0) {
    }
    if (errno != EMFILE) ::_exit(11);
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, 1000) != 1) ::_exit(12);  // the connection waits
    if (::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) >= 0 ||
        !hvd::SpareDescriptor::out_of_descriptors(errno)) {
      ::_exit(13);
    }
    if (!spare.drop_pending(listener)) ::_exit(14);
    if (::poll(&p, 1, 0) != 0) ::_exit(15);  // quiet now: nothing left to spin on
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The client sees its connection closed.
  char byte = 0;
  CHECK(::recv(client, &byte, 1, 0) == 0);
  ::close(client);
  ::close(listener);
}
