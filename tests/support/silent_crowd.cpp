#include "tests/support/silent_crowd.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "tests/support/fake_servers_internal.h"

namespace hvd::test {

using namespace internal;  // NOLINT: the fakes' socket helpers

SilentCrowd::SilentCrowd(const std::vector<std::string>& addresses, int port) : port_(port) {
  try {
    for (const std::string& address : addresses) {
      int bound = port_;
      const int fd = bound_socket(address, bound);
      listeners_.push_back(fd);
      port_ = bound;
      if (::listen(fd, 128) != 0) fail("listen " + address + ":" + std::to_string(port_));
    }
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) fail("eventfd");
  } catch (...) {
    for (int& fd : listeners_) close_fd(fd);
    throw;
  }
  thread_ = std::thread([this] { run(); });
}

SilentCrowd::~SilentCrowd() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (int& fd : conns_) close_fd(fd);
  for (int& fd : listeners_) close_fd(fd);
  close_fd(wake_fd_);
}

void SilentCrowd::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    for (int fd : listeners_) fds.push_back({fd, POLLIN, 0});
    for (int fd : conns_) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // the destructor wants us gone
    // Closes first: a client that closed one connection before opening the next is never
    // counted with both open.
    const size_t first_conn = 1 + listeners_.size();
    for (size_t i = first_conn; i < fds.size(); ++i) {
      if (fds[i].revents != 0 && !discard_input(fds[i].fd)) {
        ::close(fds[i].fd);
        std::erase(conns_, fds[i].fd);
      }
    }
    for (size_t i = 1; i < first_conn; ++i) {
      if (fds[i].revents == 0) continue;
      while (true) {
        const int fd = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        accepted_.fetch_add(1);
        if (!discard_input(fd)) {  // closed while it waited to be accepted: never open at once
          ::close(fd);
          continue;
        }
        conns_.push_back(fd);
      }
    }
    peak_.store(std::max(peak_.load(), static_cast<int>(conns_.size())));
  }
}

}  // namespace hvd::test
