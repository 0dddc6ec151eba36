#include "tests/cli/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

#include "common/unique_fd.h"

extern char** environ;

namespace hvd::test {
namespace {

using hvd::UniqueFd;

using Clock = std::chrono::steady_clock;

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

std::string errno_text(std::string_view what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

// O_CLOEXEC on both ends: the child gets only the dup2'ed copies, so when it exits the write
// ends are really gone and the reads below see end-of-file instead of hanging.
Pipe make_pipe() {
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) throw std::runtime_error(errno_text("pipe2", errno));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// posix_spawn's file actions and attributes need an explicit destroy call.
class SpawnSetup {
 public:
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions_);
    posix_spawnattr_init(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  ~SpawnSetup() {
    posix_spawnattr_destroy(&attr_);
    posix_spawn_file_actions_destroy(&actions_);
  }
  posix_spawn_file_actions_t* actions() { return &actions_; }
  posix_spawnattr_t* attr() { return &attr_; }

 private:
  posix_spawn_file_actions_t actions_{};
  posix_spawnattr_t attr_{};
};

// The started hvdrun. Its own process group (pgid == pid) lets a timeout kill anything it started
// as well. If a test throws before the child was reaped, the destructor kills and reaps it, so a
// failing test never leaves a process or a zombie behind.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { kill_and_reap(); }

  // Waits until `deadline` for the child to exit; returns its wait status, or nullopt on timeout.
  // Polls with short sleeps: by the time both pipes reached end-of-file the child is exiting, so
  // this loop normally runs once.
  std::optional<int> wait_until(Clock::time_point deadline) {
    while (true) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        return status;
      }
      if (done < 0 && errno != EINTR) throw std::runtime_error(errno_text("waitpid", errno));
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  void kill_and_reap() {
    if (pid_ <= 0) return;   // already reaped: never signal a stale or special pid
    ::kill(-pid_, SIGKILL);  // the whole group: hvdrun and anything it started
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

std::string describe(const std::vector<std::string>& argv) {
  std::string text = argv.front();
  for (size_t i = 1; i < argv.size(); ++i) text += " '" + argv[i] + "'";
  return text;
}

// This process's environment with `extra` added; an extra entry replaces a same-named one.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view entry(*p);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : extra) overridden = overridden || kv.first == name;
    if (!overridden) env.emplace_back(entry);
  }
  for (const auto& [name, value] : extra) env.push_back(name + "=" + value);
  return env;
}

// execve wants mutable char* arrays ending in nullptr; `words` owns the bytes.
std::vector<char*> c_array(std::vector<std::string>& words) {
  std::vector<char*> out;
  for (std::string& w : words) out.push_back(w.data());
  out.push_back(nullptr);
  return out;
}

pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env, const Pipe& out,
            const Pipe& err) {
  SpawnSetup setup;
  posix_spawn_file_actions_addopen(setup.actions(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // dup2 clears O_CLOEXEC on the copy, so only fds 0-2 survive the exec.
  posix_spawn_file_actions_adddup2(setup.actions(), out.write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(setup.actions(), err.write_end.get(), STDERR_FILENO);
  posix_spawnattr_setflags(setup.attr(), POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(setup.attr(), 0);

  std::vector<char*> c_argv = c_array(argv);
  std::vector<char*> c_env = c_array(env);
  pid_t pid = -1;
  // glibc's posix_spawn reports a failed exec (missing binary, no permission) here, not as a
  // child exit code, so a wrong HVDRUN_BINARY is a clear error rather than exit code 127.
  const int rc = ::posix_spawn(&pid, argv.front().c_str(), setup.actions(), setup.attr(),
                               c_argv.data(), c_env.data());
  if (rc != 0) throw std::runtime_error(errno_text("posix_spawn " + argv.front(), rc));
  return pid;
}

// Reads both pipes until end-of-file or `deadline`. Both are polled together so a child that
// fills one pipe while we wait on the other cannot deadlock. Returns false on timeout.
bool drain(UniqueFd& out_fd, UniqueFd& err_fd, RunResult& result, Clock::time_point deadline) {
  std::array<pollfd, 2> fds{{{out_fd.get(), POLLIN, 0}, {err_fd.get(), POLLIN, 0}}};
  std::array<std::string*, 2> sinks{&result.out, &result.err};
  std::array<char, 65536> buffer{};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(errno_text("poll", errno));
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n > 0) {
        sinks[i]->append(buffer.data(), static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // end-of-file (or a read error): poll() skips negative fds
      }
    }
  }
  out_fd.reset();
  err_fd.reset();
  return true;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

RunResult run_hvdrun(const std::vector<std::string>& args,
                     const std::vector<std::pair<std::string, std::string>>& extra_env,
                     std::chrono::seconds timeout) {
  std::vector<std::string> argv{HVDRUN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, extra_env, timeout);
}

RunResult run_program(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& extra_env,
                      std::chrono::seconds timeout) {
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  const Clock::time_point deadline = Clock::now() + timeout;
  Child child(spawn(argv, child_environment(extra_env), out, err));
  // Our copies of the write ends must go, or the reads would never see end-of-file.
  out.write_end.reset();
  err.write_end.reset();

  RunResult result;
  std::optional<int> status;
  if (drain(out.read_end, err.read_end, result, deadline)) status = child.wait_until(deadline);
  if (!status) {
    child.kill_and_reap();
    throw std::runtime_error(describe(argv) + ": still running after " +
                             std::to_string(timeout.count()) + " s, killed it.\nstdout so far:\n" +
                             result.out + "\nstderr so far:\n" + result.err);
  }
  result.exit_code = exit_code_of(*status);
  return result;
}

}  // namespace hvd::test
