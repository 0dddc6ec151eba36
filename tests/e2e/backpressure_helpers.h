// Jobs whose output flows while something stops taking it (issue 51, findings 2 and 3), for every
// way an agent starts (test_launch_backpressure.cpp: a local agent;
// test_launch_ssh_backpressure.cpp: over SSH):
// - a console that stops reading: hvdrun's stdout is a pipe nobody reads for longer than twice
//   --keepalive while a rank prints megabytes. The back-pressure slows the rank; it must never
//   lose a host, and hvdrun must not spin while it waits.
// - a frozen hvdrun (SIGSTOP) while the ranks print: the agent's dead-man switch must stop them
//   although they, and the agent's output to hvdrun, are blocked.
//
// Nothing here asserts (Catch2 v2): the tests do, on what these return.
#pragma once

#include <poll.h>
#include <signal.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/launch_helpers.h"

namespace hvd::test::backpressure {

// The rank's program for the paused console: 1,300,000 numbered lines (9 MB, about 27 MB once
// tagged: more than hvdrun's 8 MiB console queue and every buffer on the way).
inline constexpr int kLines = 1300000;
inline std::vector<std::string> printing_rank() {
  return {"sh", "-c", "seq 1 " + std::to_string(kLines)};
}

// CPU seconds (user + system) a process has used so far; -1 if it is gone.
inline double cpu_seconds(pid_t pid) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream in(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 13 && in >> field; ++i) {
  }
  in >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Resident memory in MiB (VmRSS); -1 if it is gone.
inline double rss_mib(pid_t pid) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = text.find("VmRSS:");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + 6)) / 1024.0;
}

struct PausedReader {
  int exit_code = -1;
  double paused_cpu = -1;  // hvdrun's CPU seconds while nobody read its stdout
  double paused_rss = -1;  // its RSS in MiB at the end of the pause
  size_t lines = 0;        // rank 0's tagged lines
  size_t lines1 = 0;       // rank 1's (a job of 2 ranks)
  std::string last_line;
  std::string err;
};

// Starts hvdrun with `args` (which must end with printing_rank()), reads nothing of its stdout
// for `pause`, then everything until it exits.
inline PausedReader run_paused_reader(const std::vector<std::string>& args, const JobMarker& marker,
                                      const TempDir& dir, std::chrono::milliseconds pause) {
  PausedReader out;
  Hvdrun hvdrun({.args = args, .env = {marker.env()}, .out_path = "", .err_path = dir / "err"});
  // Up: the console's pipe is full, so the queue fills behind it.
  wait_until([&] { return !marker.ranks().empty(); }, 15s);
  std::this_thread::sleep_for(1s);
  const double cpu_before = cpu_seconds(hvdrun.pid());
  std::this_thread::sleep_for(pause);
  out.paused_cpu = cpu_seconds(hvdrun.pid()) - cpu_before;
  out.paused_rss = rss_mib(hvdrun.pid());
  std::string text;
  std::array<char, 1 << 16> buf{};
  const auto deadline = Clock::now() + 90s;
  while (Clock::now() < deadline) {
    pollfd p{hvdrun.stdout_fd(), POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    const ssize_t n = ::read(hvdrun.stdout_fd(), buf.data(), buf.size());
    if (n <= 0) break;
    text.append(buf.data(), static_cast<size_t>(n));
  }
  out.exit_code = hvdrun.wait(10s);
  const TaggedLines tagged = split_tagged(text, "stdout");
  if (tagged.by_rank.count(0) != 0) {
    out.lines = tagged.by_rank.at(0).size();
    out.last_line = tagged.by_rank.at(0).back();
  }
  if (tagged.by_rank.count(1) != 0) out.lines1 = tagged.by_rank.at(1).size();
  out.err = read_file(dir / "err");
  return out;
}

struct FrozenLauncher {
  bool printing = false;  // the ranks ran and printed before hvdrun froze
  std::optional<std::chrono::milliseconds> ranks_gone_after;  // since the freeze
  std::string err;
};

// Starts hvdrun with `args` (ranks that print without end; hvdrun's stdout is /dev/null), lets
// the ranks print for a second, then freezes hvdrun and waits up to `limit` for every rank to
// be gone. hvdrun is killed afterwards.
inline FrozenLauncher run_frozen_launcher(const std::vector<std::string>& args,
                                          const JobMarker& marker, const TempDir& dir, size_t ranks,
                                          std::chrono::milliseconds limit) {
  FrozenLauncher out;
  Hvdrun hvdrun(
      {.args = args, .env = {marker.env()}, .out_path = "/dev/null", .err_path = dir / "err"});
  out.printing = wait_until([&] { return marker.ranks().size() >= ranks; }, 15s);
  std::this_thread::sleep_for(1s);
  const auto start = Clock::now();
  hvdrun.signal(SIGSTOP);
  if (wait_until([&] { return marker.ranks().empty(); }, limit)) {
    out.ranks_gone_after =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  }
  hvdrun.signal(SIGKILL);
  hvdrun.signal(SIGCONT);
  hvdrun.wait(5s);
  out.err = read_file(dir / "err");
  return out;
}

// A rank that prints as fast as the job takes it, for ever.
inline std::vector<std::string> endless_rank() {
  return {"sh", "-c", "while :; do seq 1 100000; done"};
}

}  // namespace hvd::test::backpressure
