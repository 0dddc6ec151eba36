// The rendezvous server's request handling (launcher/native/rendezvous_server.h), without sockets:
// the bytes a client sent, as the front end (http_front.h) would hand them over, go to a fresh
// server's serve() through an in-memory stream, one request after another while the server keeps
// the connection open (pipelined requests). cpp-httplib parses; the server checks the token and
// the names and answers. Nothing may throw. Properties: every request gets an HTTP answer, an
// unauthorized request closes the connection and stores nothing, and no key is stored without an
// authorized request.
#include <httplib.h>

#include <cstring>

#include "launcher/native/rendezvous_server.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// The token the seeds carry ("Authorization: Bearer fuzz-token").
constexpr const char* kToken = "fuzz-token";

class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.9";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 29500;
  }
  socket_t socket() const override { return -1; }

  std::string_view rest() const { return in_.substr(pos_); }
  const std::string& written() const { return out_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string out_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const hvd::launcher::HttpLimits limits;
  hvd::launcher::RendezvousServer server(kToken, limits);
  std::string_view bytes = hvd::fuzz::as_text(data, size);
  for (int request = 0; request < 8; ++request) {
    // The front end hands over only a complete head of at most max_head bytes.
    const size_t head_end = bytes.find("\r\n\r\n");
    if (head_end == std::string_view::npos || head_end + 4 > limits.max_head) break;
    const auto before = server.stats();
    const size_t stored = server.size();
    MemoryStream stream(bytes);
    const hvd::launcher::Served served = server.serve(stream);
    const auto after = server.stats();
    HVD_FUZZ_CHECK(stream.written().rfind("HTTP/1.1 ", 0) == 0);
    HVD_FUZZ_CHECK(after.requests + after.rejected <= before.requests + before.rejected + 1);
    if (!served.authorized) {
      HVD_FUZZ_CHECK(!served.keep_open);
      HVD_FUZZ_CHECK(server.size() == stored);
    }
    if (!served.keep_open) break;
    HVD_FUZZ_CHECK(stream.rest().size() < bytes.size());
    bytes = stream.rest();
  }
  HVD_FUZZ_CHECK(server.size() <= server.stats().requests);
  return 0;
}
