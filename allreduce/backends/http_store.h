// A gloo::rendezvous::Store over hvdrun's rendezvous server (protocol: contract/rendezvous.h):
// set = PUT /<scope>/<key>, get = GET (polled until the key exists), every request with the job's
// bearer token. One scope per Gloo context, so each context gets a fresh key prefix.
//
// get() and wait() block until the keys exist or the timeout passes; the timeout error names the
// missing rank when the key is one of Gloo's rank keys. Not thread-safe: one context connects at a
// time.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace hvd::runtime {

struct HttpStoreOptions {
  std::string address;  // host:port or [v6]:port
  std::string token;
  std::string scope;  // [A-Za-z0-9._-], e.g. "<job id>.global"
  int rank = 0;       // sent as X-Hvd-Rank, so the launcher can say which ranks checked in
  std::chrono::milliseconds timeout{30000};
  // Checked between two polls of wait(): true ends the wait with HVD_ERR_PEER_LOST (an elastic
  // generation superseded by a newer one, whose peers will never all come).
  std::function<bool()> interrupted;
};

class HttpStore : public gloo::rendezvous::Store {
 public:
  explicit HttpStore(HttpStoreOptions options);
  ~HttpStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  std::string where() const;  // "http://host:port/scope" for messages

 private:
  // GET once: the value, or nullopt for 404. Throws on 401 and other failures.
  std::optional<std::vector<char>> try_get(const std::string& key);
  std::string path(const std::string& key) const;

  HttpStoreOptions options_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace hvd::runtime
