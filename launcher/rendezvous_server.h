// The launcher's rendezvous server: a small HTTP/1.1 key-value store the ranks bootstrap from
// (Gloo's Store, NCCL's unique id), modelled on Horovod's; the protocol (paths, headers, limits)
// is in contract/rendezvous.h. Unlike Horovod's, every request needs the job's random bearer
// token (else 401), it binds only the address the hosts reach the launcher at, and it limits
// request sizes and times. Built on cpp-httplib, a maintained HTTP library.
//
// Threading: start() serves on a background thread pool; the store is guarded by a mutex; the
// destructor stops the server and joins.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/port_range.h"

namespace httplib {
class Server;
}

namespace hvd::launcher {

// Who talked to the server: ranks identify themselves with an X-Hvd-Rank header.
struct RendezvousStats {
  std::set<int> ranks_seen;  // ranks that made an authenticated request
  size_t requests = 0;       // authenticated requests
  size_t rejected = 0;       // requests refused for a missing or wrong token
};

class RendezvousServer {
 public:
  explicit RendezvousServer(std::string token);
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  ~RendezvousServer();

  // Binds `address` on a free port (the first free one of `range` unless range.any()) and
  // starts serving; returns the port. Throws hvd::Error.
  int start(const std::string& address, PortRange range = {});
  const std::string& token() const { return token_; }
  size_t size() const;  // keys stored, for tests
  RendezvousStats stats() const;

 private:
  static constexpr int kListenBacklog = 1024;
  std::string token_;
  int listen_fd_ = -1;  // borrowed: the listening socket cpp-httplib owns, to raise its backlog
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string> store_;  // "scope/key" -> value
  RendezvousStats stats_;
};

// A random token (256 bits, hex) for one job.
std::string random_token();

}  // namespace hvd::launcher
