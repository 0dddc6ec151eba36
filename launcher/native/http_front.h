// The connection side of the rendezvous server, in front of cpp-httplib: cpp-httplib parses and
// answers each request; this part decides which bytes ever reach it and how long a connection may
// take. Why not cpp-httplib's own listener: Debian's 0.11.4 reads a request line or header line
// into memory without bound until a newline arrives, has no header-count limit, runs the token
// check only after every header was read, and holds one of its 8 threads per connection with only
// a per-read timeout. Bytes without a newline grew the launcher by gigabytes, and a few
// connections sending a byte every 9 s starved the ranks' rendezvous.
//
// One thread polls the listener and every connection. It reads each request's head (up to its
// blank line) into a buffer of at most `max_head` bytes; only a complete head goes to a worker
// thread, where cpp-httplib parses and answers that one request and the connection comes back.
// - Memory: at most max_head bytes per connection, and at most max_untrusted connections that
//   never sent an authorized request (the oldest is dropped to make room).
// - Time: a request's head must be complete within head_time of the connection's accept (or of
//   the first byte after an answer); a connection whose request was authorized may then sit idle
//   for idle_time; a worker gives a request's body body_time, and reads it only once the server
//   has accepted the request's token (an unauthorized request is answered and closed unread).
// - Threads: no worker ever waits for a client's head, so slow clients hold none.
//
// Threading: start() runs the polling thread and the workers; serve() is called on the workers,
// concurrently. The destructor stops everything and joins (bodies being read are abandoned).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace httplib {
class Stream;
}

namespace hvd::launcher {

struct HttpLimits {
  std::size_t max_head = 8 * 1024;  // request line + headers; rank requests take ~200 bytes
  std::size_t max_untrusted = 256;  // connections with no authorized request yet
  std::chrono::milliseconds head_time{10'000};
  std::chrono::milliseconds idle_time{30'000};
  std::chrono::milliseconds body_time{30'000};
  int workers = 4;
};

// What serving one request decided.
struct Served {
  bool keep_open = false;   // the connection may carry another request
  bool authorized = false;  // the request carried the job's token
};

class HttpFrontEnd {
 public:
  // Answers the one request whose head `stream` starts with (its body, if any, follows on it).
  using ServeFn = std::function<Served(httplib::Stream& stream)>;

  HttpFrontEnd(ServeFn serve, HttpLimits limits = {});
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;
  ~HttpFrontEnd();

  // Serves connections accepted on `listener` (a listening socket; owned from here on).
  void start(UniqueFd listener);

 private:
  struct Conn {
    UniqueFd fd;
    std::string buffer;  // the next request's head as it arrives (and bytes a client pipelined)
    std::chrono::steady_clock::time_point deadline;
    bool trusted = false;       // sent an authorized request
    bool head_started = false;  // bytes of the next request arrived
    std::uint64_t serial = 0;   // accept order: the oldest untrusted one is dropped first
  };
  class ConnStream;

  void poll_loop();
  void worker_loop();
  void accept_all(std::vector<Conn>& conns);
  bool drop_oldest_untrusted(std::vector<Conn>& conns);
  // Reads what `conn` sent; false when it must be closed. Sets `complete` when its head is.
  bool read_head(Conn& conn, bool& complete);
  void dispatch(Conn conn);
  void take_returned(std::vector<Conn>& conns);
  void wake();

  ServeFn serve_;
  HttpLimits limits_;
  UniqueFd listener_;
  UniqueFd wake_fd_;  // eventfd: a connection came back from a worker
  UniqueFd stop_fd_;  // eventfd, written once by the destructor and never read: stop
  std::thread poller_;
  std::vector<std::thread> workers_;
  std::uint64_t next_serial_ = 0;
  std::chrono::steady_clock::time_point accept_paused_until_{};  // out of descriptors

  std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::deque<Conn> ready_;     // complete heads, for the workers
  std::deque<Conn> returned_;  // answered, back to the polling thread
  bool stop_ = false;
};

// Whether `buffer` holds a complete request head (a blank line, CRLF CRLF).
bool head_complete(const std::string& buffer);

}  // namespace hvd::launcher
