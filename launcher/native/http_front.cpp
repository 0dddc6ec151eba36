#include "launcher/native/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <cstring>

namespace hvd::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now());
  return static_cast<int>(std::clamp<long>(left.count(), 0, 60'000));
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET6_ADDRSTRLEN] = {};
  port = 0;
  if (rc != 0) return;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    port = ntohs(in6->sin6_port);
  }
  ip = text;
}

// Best effort, never blocking: the connection is closed right after.
void send_and_forget(int fd, std::string_view text) {
  (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

bool head_complete(const std::string& buffer) {
  return buffer.find("\r\n\r\n") != std::string::npos;
}

// One request's bytes for cpp-httplib: the head the polling thread read, then the socket (the
// body, read only when the server asks for it), every wait bounded by the request's deadline
// and cut short by stop. Reads never go past what cpp-httplib asks for, so bytes of a next
// (pipelined) request stay in the buffer for the polling thread.
class HttpFrontEnd::ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, std::string buffer, int stop_fd, Clock::time_point deadline)
      : fd_(fd), buffer_(std::move(buffer)), stop_fd_(stop_fd), deadline_(deadline) {}

  bool is_readable() const override { return pos_ < buffer_.size() || wait(POLLIN); }
  bool is_writable() const override { return wait(POLLOUT); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < buffer_.size()) {
      const size_t n = std::min(size, buffer_.size() - pos_);
      std::memcpy(ptr, buffer_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    for (;;) {
      if (!wait(POLLIN)) return -1;
      const ssize_t n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno != EAGAIN && errno != EINTR) return -1;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!wait(POLLOUT)) return -1;
      const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return -1;
      if (n > 0) done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(fd_, false, ip, port);
  }
  // cpp-httplib built without CPPHTTPLIB_USE_POLL answers 500 for a socket >= FD_SETSIZE; it
  // never does I/O on this number itself (every read and write comes through this class).
  socket_t socket() const override { return -1; }

  std::string leftover() const { return buffer_.substr(pos_); }

 private:
  bool wait(short events) const {
    for (;;) {
      pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
      const int rc = ::poll(fds, 2, ms_until(deadline_));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0 || fds[1].revents != 0) return false;  // deadline, error or stop
      return (fds[0].revents & (events | POLLHUP | POLLERR)) != 0;
    }
  }

  int fd_;
  std::string buffer_;
  size_t pos_ = 0;
  int stop_fd_;
  Clock::time_point deadline_;
};

HttpFrontEnd::HttpFrontEnd(ServeFn serve, HttpLimits limits)
    : serve_(std::move(serve)),
      limits_(limits),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void HttpFrontEnd::start(UniqueFd listener) {
  listener_ = std::move(listener);
  const int flags = ::fcntl(listener_.get(), F_GETFL);
  ::fcntl(listener_.get(), F_SETFL, flags | O_NONBLOCK);
  poller_ = std::thread([this] { poll_loop(); });
  for (int i = 0; i < limits_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

HttpFrontEnd::~HttpFrontEnd() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  ready_cv_.notify_all();
  const std::uint64_t one = 1;
  (void)::write(stop_fd_.get(), &one, sizeof one);
  if (poller_.joinable()) poller_.join();
  for (std::thread& t : workers_) t.join();
}

void HttpFrontEnd::wake() {
  const std::uint64_t one = 1;
  (void)::write(wake_fd_.get(), &one, sizeof one);
}

bool HttpFrontEnd::drop_oldest_untrusted(std::vector<Conn>& conns) {
  auto oldest = conns.end();
  for (auto it = conns.begin(); it != conns.end(); ++it) {
    if (!it->trusted && (oldest == conns.end() || it->serial < oldest->serial)) oldest = it;
  }
  if (oldest == conns.end()) return false;
  conns.erase(oldest);
  return true;
}

void HttpFrontEnd::accept_all(std::vector<Conn>& conns) {
  for (;;) {
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno != EMFILE && errno != ENFILE) return;  // EAGAIN: all taken
      // Out of descriptors: make room by dropping the oldest untrusted connection, or, with
      // none to drop, stop watching the listener for a moment instead of spinning on it.
      if (!drop_oldest_untrusted(conns)) {
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      continue;
    }
    const auto untrusted =
        std::count_if(conns.begin(), conns.end(), [](const Conn& c) { return !c.trusted; });
    if (static_cast<std::size_t>(untrusted) >= limits_.max_untrusted) drop_oldest_untrusted(conns);
    // An answer is written in pieces (head, body): without TCP_NODELAY the second waits for the
    // client's delayed ACK, 40 ms per request on Linux, which a rank's rendezvous pays dozens of
    // times.
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn c;
    c.fd = std::move(fd);
    c.deadline = Clock::now() + limits_.head_time;
    c.head_started = true;  // a new connection's clock runs from its accept
    c.serial = next_serial_++;
    conns.push_back(std::move(c));
  }
}

bool HttpFrontEnd::read_head(Conn& conn, bool& complete) {
  char buf[4096];
  const std::size_t room = limits_.max_head - std::min(limits_.max_head, conn.buffer.size());
  if (room == 0) {
    send_and_forget(conn.fd.get(),
                    "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
                    "Content-Length: 0\r\n\r\n");
    return false;
  }
  const ssize_t n = ::recv(conn.fd.get(), buf, std::min(room, sizeof buf), MSG_DONTWAIT);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (!conn.head_started) {
    conn.head_started = true;
    conn.deadline = std::min(conn.deadline, Clock::now() + limits_.head_time);
  }
  conn.buffer.append(buf, static_cast<std::size_t>(n));
  complete = head_complete(conn.buffer);
  if (!complete && conn.buffer.size() >= limits_.max_head) {
    send_and_forget(conn.fd.get(),
                    "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
                    "Content-Length: 0\r\n\r\n");
    return false;
  }
  return true;
}

void HttpFrontEnd::dispatch(Conn conn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(std::move(conn));
  }
  ready_cv_.notify_one();
}

void HttpFrontEnd::take_returned(std::vector<Conn>& conns) {
  std::deque<Conn> back;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    back.swap(returned_);
  }
  for (Conn& c : back) {
    if (head_complete(c.buffer)) {  // the client pipelined its next request
      c.deadline = Clock::now() + limits_.head_time;
      dispatch(std::move(c));
      continue;
    }
    c.head_started = !c.buffer.empty();
    c.deadline = Clock::now() + (c.head_started ? limits_.head_time : limits_.idle_time);
    conns.push_back(std::move(c));
  }
}

void HttpFrontEnd::poll_loop() {
  constexpr std::size_t kFirst = 3;  // the listener, wake_fd_, stop_fd_
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  for (;;) {
    const bool accepting = Clock::now() >= accept_paused_until_;
    fds.assign({{accepting ? listener_.get() : -1, POLLIN, 0},
                {wake_fd_.get(), POLLIN, 0},
                {stop_fd_.get(), POLLIN, 0}});
    auto next = Clock::now() + std::chrono::seconds(60);
    if (!accepting) next = accept_paused_until_;
    for (const Conn& c : conns) {
      fds.push_back({c.fd.get(), POLLIN, 0});
      next = std::min(next, c.deadline);
    }
    const int rc = ::poll(fds.data(), fds.size(), ms_until(next));
    if (rc < 0 && errno != EINTR) return;
    if (rc > 0 && fds[2].revents != 0) return;
    // Read first (fds[kFirst + i] is conns[i]), then prune.
    std::vector<Conn> kept;
    kept.reserve(conns.size());
    const auto now = Clock::now();
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      bool complete = false;
      if (rc > 0 && fds[kFirst + i].revents != 0 && !read_head(c, complete)) continue;  // closed
      if (complete) {
        c.deadline = now + limits_.body_time;
        dispatch(std::move(c));
      } else if (c.deadline > now) {
        kept.push_back(std::move(c));
      }  // else: its time is up; the connection closes
    }
    conns.swap(kept);
    if (rc > 0 && fds[1].revents != 0) {
      std::uint64_t count = 0;
      (void)::read(wake_fd_.get(), &count, sizeof count);
      take_returned(conns);
    }
    if (rc > 0 && fds[0].revents != 0) accept_all(conns);
  }
}

void HttpFrontEnd::worker_loop() {
  for (;;) {
    Conn conn;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_cv_.wait(lock, [&] { return stop_ || !ready_.empty(); });
      if (stop_) return;
      conn = std::move(ready_.front());
      ready_.pop_front();
    }
    ConnStream stream(conn.fd.get(), std::move(conn.buffer), stop_fd_.get(), conn.deadline);
    const Served served = serve_(stream);
    if (!served.keep_open) continue;  // conn closes here
    conn.buffer = stream.leftover();
    conn.trusted = conn.trusted || served.authorized;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      returned_.push_back(std::move(conn));
    }
    wake();
  }
}

}  // namespace hvd::launcher
