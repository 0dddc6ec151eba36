// Helpers for the local launch tests (test_launch_local.cpp, test_launch_signals.cpp): start the
// real hvdrun without waiting for it, wait with a deadline, find a job's processes by a random
// marker in /proc/*/environ, and temporary folders.
//
// Nothing here asserts: Catch2 v2 is not thread-safe, and the tests assert on the main thread.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace hvd::test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline std::string random_token() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex << rd() << rd() << rd();
  return out.str();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/hvd-launch-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// An elastic job's host discovery script in `dir` that counts its runs in $n (the first run is
// hvdrun's, before the launch) and then runs `body`, shell code that prints host[:slots] lines
// depending on $n.
inline std::string discovery_script(const TempDir& dir, const std::string& body) {
  const std::string path = dir / "discover.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                      << "n=$(cat '" << dir / "count"
                      << "' 2>/dev/null || echo 0)\n"
                      << "n=$((n + 1))\n"
                      << "echo $n > '" << dir / "count"
                      << "'\n"
                      << body;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// Processes (other than this one) whose /proc/PID/<file> contains `needle` (zombies have an
// empty environ and cmdline, so they never match).
inline std::vector<pid_t> pids_with(const std::string& file, const std::string& needle) {
  std::vector<pid_t> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* entry = ::readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string text = read_file("/proc/" + std::to_string(pid) + "/" + file);
    if (text.find(needle) != std::string::npos) out.push_back(pid);
  }
  ::closedir(dir);
  return out;
}

inline std::vector<pid_t> pids_with_env(const std::string& needle) {
  return pids_with("environ", needle);
}

inline std::string comm_of(pid_t pid) {
  std::string name = read_file("/proc/" + std::to_string(pid) + "/comm");
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

// The parent of `pid` (from /proc/PID/stat), or 0.
inline pid_t parent_of(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 1));
  char state = 0;
  pid_t ppid = 0;
  in >> state >> ppid;
  return ppid;
}

// Polls `done` every 20 ms until it holds or `limit` passes; says which.
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// Every process of a job carries the marker in its environment: hvdrun and its agent through
// LC_HVDJOB (the agent keeps LC_* as a login would, and hands its environment to the ranks), the
// ranks also through `-x HVDTEST_RANK_MARKER`. At the end of a test whatever still carries
// it is killed, so a failing test leaves nothing behind.
class JobMarker {
 public:
  JobMarker() : value_(random_token()) {}
  JobMarker(const JobMarker&) = delete;
  JobMarker& operator=(const JobMarker&) = delete;
  ~JobMarker() {
    for (int round = 0; round < 3; ++round) {
      for (pid_t pid : pids_with_env(value_)) ::kill(pid, SIGKILL);
    }
  }
  const std::string& value() const { return value_; }
  // hvdrun's environment entry.
  std::pair<std::string, std::string> env() const { return {"LC_HVDJOB", value_}; }
  // hvdrun's `-x` argument.
  std::string forward() const { return "HVDTEST_RANK_MARKER=" + value_; }
  // Every process of the job still alive (hvdrun included while it runs).
  std::vector<pid_t> alive() const { return pids_with_env(value_); }
  // The ranks and their descendants only.
  std::vector<pid_t> ranks() const { return pids_with_env("HVDTEST_RANK_MARKER=" + value_); }

 private:
  std::string value_;
};

// Rank processes named `sleep` (the ranks' own and the ones they left behind).
inline size_t sleeping(const JobMarker& marker) {
  size_t n = 0;
  for (pid_t pid : marker.ranks()) n += comm_of(pid) == "sleep" ? 1 : 0;
  return n;
}

// Each rank starts children as a DataLoader or a shell wrapper does, and a double-forked one in
// a session of its own (a daemon), then waits: 4 processes per rank, 3 of them `sleep`.
inline constexpr const char* kRanksWithChildren =
    "sleep 300 & sleep 300 & (setsid sleep 300 &); wait";

// A running hvdrun that the test did not wait for. Its stdout and stderr go to files (or stdout
// to a pipe the test reads). The destructor kills and reaps it if the test did not.
class Hvdrun {
 public:
  struct Setup {
    std::vector<std::string> args;
    std::vector<std::pair<std::string, std::string>> env;  // added to this process's environment
    std::string out_path;                                  // empty: stdout is a pipe
    std::string err_path;
    bool stdin_pipe = false;              // false: stdin is /dev/null
    std::string program = HVDRUN_BINARY;  // another program: hvdrun-agent, beside hvdrun
  };

  explicit Hvdrun(const Setup& setup) {
    std::vector<std::string> argv_strings{setup.program};
    argv_strings.insert(argv_strings.end(), setup.args.begin(), setup.args.end());
    std::map<std::string, std::string> env_map;
    for (char** p = environ; *p != nullptr; ++p) {
      const std::string entry(*p);
      const auto eq = entry.find('=');
      if (eq != std::string::npos) env_map[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    for (const auto& [name, value] : setup.env) env_map[name] = value;
    std::vector<std::string> env_strings;
    for (const auto& [name, value] : env_map) env_strings.push_back(name + "=" + value);

    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    int pipe_fds[2] = {-1, -1};
    int in_fds[2] = {-1, -1};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (setup.stdin_pipe) {
      if (::pipe2(in_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
      posix_spawn_file_actions_adddup2(&actions, in_fds[0], STDIN_FILENO);
    } else {
      posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    }
    if (setup.out_path.empty()) {
      if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
      posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    } else {
      posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, setup.out_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, setup.err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // Default signal handling and an empty mask, whatever the test runner left us with.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = ::posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
    if (in_fds[0] >= 0) ::close(in_fds[0]);
    out_fd_ = pipe_fds[0];
    in_fd_ = in_fds[1];
    if (rc != 0) {
      if (out_fd_ >= 0) ::close(out_fd_);
      if (in_fd_ >= 0) ::close(in_fd_);
      throw std::runtime_error(std::string("cannot start hvdrun: ") + std::strerror(rc));
    }
  }
  Hvdrun(const Hvdrun&) = delete;
  Hvdrun& operator=(const Hvdrun&) = delete;
  ~Hvdrun() {
    if (!exit_code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    close_stdin();
  }

  pid_t pid() const { return pid_; }
  // After wait(): whether a signal ended it (rather than an exit with 128 + N).
  bool signaled() const { return signaled_; }
  int stdout_fd() const { return out_fd_; }  // only when stdout is a pipe
  int stdin_fd() const { return in_fd_; }    // only with stdin_pipe
  void close_stdin() {
    if (in_fd_ >= 0) ::close(in_fd_);
    in_fd_ = -1;
  }
  void signal(int sig) const { ::kill(pid_, sig); }

  // The exit status (128 + signal for a signal), or -1 if it is still running after `limit`;
  // then it is killed and reaped.
  int wait(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!exit_code_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        signaled_ = WIFSIGNALED(status);
        break;
      }
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        exit_code_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(10ms);
    }
    return *exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;
  std::optional<int> exit_code_;
  bool signaled_ = false;
};

// The tagged lines `[1,R]<stream>:text` in `text`, per rank; `other` gets every line that does
// not carry a tag of `stream`.
struct TaggedLines {
  std::map<int, std::vector<std::string>> by_rank;
  std::vector<std::string> other;
};

inline TaggedLines split_tagged(const std::string& text, const std::string& stream) {
  TaggedLines out;
  static const std::regex kTag(R"(^\[1,([0-9]+)\]<([a-z]+)>:)");
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    std::smatch m;
    if (std::regex_search(line, m, kTag) && m[2] == stream) {
      out.by_rank[std::stoi(m[1])].push_back(line.substr(static_cast<size_t>(m.length(0))));
    } else {
      out.other.push_back(line);
    }
  }
  return out;
}

// The lines hvdrun makes of a rank's bytes (launcher/core/output_router.h): '\n', '\r' and "\r\n"
// end a line, a last partial line is flushed at exit.
inline std::vector<std::string> expected_lines(const std::string& bytes) {
  std::vector<std::string> lines;
  std::string partial;
  bool after_cr = false;
  for (char c : bytes) {
    if (c == '\n' && after_cr) {
      after_cr = false;
      continue;
    }
    after_cr = c == '\r';
    if (c == '\n' || c == '\r') {
      lines.push_back(partial);
      partial.clear();
    } else {
      partial += c;
    }
  }
  if (!partial.empty()) lines.push_back(partial);
  return lines;
}

}  // namespace hvd::test
