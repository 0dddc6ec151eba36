// The launcher's rendezvous server: a small HTTP/1.1 key-value store the ranks bootstrap from
// (Gloo's Store, NCCL's unique id), modelled on Horovod's; the protocol (paths, headers, limits)
// is in contract/rendezvous.h. Unlike Horovod's, every request needs the job's random bearer
// token (else 401, and the connection is closed with its body unread), it binds only the address
// the hosts reach the launcher at, and what an unauthenticated client can make it hold is
// bounded: cpp-httplib (a maintained HTTP library) parses and answers the requests, behind our
// own connection handling (http_front.h), which bounds each request's head, its time and the
// number of connections that have not shown the token.
//
// Threading: start() serves on background threads; the store is guarded by a mutex; the
// destructor stops the server and joins.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/port_range.h"
#include "launcher/native/http_front.h"

namespace hvd::launcher {

// Who talked to the server: ranks identify themselves with an X-Hvd-Rank header.
struct RendezvousStats {
  std::set<int> ranks_seen;  // ranks that made an authenticated request
  size_t requests = 0;       // authenticated requests
  size_t rejected = 0;       // requests refused for a missing or wrong token
  // When the first authenticated request that named its rank came: the first rank's hvd.init()
  std::optional<std::chrono::steady_clock::time_point> first_rank_request;
};

class RendezvousServer {
 public:
  explicit RendezvousServer(std::string token, HttpLimits limits = {});
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  ~RendezvousServer();

  // Binds `address` on a free port (the first free one of `range` unless range.any()) and
  // starts serving; returns the port. Throws hvd::Error.
  int start(const std::string& address, PortRange range = {});
  const std::string& token() const { return token_; }
  size_t size() const;  // keys stored, for tests
  // The launcher's own write, as a PUT of /<scope>/<key> would store it (an elastic job's world
  // documents: contract/elastic.h).
  void put(const std::string& scope, const std::string& key, std::string value);
  RendezvousStats stats() const;
  // stats().first_rank_request without copying the rest (asked on every turn of hvdrun's loop).
  std::optional<std::chrono::steady_clock::time_point> first_rank_request() const;
  // Answers the one request whose head `stream` starts with: the front end's workers call it,
  // the fuzz harness (tests/fuzz/rendezvous.cpp) with the request's bytes in memory.
  Served serve(httplib::Stream& stream);

 private:
  class Http;

  std::string token_;
  std::unique_ptr<Http> http_;  // routes and handlers; never listens itself
  mutable std::mutex mutex_;
  std::map<std::string, std::string> store_;  // "scope/key" -> value
  std::map<std::string, long> newest_round_;  // scope base -> the newest round stored
  // Under mutex_: a key of `scope` is about to be stored; drops the rounds it makes finished
  // (contract::rendezvous::scope_round).
  void drop_finished_rounds(const std::string& scope);
  RendezvousStats stats_;
  HttpFrontEnd front_;  // last: destroyed (threads joined) before what they use
};

// A random token (256 bits, hex) for one job.
std::string random_token();

}  // namespace hvd::launcher
