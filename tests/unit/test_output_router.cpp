// The output router on its own: lines tagged and whole, \r as a line end, partial lines held
// until the end, bytes passed through, the stderr tail, and the per-rank files.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include "tests/support/catch.h"

#include "launcher/core/output_router.h"

using hvd::agent::Stream;
using hvd::launcher::OutputRouter;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// A temp file standing in for hvdrun's stdout or stderr.
struct Sink {
  fs::path path;
  int fd;
  explicit Sink(const std::string& name)
      : path(fs::temp_directory_path() / ("hvd_router_" + name)),
        fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600)) {}
  ~Sink() {
    ::close(fd);
    fs::remove(path);
  }
  std::string text() const {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

// The router only queues console output; this writes it out as the launcher's loop would.
void settle(OutputRouter& router, const Sink& out, const Sink& err) {
  while (router.pending(out.fd) || router.pending(err.fd)) {
    router.drain(out.fd);
    router.drain(err.fd);
  }
}

}  // namespace

TEST_CASE("router: lines are tagged and split across chunks are joined", "[router]") {
  Sink out("out1"), err("err1");
  OutputRouter router(out.fd, err.fd, std::nullopt);
  router.write(0, Stream::kStdout, "hel");
  router.write(1, Stream::kStdout, "other\n");
  router.write(0, Stream::kStdout, "lo\nwor");
  router.write(0, Stream::kStderr, "oops\n");
  settle(router, out, err);
  CHECK(out.text() == "[1,1]<stdout>:other\n[1,0]<stdout>:hello\n");
  router.flush(0);
  settle(router, out, err);
  CHECK(out.text() == "[1,1]<stdout>:other\n[1,0]<stdout>:hello\n[1,0]<stdout>:wor\n");
  CHECK(err.text() == "[1,0]<stderr>:oops\n");
}

TEST_CASE("router: hvdrun's own line comes after the rank output already received", "[router]") {
  Sink out("out_own"), err("err_own");
  OutputRouter router(out.fd, err.fd, std::nullopt);
  router.write(1, Stream::kStdout, "worker 1: killing myself\n");  // its last words, then its exit
  router.write(1, Stream::kStderr, "a traceback\n");
  CHECK(out.text().empty());                 // queued for the launcher's loop
  hvd::launcher::before_own_console_line();  // hvdrun is about to say the rank died
  CHECK(out.text() == "[1,1]<stdout>:worker 1: killing myself\n");
  CHECK(err.text() == "[1,1]<stderr>:a traceback\n");
  CHECK_FALSE(router.pending(out.fd));

  // On another thread (none of hvdrun's log lines come from one): left to the loop.
  router.write(0, Stream::kStdout, "later\n");
  std::thread([] { hvd::launcher::before_own_console_line(); }).join();
  CHECK(router.pending(out.fd));
}

TEST_CASE("router: CR ends a line and CR LF is one line end, even split", "[router]") {
  Sink out("out2"), err("err2");
  OutputRouter router(out.fd, err.fd, std::nullopt);
  router.write(3, Stream::kStdout, "10%\r20%\r");
  router.write(3, Stream::kStdout, "\ndone\r\n\n");
  settle(router, out, err);
  CHECK(out.text() == "[1,3]<stdout>:10%\n[1,3]<stdout>:20%\n[1,3]<stdout>:done\n[1,3]<stdout>:\n");
}

TEST_CASE("router: UTF-8 and binary bytes pass through unchanged", "[router]") {
  Sink out("out3"), err("err3");
  OutputRouter router(out.fd, err.fd, std::nullopt);
  const std::string euro = "\xe2\x82\xac";
  router.write(0, Stream::kStdout, euro.substr(0, 1));
  router.write(0, Stream::kStdout, euro.substr(1) + "\n" + std::string("\x00\xff", 2) + "\n");
  settle(router, out, err);
  CHECK(out.text() ==
        "[1,0]<stdout>:" + euro + "\n[1,0]<stdout>:" + std::string("\x00\xff", 2) + "\n");
}

TEST_CASE("router: the stderr tail keeps the last 20 lines", "[router]") {
  Sink out("out4"), err("err4");
  OutputRouter router(out.fd, err.fd, std::nullopt);
  for (int i = 1; i <= 25; ++i) router.write(2, Stream::kStderr, std::to_string(i) + "\n");
  const auto& tail = router.last_stderr(2);
  REQUIRE(tail.size() == 20);
  CHECK(tail.front() == "6");
  CHECK(tail.back() == "25");
  CHECK(router.last_stderr(7).empty());
}

TEST_CASE("router: an endless line is cut, memory stays bounded", "[router]") {
  Sink out("out5"), err("err5");
  OutputRouter router(out.fd, err.fd, std::nullopt);
  const std::string chunk(64 * 1024, 'x');
  for (size_t sent = 0; sent < hvd::launcher::kMaxLineBytes + chunk.size(); sent += chunk.size()) {
    router.write(0, Stream::kStdout, chunk);
  }
  settle(router, out, err);
  const std::string text = out.text();
  CHECK(text.size() == std::string("[1,0]<stdout>:\n").size() + hvd::launcher::kMaxLineBytes);
}

TEST_CASE("router: console output is queued until drained, and can be abandoned", "[router]") {
  Sink out("out7"), err("err7");
  OutputRouter router(out.fd, err.fd, std::nullopt);
  router.write(0, Stream::kStdout, "a\n");
  CHECK(router.pending(out.fd));
  CHECK(router.queued_bytes() == std::string("[1,0]<stdout>:a\n").size());
  CHECK(out.text().empty());
  router.abandon_console();
  router.write(0, Stream::kStderr, "late\n");
  CHECK_FALSE(router.pending(out.fd));
  CHECK_FALSE(router.pending(err.fd));
  CHECK(router.last_stderr(0).back() == "late");  // the tail still feeds the failure report
}

TEST_CASE("router: drain never blocks on a full console, whatever the caller's poll said",
          "[router]") {
  // hvdrun's stdout is a pipe nobody reads (`hvdrun ... | less`, scrolled back), full to the last
  // byte. The launcher's loop calls drain() when its poll() said POLLOUT, but a log line of its
  // own may have filled the pipe since (before_own_console_line): drain() must not block.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const int read_end = fds[0], write_end = fds[1];
  const int flags = ::fcntl(write_end, F_GETFL);
  REQUIRE(::fcntl(write_end, F_SETFL, flags | O_NONBLOCK) == 0);
  const std::string chunk(4096, 'x');
  std::size_t filled = 0;
  for (ssize_t n; (n = ::write(write_end, chunk.data(), chunk.size())) > 0;) filled += n;
  REQUIRE(::fcntl(write_end, F_SETFL, flags) == 0);  // blocking again, as a console is
  REQUIRE(filled > 0);
  {
    OutputRouter router(write_end, write_end, std::nullopt);
    router.write(0, Stream::kStdout, "a line that waits\n");
    // A drain() that wrote without asking would block for ever here: a thread that reads after
    // 10 s turns that failure into a failed check rather than a hung test.
    std::atomic<bool> returned{false};
    std::thread rescue([&] {
      for (int i = 0; i < 100 && !returned; ++i) std::this_thread::sleep_for(100ms);
      if (!returned) {
        std::string sink(1 << 20, '\0');
        (void)!::read(read_end, sink.data(), sink.size());
      }
    });
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(router.drain(write_end));
    router.drain_ready();
    returned = true;
    rescue.join();
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK(router.pending(write_end));  // still queued, not lost
    // The reader takes everything: the line goes out.
    REQUIRE(::fcntl(read_end, F_SETFL, ::fcntl(read_end, F_GETFL) | O_NONBLOCK) == 0);
    std::string sink(1 << 16, '\0');
    while (::read(read_end, sink.data(), sink.size()) > 0) {
    }
    CHECK(router.drain(write_end));
    CHECK_FALSE(router.pending(write_end));
    char line[64] = {};
    CHECK(::read(read_end, line, sizeof line) > 0);
    CHECK(std::string(line) == "[1,0]<stdout>:a line that waits\n");
  }
  ::close(read_end);
  ::close(write_end);
}

TEST_CASE("router: --output-filename keeps untagged bytes per rank", "[router]") {
  Sink out("out6"), err("err6");
  const fs::path dir = fs::temp_directory_path() / "hvd_router_files";
  fs::remove_all(dir);
  {
    OutputRouter router(out.fd, err.fd, dir.string());
    router.write(0, Stream::kStdout, "a\nb");
    router.write(1, Stream::kStderr, "e\n");
  }
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  CHECK(read(dir / "rank.0" / "stdout") == "a\nb");
  CHECK(read(dir / "rank.1" / "stderr") == "e\n");
  CHECK_FALSE(fs::exists(dir / "rank.0" / "stderr"));
  fs::remove_all(dir);
}
