#include "allreduce/backends/http_store.h"

#include <fmt/format.h>
#include <httplib.h>

#include <thread>

#include "allreduce/api/status_error.h"
#include "common/signal_fd.h"
#include "contract/rendezvous.h"

namespace hvd::runtime {
namespace {

namespace protocol = contract::rendezvous;

// HVD_RENDEZVOUS_ADDR as host and port; a config error naming the variable otherwise.
std::pair<std::string, int> split_address(const std::string& address) {
  auto parts = protocol::split_address(address);
  if (!parts) {
    throw StatusError(HVD_ERR_CONFIG,
                      fmt::format("HVD_RENDEZVOUS_ADDR={:?} is not host:port", address),
                      "HVD_* variables are set by hvdrun: start the program with hvdrun");
  }
  return *parts;
}

// Gloo's full-mesh connect publishes each rank's address under the rank number ("3"; newer
// Gloo versions use "rank_3").
std::string missing_peer(const std::string& key) {
  std::string rank = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
  if (!rank.empty() &&
      std::all_of(rank.begin(), rank.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return fmt::format("rank {} never joined", rank);
  }
  return fmt::format("key {:?} was never published", key);
}

}  // namespace

HttpStore::HttpStore(HttpStoreOptions options) : options_(std::move(options)) {
  const auto [host, port] = split_address(options_.address);
  client_ = std::make_unique<httplib::Client>(host, port);
  client_->set_keep_alive(true);
  client_->set_tcp_nodelay(true);  // a request's head and body must not wait for an ACK
  client_->set_connection_timeout(std::chrono::seconds(5));
  client_->set_read_timeout(std::chrono::seconds(10));
  client_->set_write_timeout(std::chrono::seconds(10));
  client_->set_default_headers(
      {{std::string(protocol::kAuthorizationHeader), protocol::bearer(options_.token)},
       {std::string(protocol::kRankHeader), std::to_string(options_.rank)}});
}

HttpStore::~HttpStore() = default;

std::string HttpStore::where() const {
  return fmt::format("http://{}/{}", options_.address, options_.scope);
}

std::string HttpStore::path(const std::string& key) const {
  return protocol::key_path(options_.scope, key);
}

void HttpStore::set(const std::string& key, const std::vector<char>& data) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    httplib::Result res = [&] {
      const ScopedSigpipeBlock no_sigpipe;  // a reset store: an error, not a dead rank
      return client_->Put(path(key), data.data(), data.size(), "application/octet-stream");
    }();
    if (res && res->status == 200) return;
    if (res && res->status == 401) {
      throw StatusError(
          HVD_ERR_CONFIG,
          fmt::format("the rendezvous store {} refused this rank's token (401)", where()),
          "HVD_RENDEZVOUS_TOKEN must be the launch's own: start every rank with "
          "the same hvdrun");
    }
    if (res || std::chrono::steady_clock::now() >= deadline) {
      throw StatusError(
          HVD_ERR_BACKEND,
          fmt::format("storing {:?} in the rendezvous store {} failed: {}", key, where(),
                      res ? fmt::format("HTTP {}", res->status) : httplib::to_string(res.error())),
          "is the launcher still running? see its output");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // connection hiccup: retry
  }
}

std::optional<std::vector<char>> HttpStore::try_get(const std::string& key) {
  httplib::Result res = [&] {
    const ScopedSigpipeBlock no_sigpipe;  // a reset store: an error, not a dead rank
    return client_->Get(path(key));
  }();
  if (!res) return std::nullopt;  // connection trouble: the caller retries until its deadline
  if (res->status == 404) return std::nullopt;
  if (res->status == 401) {
    throw StatusError(
        HVD_ERR_CONFIG,
        fmt::format("the rendezvous store {} refused this rank's token (401)", where()),
        "HVD_RENDEZVOUS_TOKEN must be the launch's own: start every rank with the "
        "same hvdrun");
  }
  if (res->status != 200) {
    throw StatusError(HVD_ERR_BACKEND,
                      fmt::format("reading {:?} from the rendezvous store {} failed: HTTP {}", key,
                                  where(), res->status));
  }
  return std::vector<char>(res->body.begin(), res->body.end());
}

std::vector<char> HttpStore::get(const std::string& key) {
  wait({key}, options_.timeout);
  if (auto value = try_get(key)) return *value;
  throw StatusError(HVD_ERR_BACKEND,
                    fmt::format("key {:?} vanished from the rendezvous store {}", key, where()));
}

void HttpStore::wait(const std::vector<std::string>& keys) { wait(keys, options_.timeout); }

void HttpStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  // Short polling, only during start-up: 1 ms doubling to 50 ms between tries.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    auto pause = std::chrono::milliseconds(1);
    while (!try_get(key)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        throw StatusError(
            HVD_ERR_TIMEOUT,
            fmt::format("Gloo rendezvous timed out after {} s in {}: {}",
                        std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), where(),
                        missing_peer(key)),
            "check that rank's output; HOROVOD_GLOO_TIMEOUT_SECONDS sets how long to wait");
      }
      if (options_.interrupted && options_.interrupted()) {
        throw StatusError(HVD_ERR_PEER_LOST,
                          fmt::format("the rendezvous in {} was given up: a newer generation of "
                                      "the elastic job was announced while {}",
                                      where(), missing_peer(key)),
                          "nothing to do: this rank moves on to the newer generation");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }
}

}  // namespace hvd::runtime
