#include "launcher/rendezvous_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <random>

#include "common/error.h"
#include "common/port_range.h"
#include "contract/rendezvous.h"

namespace hvd::launcher {
namespace {

namespace protocol = contract::rendezvous;

// Compares without an early exit, so the time taken says nothing about the token.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

void reply(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text, "text/plain");
}

}  // namespace

std::string random_token() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 8; ++i) out += fmt::format("{:08x}", rd());
  return out;
}

RendezvousServer::RendezvousServer(std::string token)
    : token_(std::move(token)), server_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *server_;
  s.set_payload_max_length(protocol::kMaxValue);
  s.set_read_timeout(10, 0);
  s.set_write_timeout(10, 0);
  s.set_keep_alive_max_count(1000);
  // cpp-httplib listens with a backlog of 5 (compiled into Debian's library), which drops
  // connections when many ranks start at once: remember the socket to raise it after bind.
  s.set_socket_options([this](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
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
        const std::string rank =
            req.get_header_value(std::string(protocol::kRankHeader).c_str());
        int r = -1;
        if (!rank.empty() &&
            std::from_chars(rank.data(), rank.data() + rank.size(), r).ec == std::errc() &&
            r >= 0) {
          stats_.ranks_seen.insert(r);
        }
      }
    }
    if (!authorized) {
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
  // cpp-httplib binds its own socket and reports only success; errno still holds bind()'s error.
  const BindOutcome outcome = bind_first_free(range, [&](int port) -> BindAttempt {
    errno = 0;
    const int bound = port == 0 ? server_->bind_to_any_port(address)
                                : (server_->bind_to_port(address, port) ? port : -1);
    if (bound > 0) return {bound, 0};
    return {0, errno != 0 ? errno : EADDRNOTAVAIL};
  });
  if (!outcome.bound()) {
    const BindFailure f =
        bind_failure(range, outcome, "--port-range ", "the rendezvous server", address);
    throw LauncherError(f.message, f.hint);
  }
  const int port = outcome.port;
  if (listen_fd_ >= 0) ::listen(listen_fd_, kListenBacklog);  // Linux: re-listen, longer backlog
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // cpp-httplib's stop() does nothing until the listening thread has marked the server running,
  // and that thread would then accept() forever: a job that ended at once (a missing --wd) hung
  // its launcher in ~RendezvousServer. Return only once the server runs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return port;
}

RendezvousStats RendezvousServer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

size_t RendezvousServer::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.size();
}

RendezvousServer::~RendezvousServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hvd::launcher
