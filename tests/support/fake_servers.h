// Misbehaving network peers for the SSH failure-mode tests (docs/check-ssh.md, result codes).
//
// Each class stands for one way a "host" can fail before or around SSH, made with real sockets
// (or a real sshd) on a loopback address, so that hvdrun's real connect/peek/libssh path is what
// gets tested. Use addresses outside the sshd fixture's 127.0.0.2-127.0.0.201 range, for example
// 127.0.1.X (avoid 127.0.1.1, which many /etc/hosts map to the machine's own name): every
// 127.x.x.x address reaches this machine over `lo`, and a distinct address per server keeps
// servers and fixture hosts apart even when they share a port number.
//
// Ownership and teardown: every object owns its sockets (and its thread or sshd process) and
// releases them in its destructor, which never blocks for long: threads wait in poll() together
// with a wake-up eventfd, and sshd gets SIGTERM, then SIGKILL after a short grace period.
// Constructors throw std::runtime_error with the failing call named; no Catch2 in here (these
// objects may be used from helper threads).
//
// Ports: pass port 0 to get an ephemeral port chosen by the kernel (port() reports it), or a fixed
// port. Objects are neither copyable nor movable: their threads refer to them.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hvd::test {

// "host.invalid" never resolves (RFC 6761 reserves .invalid), on any resolver: dns_failure.
std::string unresolvable_host();

// Connects to address:port and returns what the server says first, up to the first '\n'
// (without it) or 255 bytes, with a trailing '\r' removed. Returns "" if nothing came within
// `timeout` or the connection failed. When the line is an SSH banner it answers with its own
// identification before closing, so sshd logs no kex_exchange_identification error.
std::string read_first_line(const std::string& address, int port,
                            std::chrono::milliseconds timeout = std::chrono::seconds(5));

// An address:port where nothing listens: a TCP connect gets RST (connection_refused).
// The socket stays bound (but never listens) for the object's lifetime: a bound socket does not
// answer SYNs, so connects are refused exactly as with a closed port, and the port cannot be taken
// by someone else meanwhile (closing it right away would leave that small race open).
class ClosedPort {
 public:
  explicit ClosedPort(const std::string& address, int port = 0);
  ~ClosedPort();
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;

  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  std::string address_;
  int port_ = 0;
  int fd_ = -1;
};

namespace detail {
class AcceptLoop;  // the shared listener thread behind AcceptAndClose, AcceptAndSilent, Greeter
}

// Common interface of the listening fakes.
class ListeningServer {
 public:
  virtual ~ListeningServer();
  ListeningServer(const ListeningServer&) = delete;
  ListeningServer& operator=(const ListeningServer&) = delete;

  const std::string& address() const;
  int port() const;
  // Connections accepted so far (proves that the client really got through TCP).
  int accepted() const;

 protected:
  ListeningServer() = default;
  std::unique_ptr<detail::AcceptLoop> loop_;
};

// Accepts and closes at once, saying nothing: the seeds' port forwarder (docker -p, rootlesskit)
// with no sshd behind it. The client sees EOF before any banner: closed_before_banner
// (OpenSSH: "kex_exchange_identification: Connection closed by remote host"). The close is an
// orderly FIN, not an RST, as a forwarder whose backend refused would do.
class AcceptAndClose : public ListeningServer {
 public:
  explicit AcceptAndClose(const std::string& address, int port = 0);
};

// Accepts and holds every connection open, silent, until destroyed: a stuck sshd or a proxy
// waiting for its backend. The client's TCP connect succeeds, no banner ever comes:
// banner_timeout.
class AcceptAndSilent : public ListeningServer {
 public:
  explicit AcceptAndSilent(const std::string& address, int port = 0);
};

// Accepts, writes `text` at once, keeps the connection open for `close_after`, then closes it:
// some other service on the port (not_ssh). The delay lets a client peek the bytes before EOF;
// closing at all keeps a plain `ssh` (the reproduce line) from waiting forever.
class Greeter : public ListeningServer {
 public:
  Greeter(std::string text, const std::string& address, int port = 0,
          std::chrono::milliseconds close_after = std::chrono::milliseconds(1000));
};

// A listener whose accept queue is full, so that a further TCP connect never completes: the
// client's SYNs are dropped (Linux drops a SYN while the accept queue is full, whatever
// tcp_syncookies says) and its non-blocking connect stays in progress until its own timeout:
// timeout ("no answer to the TCP connect").
// listen(fd, 0) leaves room for one connection in the accept queue (Linux counts "full" as more
// than the backlog); the constructor fills it with connections of its own and then checks that a
// further connect stays in progress for `verify_for`, throwing if it does not (a kernel that
// behaves differently must fail the test set-up loudly, not pass a timeout test by accident).
// Never accepts. Measured on Linux 6.18 (tcp_syncookies=1): a further connect stays in progress
// for 8 s and more.
class FullBacklog {
 public:
  explicit FullBacklog(const std::string& address, int port = 0,
                       std::chrono::milliseconds verify_for = std::chrono::milliseconds(300));
  ~FullBacklog();
  FullBacklog(const FullBacklog&) = delete;
  FullBacklog& operator=(const FullBacklog&) = delete;

  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // True if a fresh non-blocking connect is still in progress after `wait` (what a client sees).
  bool connect_stalls(std::chrono::milliseconds wait) const;

 private:
  std::string address_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::vector<int> fillers_;  // the connections that fill the accept queue (and SYN_SENT ones)
};

// Unauthenticated TCP connections held open to a server; closed when destroyed.
class HeldConnections {
 public:
  HeldConnections() = default;
  explicit HeldConnections(std::vector<int> fds) : fds_(std::move(fds)) {}
  ~HeldConnections();
  HeldConnections(HeldConnections&& other) noexcept;
  HeldConnections& operator=(HeldConnections&& other) noexcept;
  HeldConnections(const HeldConnections&) = delete;
  HeldConnections& operator=(const HeldConnections&) = delete;

  size_t size() const { return fds_.size(); }
  void adopt(int fd) { fds_.push_back(fd); }  // takes ownership
  void close_all();

 private:
  std::vector<int> fds_;
};

// A real OpenSSH sshd of its own (/usr/sbin/sshd -D, a child of this process) on address:port
// with extra sshd_config lines, e.g. {"MaxStartups 1"}. It uses the sshd fixture's host key and
// authorized_keys (TestHosts::load(), so HVDTEST_SSHD_DIR must be set), so the fixture's client
// key, known_hosts entries of the form "[address]:port" and ssh_config work against it once the
// address is covered. Its config, pid file and log live in a private temporary directory. The
// constructor returns once the server sends its SSH banner; with port 0 a free port is picked
// (bind to port 0, read, close) and another is tried should sshd fail to bind it.
// The destructor closes held connections, stops sshd (SIGTERM, SIGKILL after 3 s), reaps it and
// removes the temporary directory.
class SshdInstance {
 public:
  SshdInstance(const std::string& address, std::vector<std::string> extra_config, int port = 0);
  ~SshdInstance();
  SshdInstance(const SshdInstance&) = delete;
  SshdInstance& operator=(const SshdInstance&) = delete;

  const std::string& address() const { return address_; }
  int port() const { return port_; }
  const std::string& log_path() const { return log_path_; }
  std::string log() const;  // the sshd log so far (for INFO on failures)

  // Opens n connections that have received sshd's banner and say nothing back: each one is an
  // unauthenticated "startup" for sshd until LoginGraceTime (120 s) ends it. With
  // "MaxStartups n" a further connection is then dropped with "Exceeded MaxStartups".
  // A connection that got "Exceeded MaxStartups" itself (the slot of an earlier connection, such
  // as the constructor's banner check, is released a moment after it closes) is retried for up to
  // `within`; throws if n connections cannot be held by then.
  HeldConnections hold_connections(int n,
                                   std::chrono::milliseconds within = std::chrono::seconds(5));

 private:
  bool start_once(int port);  // false: sshd could not bind the port (try another)
  void stop();

  std::string address_;
  std::vector<std::string> extra_config_;
  int port_ = 0;
  std::string temp_dir_;
  std::string log_path_;
  int pid_ = -1;
};

}  // namespace hvd::test
