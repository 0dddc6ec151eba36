// common/: the process and signal toolkit, port ranges and the bind policy, the error kinds.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include "tests/support/catch.h"

#include "common/error.h"
#include "common/port_range.h"
#include "common/process.h"
#include "common/signal_fd.h"

using Catch::Matchers::ContainsSubstring;
using hvd::BindAttempt;
using hvd::PortRange;
using hvd::Process;
using hvd::ProcessSpec;

namespace {

std::string read_all(hvd::UniqueFd& fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

ProcessSpec sh(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin", "MARK=toolkit"};
  return spec;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

}  // namespace

// hvdrun raises its soft descriptor limit to the hard one (a launcher holds a few descriptors per
// host: 1024 was a few hundred hosts); what it starts gets the old limit back.
TEST_CASE("process: the descriptor limit is raised for us and not for the children", "[toolkit]") {
  struct rlimit before {};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &before) == 0);
  if (before.rlim_max < 512) {
    WARN("skipped: the hard descriptor limit here is below 512");
    return;
  }
  struct rlimit low = before;
  low.rlim_cur = 256;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  const unsigned long raised = hvd::raise_descriptor_limit();
  struct rlimit now {};
  ::getrlimit(RLIMIT_NOFILE, &now);
  Process p = Process::spawn(sh("ulimit -n"));
  REQUIRE(p.started());
  const std::string child = read_all(p.out());
  p.wait();
  ::setrlimit(RLIMIT_NOFILE, &before);
  CHECK(raised == before.rlim_max);
  CHECK(now.rlim_cur == before.rlim_max);
  CHECK(child == "256\n");
}

TEST_CASE("process: exactly the given environment, its output and its exit status", "[toolkit]") {
  Process p = Process::spawn(sh("echo $MARK; echo err >&2; test -z \"$HOME\" && exit 7"));
  REQUIRE(p.started());
  CHECK(read_all(p.out()) == "toolkit\n");
  CHECK(read_all(p.err()) == "err\n");
  const hvd::ExitStatus status = p.wait();
  CHECK_FALSE(status.signaled);
  CHECK(status.value == 7);  // HOME was not passed on
  CHECK(status.code() == 7);
  CHECK_FALSE(p.running());
}

TEST_CASE("process: its own process group, and a signal gives 128+N", "[toolkit]") {
  Process p = Process::spawn(sh("exec sleep 30"));
  REQUIRE(p.started());
  CHECK(::getpgid(p.pid()) == p.pid());
  p.signal_group(SIGTERM);
  const hvd::ExitStatus status = p.wait();
  CHECK(status.signaled);
  CHECK(status.value == SIGTERM);
  CHECK(status.code() == 128 + SIGTERM);
}

TEST_CASE("process: a missing program or directory is an error, not exit 127", "[toolkit]") {
  ProcessSpec missing;
  missing.argv = {"no-such-program-hvd"};
  missing.env = {"PATH=/usr/bin:/bin"};
  Process p = Process::spawn(missing);
  CHECK_FALSE(p.started());
  CHECK(p.failed_stage() == Process::Stage::kExec);
  CHECK(p.error_number() == ENOENT);
  CHECK_THAT(p.error(), ContainsSubstring("cannot run the command 'no-such-program-hvd'"));

  ProcessSpec bad_dir = sh("true");
  bad_dir.cwd = "/no/such/dir";
  Process q = Process::spawn(bad_dir);
  CHECK_FALSE(q.started());
  CHECK(q.failed_stage() == Process::Stage::kChdir);
  CHECK_THAT(q.error(), ContainsSubstring("cannot enter the working directory '/no/such/dir'"));
}

TEST_CASE("process: a bare name is looked up in the child's PATH, or ours when asked",
          "[toolkit]") {
  ProcessSpec spec;
  spec.argv = {"true"};
  spec.env = {"PATH=/nonexistent"};
  CHECK_FALSE(Process::spawn(spec).started());  // not in the child's PATH
  spec.lookup_in_our_path = true;               // ours has /bin or /usr/bin
  Process p = Process::spawn(spec);
  REQUIRE(p.started());
  CHECK(p.wait().code() == 0);
}

TEST_CASE("process: the child's PATH is searched as execvp would, ours left as it was",
          "[toolkit]") {
  char tmpl[] = "/tmp/hvd-path-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  struct RemoveAll {
    std::string dir;
    ~RemoveAll() { std::filesystem::remove_all(dir); }
  } remove_all{dir};  // also when a REQUIRE below ends the test
  const auto write_file = [&](const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    REQUIRE(::chmod(path.c_str(), mode) == 0);
  };
  ::mkdir((dir + "/a").c_str(), 0755);
  ::mkdir((dir + "/b").c_str(), 0755);
  write_file("a/hvdtest-prog", "#!/bin/sh\necho from-a\n", 0644);  // not executable: skipped
  write_file("b/hvdtest-prog", "#!/bin/sh\necho from-b \"$@\"\n", 0755);
  write_file("b/hvdtest-noshebang", "echo plain \"$1\"\n", 0755);  // no #!: runs under sh
  write_file("a/hvdtest-denied", "#!/bin/sh\n", 0644);
  const char* ours_before = std::getenv("PATH");
  const std::string ours = ours_before != nullptr ? ours_before : "";
  const auto run = [&](std::vector<std::string> argv, const std::string& path) {
    ProcessSpec spec;
    spec.argv = std::move(argv);
    spec.env = {"PATH=" + path};
    return Process::spawn(spec);
  };
  // A directory missing, a file there but not executable: the next entry's runs, with its args.
  Process p = run({"hvdtest-prog", "x y"}, "/nonexistent:" + dir + "/a:" + dir + "/b");
  REQUIRE(p.started());
  CHECK(read_all(p.out()) == "from-b x y\n");
  CHECK(p.wait().code() == 0);
  Process q = run({"hvdtest-noshebang", "arg"}, dir + "/b");
  REQUIRE(q.started());
  CHECK(read_all(q.out()) == "plain arg\n");
  CHECK(q.wait().code() == 0);
  // Found only where it may not run: EACCES, as execvp says; found nowhere: ENOENT.
  Process denied = run({"hvdtest-denied"}, dir + "/a");
  CHECK_FALSE(denied.started());
  CHECK(denied.error_number() == EACCES);
  Process missing = run({"hvdtest-prog"}, dir);
  CHECK_FALSE(missing.started());
  CHECK(missing.error_number() == ENOENT);
  // An empty entry is the working directory.
  ProcessSpec here;
  here.argv = {"hvdtest-prog"};
  here.env = {"PATH=:/nonexistent"};
  here.cwd = dir + "/b";
  Process h = Process::spawn(here);
  REQUIRE(h.started());
  CHECK(read_all(h.out()) == "from-b\n");
  h.wait();
  // Our own environment is not the child's: PATH here is as it was.
  const char* ours_after = std::getenv("PATH");
  CHECK(std::string(ours_after != nullptr ? ours_after : "") == ours);
}

TEST_CASE("process: stdin is a pipe when asked, else /dev/null", "[toolkit]") {
  ProcessSpec spec = sh("cat");
  spec.stdin_pipe = true;
  Process p = Process::spawn(spec);
  REQUIRE(p.started());
  REQUIRE(::write(p.in().get(), "abc", 3) == 3);
  p.in().reset();
  CHECK(read_all(p.out()) == "abc");
  Process q = Process::spawn(sh("cat"));
  REQUIRE(q.started());
  CHECK(read_all(q.out()).empty());
  CHECK(q.wait().code() == 0);
}

TEST_CASE("process: no descriptor of ours leaks into the child", "[toolkit]") {
  // Every fd the toolkit opens is close-on-exec. The child has 0, 1, 2, whatever this test
  // process itself inherited without close-on-exec, and the one `ls` opens to list the folder.
  std::set<int> allowed{0, 1, 2};
  for (int fd = 3; fd < 1024; ++fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) allowed.insert(fd);
  }
  Process p = Process::spawn(sh("ls /proc/self/fd"));
  REQUIRE(p.started());
  std::istringstream fds(read_all(p.out()));
  p.wait();
  int extra = 0;
  for (int fd; fds >> fd;) {
    if (allowed.count(fd) == 0) ++extra;
  }
  CHECK(extra == 1);  // ls's own
}

TEST_CASE("process: pass_fds hands one descriptor to the child at the number asked", "[toolkit]") {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  hvd::UniqueFd ours(pair[0]), theirs(pair[1]);
  // Into fd 3: the child sees it, though ours is close-on-exec.
  ProcessSpec spec = sh("read line <&3; echo \"got $line\" >&3");
  spec.pass_fds = {{theirs.get(), 3}};
  Process p = Process::spawn(spec);
  REQUIRE(p.started());
  REQUIRE(::write(ours.get(), "gen 1\n", 6) == 6);
  char buf[64] = {};
  const ssize_t n = ::read(ours.get(), buf, sizeof buf - 1);
  CHECK(std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0))) == "got gen 1\n");
  CHECK(p.wait().code() == 0);
  // The same number as the parent's: close-on-exec is cleared, not kept.
  ProcessSpec same = sh("echo same >&" + std::to_string(theirs.get()));
  same.pass_fds = {{theirs.get(), theirs.get()}};
  Process q = Process::spawn(same);
  REQUIRE(q.started());
  CHECK(q.wait().code() == 0);
  const ssize_t m = ::read(ours.get(), buf, sizeof buf - 1);
  CHECK(std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(m, 0))) == "same\n");
}

TEST_CASE("process: pass_fds hands several, also when one's number is another's target",
          "[toolkit]") {
  int a[2], b[2];
  REQUIRE(::pipe2(a, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(b, O_CLOEXEC) == 0);
  hvd::UniqueFd a_read(a[0]), b_read(b[0]);
  // The write ends at two free descriptors x < y, then swapped: a's end becomes the child's y
  // and b's its x. A naive dup2 in order would send both lines into the same pipe. (bash, not
  // sh: dash takes one-digit descriptors only.)
  const int x = ::fcntl(a[1], F_DUPFD_CLOEXEC, 100);
  const int y = ::fcntl(b[1], F_DUPFD_CLOEXEC, x + 1);
  REQUIRE(x >= 100);
  REQUIRE(y > x);
  ::close(a[1]);
  ::close(b[1]);
  hvd::UniqueFd a_write(x), b_write(y);
  ProcessSpec spec = sh("");
  spec.argv = {"/bin/bash", "-c",
               "echo to-a >&" + std::to_string(y) + "; echo to-b >&" + std::to_string(x)};
  spec.pass_fds = {{x, y}, {y, x}};
  Process p = Process::spawn(spec);
  REQUIRE(p.started());
  CHECK(p.wait().code() == 0);
  a_write.reset();
  b_write.reset();
  char buf[64] = {};
  ssize_t n = ::read(a_read.get(), buf, sizeof buf - 1);
  CHECK(std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0))) == "to-a\n");
  n = ::read(b_read.get(), buf, sizeof buf - 1);
  CHECK(std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0))) == "to-b\n");
}

TEST_CASE("process: dropped while running, it is killed and reaped", "[toolkit]") {
  pid_t pid = -1;
  {
    Process p = Process::spawn(sh("exec sleep 30"));
    REQUIRE(p.started());
    pid = p.pid();
    CHECK(alive(pid));
  }
  CHECK_FALSE(alive(pid));  // not even a zombie: it was reaped
}

TEST_CASE("signal fd: the mask comes back, also when an exception unwinds", "[toolkit]") {
  auto blocked = [] {
    sigset_t now;
    ::pthread_sigmask(SIG_SETMASK, nullptr, &now);
    return sigismember(&now, SIGUSR1) == 1;
  };
  REQUIRE_FALSE(blocked());
  try {
    hvd::SignalFd signals{SIGUSR1};
    CHECK(blocked());
    ::raise(SIGUSR1);
    CHECK(signals.next() == SIGUSR1);
    CHECK_FALSE(signals.next().has_value());
    throw std::runtime_error("unwind");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(blocked());
}

TEST_CASE("port range: parse and text", "[toolkit]") {
  CHECK(hvd::parse_port_range("29500-29510") == PortRange{29500, 29510});
  CHECK(hvd::parse_port_range("80-80") == PortRange{80, 80});
  for (const char* bad : {"", "1", "2-1", "0-5", "1-65536", "a-b", "1-2-3", " 1-2"}) {
    INFO(bad);
    CHECK_FALSE(hvd::parse_port_range(bad).has_value());
  }
  CHECK(PortRange{}.any());
  CHECK(PortRange{29500, 29510}.text() == "29500-29510");
}

TEST_CASE("bind_first_free: in order, skipping the promised port, past ports in use", "[toolkit]") {
  std::vector<int> tried;
  auto busy_until = [&](int free_port) {
    return [&, free_port](int port) -> BindAttempt {
      tried.push_back(port);
      return port == free_port ? BindAttempt{port, 0} : BindAttempt{0, EADDRINUSE};
    };
  };
  const auto bound = hvd::bind_first_free({100, 105}, busy_until(103), /*avoid=*/101);
  CHECK(bound.port == 103);
  CHECK(tried == std::vector<int>{100, 102, 103});

  tried.clear();
  const auto none = hvd::bind_first_free({100, 101}, busy_until(0));
  CHECK_FALSE(none.bound());
  CHECK(none.error == EADDRINUSE);
  const auto used_up =
      hvd::bind_failure({100, 101}, none, "--port-range ", "the rendezvous server", "10.0.0.1");
  CHECK(used_up.message ==
        "every port of --port-range 100-101 is in use on 10.0.0.1 (the rendezvous server)");
  CHECK_THAT(used_up.hint, ContainsSubstring("widen the range"));

  tried.clear();
  const auto denied = hvd::bind_first_free({80, 90}, [&](int port) -> BindAttempt {
    tried.push_back(port);
    return {0, EACCES};
  });
  CHECK(tried == std::vector<int>{80});  // not in use: trying the rest would not help
  const auto root = hvd::bind_failure({80, 90}, denied, "HVD_PORT_RANGE=", "libhvd", "h");
  CHECK_THAT(root.message, ContainsSubstring("cannot listen on h in HVD_PORT_RANGE=80-90"));
  CHECK_THAT(root.hint, ContainsSubstring("need root"));

  tried.clear();
  const auto any = hvd::bind_first_free({}, [&](int port) -> BindAttempt {
    tried.push_back(port);
    return {41234, 0};  // the kernel's pick
  });
  CHECK(tried == std::vector<int>{0});
  CHECK(any.port == 41234);
}

TEST_CASE("bind_first_free: with real sockets, a taken port is passed over", "[toolkit]") {
  auto listen_on = [](int port) -> std::pair<hvd::UniqueFd, BindAttempt> {
    hvd::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        ::listen(fd.get(), 1) != 0) {
      return {hvd::UniqueFd(), BindAttempt{0, errno}};
    }
    socklen_t len = sizeof sa;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    return {std::move(fd), BindAttempt{ntohs(sa.sin_port), 0}};
  };
  auto [taken, first] = listen_on(0);
  REQUIRE(first.error == 0);
  const int p = first.port;
  if (p >= 65535) return;  // no room after it for this test
  hvd::UniqueFd mine;
  const auto outcome = hvd::bind_first_free({p, p + 1}, [&](int port) {
    auto [fd, attempt] = listen_on(port);
    mine = std::move(fd);
    return attempt;
  });
  if (outcome.bound()) {
    CHECK(outcome.port == p + 1);
  } else {
    CHECK(outcome.error == EADDRINUSE);  // p+1 happened to be taken too
  }
}

TEST_CASE("error kinds: each has an exit code and a name, the exit codes are documented",
          "[toolkit][docs]") {
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/exit-codes.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  std::set<std::string> names;
  for (int k = 0; k < static_cast<int>(hvd::ErrorKind::kCount); ++k) {
    const auto kind = static_cast<hvd::ErrorKind>(k);
    const int code = hvd::to_int(hvd::exit_code_of(kind));
    INFO(hvd::kind_name(kind) << " -> " << code);
    CHECK(doc.find("\n| " + std::to_string(code) + " |") != std::string::npos);
    names.insert(std::string(hvd::kind_name(kind)));
  }
  CHECK(names.size() == static_cast<size_t>(hvd::ErrorKind::kCount));  // no two share a name
  // docs/cli.md lists every `error.kind` of the --json result (issue 55: job_timeout was not).
  std::ifstream cli_in(std::string(HVD_SOURCE_DIR) + "/docs/cli.md");
  REQUIRE(cli_in.good());
  std::stringstream cli_text;
  cli_text << cli_in.rdbuf();
  const std::string cli = cli_text.str();
  const auto list_at = cli.find("`kind` says which (");
  REQUIRE(list_at != std::string::npos);
  const std::string list = cli.substr(list_at, cli.find(')', list_at) - list_at);
  for (const std::string& name : names) {
    INFO("error kind " << name << " is not in docs/cli.md's list: " << list);
    CHECK(list.find("`" + name + "`") != std::string::npos);
  }
  CHECK(hvd::exit_code_of(hvd::ErrorKind::kUsage) == hvd::ExitCode::kUsage);
  CHECK(hvd::exit_code_of(hvd::ErrorKind::kRemote) == hvd::ExitCode::kCannotStart);
  CHECK(hvd::exit_code_of(hvd::ErrorKind::kLauncher) == hvd::ExitCode::kLauncherFailed);
  CHECK(hvd::LauncherError("x").exit_code() == hvd::ExitCode::kLauncherFailed);
  CHECK(hvd::Error("x").kind() == hvd::ErrorKind::kInternal);
}

TEST_CASE("run_and_capture: stdout and stderr together, and the status", "[toolkit]") {
  const auto run = hvd::run_and_capture(sh("echo out; echo err >&2; exit 3"));
  REQUIRE(run.has_value());
  CHECK_THAT(run->output, ContainsSubstring("out\n"));
  CHECK_THAT(run->output, ContainsSubstring("err\n"));
  CHECK(run->status.code() == 3);
  ProcessSpec missing;
  missing.argv = {"/no/such/helper"};
  CHECK_FALSE(hvd::run_and_capture(missing).has_value());
}

TEST_CASE("ScopedSigpipeBlock: a write to a closed pipe is EPIPE, and no SIGPIPE is left over",
          "[toolkit]") {
  // SIGPIPE at its default would end this test process: the guard is what keeps it alive.
  struct sigaction dfl {
  }, old{};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, &old);
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  ::close(fds[0]);
  ssize_t n = 0;
  int error = 0;
  {
    const hvd::ScopedSigpipeBlock guard;
    n = ::write(fds[1], "x", 1);
    error = errno;
  }
  ::close(fds[1]);
  sigset_t pending;
  ::sigpending(&pending);
  const bool left_over = sigismember(&pending, SIGPIPE) == 1;
  sigset_t now;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &now);
  ::sigaction(SIGPIPE, &old, nullptr);
  CHECK(n == -1);
  CHECK(error == EPIPE);
  CHECK_FALSE(left_over);
  CHECK_FALSE(sigismember(&now, SIGPIPE));  // unblocked again
}
