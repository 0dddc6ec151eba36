#include "launcher/native/rendezvous_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <random>

#include "common/bytes.h"
#include "common/error.h"
#include "common/port_range.h"
#include "common/tcp_listen.h"
#include "contract/rendezvous.h"

namespace hvd::launcher {
namespace {

namespace protocol = contract::rendezvous;

void reply(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text, "text/plain");
}

// What the pre-routing handler found about the request the current worker thread serves.
struct RequestFacts {
  bool authorized = false;
};
thread_local RequestFacts* current_request = nullptr;

}  // namespace

// cpp-httplib's server as a request handler: it parses and answers one request from a stream the
// front end gives it, and never listens itself.
class RendezvousServer::Http final : public httplib::Server {
 public:
  // False when the connection must close (an error, or the client asked).
  bool serve_one(httplib::Stream& stream) {
    bool closed = false;
    return process_one(*this, stream, closed) && !closed;
  }

  // Parses one request line that names no HTTP method, on the calling thread, and drops the 400
  // it gets. cpp-httplib (0.11) keeps the methods it accepts in a function-local static set,
  // built by the first request it parses. If two worker threads parse their first requests at
  // once, one builds the set and the other reads it, ordered by the guard check that the
  // compiler inlines into the library; ThreadSanitizer does not see inside Debian's
  // uninstrumented libcpp-httplib and reported that read as a race (tests/sanitizers/README.md).
  // Built here, before the front end starts its workers, the set is ordered before every
  // worker by the thread's creation.
  // cpp-httplib 0.11 (Debian 12) parses a request from a stream alone; later versions (0.18,
  // Debian 13) take the peer's and our own address beside it, which the stream knows. The one
  // place where the two versions differ; a template so that only the matching call is compiled.
  template <class Server>
  static bool process_one(Server& server, httplib::Stream& stream, bool& closed) {
    if constexpr (requires { server.process_request(stream, false, closed, nullptr); }) {
      return server.process_request(stream, false, closed, nullptr);
    } else {
      std::string remote_ip, local_ip;
      int remote_port = 0, local_port = 0;
      stream.get_remote_ip_and_port(remote_ip, remote_port);
      stream.get_local_ip_and_port(local_ip, local_port);
      return server.process_request(stream, remote_ip, remote_port, local_ip, local_port, false,
                                    closed, nullptr);
    }
  }

  void build_statics() {
    class OneLine final : public httplib::Stream {
     public:
      bool is_readable() const override { return true; }
      bool is_writable() const override { return true; }
      ssize_t read(char* ptr, size_t size) override {
        const size_t n = std::min(size, line_.size() - pos_);
        std::memcpy(ptr, line_.data() + pos_, n);
        pos_ += n;
        return static_cast<ssize_t>(n);
      }
      ssize_t write(const char*, size_t size) override { return static_cast<ssize_t>(size); }
      void get_remote_ip_and_port(std::string& ip, int& port) const override {
        ip.clear();
        port = 0;
      }
      void get_local_ip_and_port(std::string& ip, int& port) const override {
        ip.clear();
        port = 0;
      }
      socket_t socket() const override { return -1; }

     private:
      std::string line_ = "HVD-NO-METHOD / HTTP/1.1\r\n\r\n";
      size_t pos_ = 0;
    } stream;
    serve_one(stream);
  }
};

std::string random_token() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 8; ++i) out += fmt::format("{:08x}", rd());
  return out;
}

RendezvousServer::RendezvousServer(std::string token, HttpLimits limits)
    : token_(std::move(token)),
      http_(std::make_unique<Http>()),
      front_([this](httplib::Stream& stream) { return serve(stream); }, limits) {
  httplib::Server& s = *http_;
  s.set_payload_max_length(protocol::kMaxValue);
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool authorized =
        same_secret(req.get_header_value(std::string(protocol::kAuthorizationHeader).c_str()),
                    protocol::bearer(token_));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!authorized) {
        ++stats_.rejected;
      } else {
        ++stats_.requests;
        const std::string rank = req.get_header_value(std::string(protocol::kRankHeader).c_str());
        int r = -1;
        if (!rank.empty() &&
            std::from_chars(rank.data(), rank.data() + rank.size(), r).ec == std::errc() &&
            r >= 0) {
          stats_.ranks_seen.insert(r);
          if (!stats_.first_rank_request) {
            stats_.first_rank_request = std::chrono::steady_clock::now();
          }
        }
      }
    }
    if (current_request != nullptr) current_request->authorized = authorized;
    if (!authorized) {
      // Closed after the answer, its body unread (the front end closes unauthorized ones).
      res.set_header("Connection", "close");
      reply(res, 401, "missing or wrong bearer token\n");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  const std::string pattern(protocol::kKeyRoute);
  auto key_of = [](const httplib::Request& req, httplib::Response& res) -> std::string {
    const std::string scope = req.matches[1];
    const std::string key = req.matches[2];
    if (!protocol::valid_name(scope) || !protocol::valid_name(key)) {
      reply(res, 400, "scope and key: 1-256 characters of [A-Za-z0-9._-]\n");
      return "";
    }
    return scope + "/" + key;
  };
  s.Put(pattern, [this, key_of](const httplib::Request& req, httplib::Response& res) {
    const std::string key = key_of(req, res);
    if (key.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    drop_finished_rounds(req.matches[1]);
    store_[key] = req.body;
    reply(res, 200, "");
  });
  s.Get(pattern, [this, key_of](const httplib::Request& req, httplib::Response& res) {
    const std::string key = key_of(req, res);
    if (key.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = store_.find(key);
    if (it == store_.end()) {
      reply(res, 404, "no such key\n");
    } else {
      res.status = 200;
      res.set_content(it->second, "application/octet-stream");
    }
  });
  s.Delete(pattern, [this, key_of](const httplib::Request& req, httplib::Response& res) {
    const std::string key = key_of(req, res);
    if (key.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    reply(res, store_.erase(key) == 1 ? 200 : 404, "");
  });
}

int RendezvousServer::start(const std::string& address, PortRange range) {
  auto [listener, port] = listen_in_range(address, range, "the rendezvous server");
  http_->build_statics();  // before any worker thread exists
  front_.start(std::move(listener));
  return port;
}

// One request, on a worker thread of the front end.
Served RendezvousServer::serve(httplib::Stream& stream) {
  RequestFacts facts;
  current_request = &facts;
  const bool open = http_->serve_one(stream);
  current_request = nullptr;
  return {open && facts.authorized, facts.authorized};
}

RendezvousStats RendezvousServer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::optional<std::chrono::steady_clock::time_point> RendezvousServer::first_rank_request() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.first_rank_request;
}

void RendezvousServer::put(const std::string& scope, const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mutex_);
  drop_finished_rounds(scope);
  store_[scope + "/" + key] = std::move(value);
}

void RendezvousServer::drop_finished_rounds(const std::string& scope) {
  const protocol::ScopeRound sr = protocol::scope_round(scope);
  if (sr.round < 2) return;
  long& newest = newest_round_[sr.base];
  if (sr.round <= newest) return;  // swept when this round was first seen
  newest = sr.round;
  for (auto it = store_.begin(); it != store_.end();) {
    const protocol::ScopeRound other =
        protocol::scope_round(std::string_view(it->first).substr(0, it->first.find('/')));
    if (other.base == sr.base && other.round <= sr.round - 2) {
      it = store_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t RendezvousServer::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.size();
}

RendezvousServer::~RendezvousServer() = default;

}  // namespace hvd::launcher
