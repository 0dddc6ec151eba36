// The agent's part in naming a stalled job's culprit (docs/why.md): every rank's report
// channel (contract/report.h) goes to the launcher line by line (kRankReport), the stack pipe
// is read whenever it has something, and kInspect reads the asked ranks' processes: state, CPU
// over a short window, the engine thread's state and, where the binding installed the handler,
// every thread's Python stack.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "agent/agent_impl.h"
#include "agent/inspect.h"
#include "contract/report.h"

namespace hvd::agent {
namespace {

constexpr size_t kMaxStackDump = 256 * 1024;
// An inspection: the CPU window, and how long a stack dump may take (it is written by a signal
// handler at once; a rank under heavy load may take a moment).
constexpr auto kCpuWindow = std::chrono::milliseconds(300);
constexpr auto kStackWait = std::chrono::milliseconds(1000);
constexpr auto kStackQuiet = std::chrono::milliseconds(100);  // a dump is over after this

// Whether `pid` is the rank's process or one it started that stayed in its process group (the
// rank leads its own group: common/process.h), and not a stranger that reused a pid.
bool in_rank_group(const LiveRank& rank, pid_t pid) {
  return rank.process.running() && ::getpgid(pid) == rank.process.pid();
}

// The process to read: the one that announced the stack handler while it is still in the
// rank's group, else the rank's own.
pid_t inspected_pid(const LiveRank& rank) {
  return rank.stack_pid > 0 && in_rank_group(rank, rank.stack_pid) ? rank.stack_pid
                                                                   : rank.process.pid();
}

}  // namespace

bool Agent::read_report(LiveRank& rank) {
  std::array<char, 16384> buf{};
  const long n = read_some(rank.report.get(), buf.data(), buf.size());
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    rank.report.reset();  // the rank closed it or ended
    return false;
  }
  rank.report_partial.append(buf.data(), static_cast<size_t>(n));
  size_t newline = 0;
  while ((newline = rank.report_partial.find('\n')) != std::string::npos) {
    const std::string line = rank.report_partial.substr(0, newline);
    rank.report_partial.erase(0, newline + 1);
    const auto json = nlohmann::json::parse(line, nullptr, false);
    if (!json.is_object() || !json.contains("kind") || !json["kind"].is_string()) {
      std::fprintf(stderr, "hvdrun agent: rank %d wrote a report line that is not ours\n",
                   rank.rank);
      continue;
    }
    if (json["kind"] == "stack_handler") {  // "kind" is a string: checked above
      // Only a real-time signal (anything else could end or stop the rank), and only to a
      // process of the rank's own group (inspect() checks again before each signal).
      const auto number = [&json](const char* key) {
        const auto it = json.find(key);
        return it != json.end() && it->is_number_integer() ? it->get<long long>() : 0LL;
      };
      const long long sig = number("signal");
      const long long pid = number("pid");
      if (sig >= SIGRTMIN && sig <= SIGRTMAX && pid > 0 && pid <= INT32_MAX &&
          in_rank_group(rank, static_cast<pid_t>(pid))) {
        rank.stack_signal = static_cast<int>(sig);
        rank.stack_pid = static_cast<pid_t>(pid);
      }
      continue;
    }
    send(FrameType::kRankReport, encode_rank_report({static_cast<uint32_t>(rank.rank), line}));
  }
  if (rank.report_partial.size() > contract::kMaxReportLine) {
    std::fprintf(stderr, "hvdrun agent: rank %d wrote a report line over %zu bytes: dropped\n",
                 rank.rank, contract::kMaxReportLine);
    rank.report_partial.clear();
  }
  return true;
}

void Agent::read_stack(LiveRank& rank) {
  std::array<char, 16384> buf{};
  while (rank.stack.valid()) {
    const long n = read_some(rank.stack.get(), buf.data(), buf.size());
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      rank.stack.reset();
      return;
    }
    // Always read (a full pipe would block the rank's signal handler); keep what fits.
    const size_t room = kMaxStackDump - std::min(kMaxStackDump, rank.stack_dump.size());
    rank.stack_dump.append(buf.data(), std::min(room, static_cast<size_t>(n)));
  }
}

void Agent::inspect(const std::string& payload) {
  using Clock = std::chrono::steady_clock;
  const auto request = nlohmann::json::parse(payload, nullptr, false);
  if (!request.is_object() || !request.contains("ranks") || !request["ranks"].is_array()) {
    throw Error("protocol error: an inspect frame without its list of ranks");
  }
  struct Target {
    int rank = 0;
    LiveRank* live = nullptr;
    pid_t pid = 0;  // inspected_pid()
    std::optional<ProcSample> first;
    bool signalled = false;
    Clock::time_point last_data{};
  };
  std::vector<Target> targets;
  for (const auto& r : request["ranks"]) {
    if (!r.is_number_integer() || targets.size() == 4096) continue;
    Target t;
    t.rank = r.get<int>();
    for (LiveRank& live : ranks_) {
      if (live.rank == t.rank && live.process.running()) t.live = &live;
    }
    targets.push_back(t);
  }
  const Clock::time_point start = Clock::now();
  for (Target& t : targets) {
    if (t.live == nullptr) continue;
    t.pid = inspected_pid(*t.live);
    t.first = sample_process(t.pid);
    // A stopped rank runs no handler until it is continued: no signal, so that it is not
    // left with a pending dump; a zombie has no stack.
    const bool can_dump = t.first && t.first->state != 'T' && t.first->state != 't' &&
                          t.first->state != 'Z' && t.first->state != 'X';
    if (t.live->stack_signal != 0 && t.pid == t.live->stack_pid && t.live->stack.valid() &&
        can_dump) {
      t.live->stack_dump.clear();
      t.signalled = ::kill(t.pid, t.live->stack_signal) == 0;
    }
  }
  // Read the dumps as they come, until each is over (quiet after its first bytes) or the wait
  // is up, and at least for the CPU window.
  while (true) {
    const Clock::time_point now = Clock::now();
    const bool dumps_over = std::all_of(targets.begin(), targets.end(), [&](const Target& t) {
      return !t.signalled || !t.live->stack.valid() ||
             (!t.live->stack_dump.empty() && now - t.last_data >= kStackQuiet);
    });
    if (now - start >= kStackWait || (dumps_over && now - start >= kCpuWindow)) break;
    std::vector<pollfd> fds;
    std::vector<Target*> owners;
    for (Target& t : targets) {
      if (t.signalled && t.live->stack.valid()) {
        fds.push_back({t.live->stack.get(), POLLIN, 0});
        owners.push_back(&t);
      }
    }
    ::poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const size_t before = owners[i]->live->stack_dump.size();
      read_stack(*owners[i]->live);
      if (owners[i]->live->stack_dump.size() != before) owners[i]->last_data = Clock::now();
    }
  }
  const double window = std::chrono::duration<double>(Clock::now() - start).count();
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  nlohmann::json out = nlohmann::json::array();
  for (Target& t : targets) {
    nlohmann::json one = {{"rank", t.rank}};
    const std::optional<ProcSample> second =
        t.live == nullptr ? std::nullopt : sample_process(t.pid);
    if (!t.first || !second) {
      one["state"] = "gone";
      out.push_back(one);
      continue;
    }
    one["pid"] = t.pid;
    one["state"] = state_name(second->state);
    one["cpu_seconds"] = static_cast<double>(second->cpu_ticks) / ticks;
    const double used =
        static_cast<double>(second->cpu_ticks - std::min(second->cpu_ticks, t.first->cpu_ticks));
    one["cpu_percent"] = window > 0 ? std::round(1000.0 * used / ticks / window) / 10.0 : 0.0;
    const std::vector<ThreadSample> threads = thread_states(t.pid);
    one["threads"] = threads.size();
    for (const ThreadSample& th : threads) {
      if (th.name == contract::kEngineThreadName) one["engine"] = state_name(th.state);
    }
    if (t.signalled) {
      one["stack"] = parse_faulthandler_dump(t.live->stack_dump);
      if (one["stack"].empty()) one["stack_note"] = "the rank did not write its stack in time";
    } else if (t.live->stack_signal == 0 || t.pid != t.live->stack_pid) {
      one["stack_note"] = "no Python stack handler (not a Python rank, or hvd not imported yet)";
    } else {
      one["stack_note"] = fmt::format("no stack: the process is {}", state_name(second->state));
    }
    out.push_back(one);
  }
  send(FrameType::kInspection, nlohmann::json{{"ranks", out}}.dump(
                                   -1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace hvd::agent
