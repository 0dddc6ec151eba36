#include "worker/agent.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/process.h"
#include "common/signal_fd.h"
#include "common/unique_fd.h"
#include "contract/elastic.h"
#include "contract/env_table.h"
#include "hvd/build_config.h"
#include "worker/interfaces.h"
#include "worker/job_spec.h"
#include "worker/probe.h"
#include "worker/protocol.h"

extern char** environ;

namespace hvd::worker {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr int kSweepMs = 100;  // how often leftover descendants are looked for while stopping

struct LiveRank {
  int rank = 0;
  Process process;  // reaped by the agent's waitpid(-1) (it is a subreaper), then set_reaped
  bool reported = false;
  bool stopped = false;  // signalled by a job stop while it ran: it did not end on its own
  // Elastic jobs: the agent's end of the rank's channel (the rank has the other on fd 3), and
  // what it wrote after its last newline.
  UniqueFd channel;
  std::string partial;
};

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

nlohmann::json interfaces_json() {
  nlohmann::json list = nlohmann::json::array();
  for (const NetInterface& n : list_interfaces()) {
    list.push_back({{"name", n.name},
                    {"ipv4", n.ipv4},
                    {"ipv6", n.ipv6},
                    {"up", n.up},
                    {"loopback", n.loopback},
                    {"virtual", n.is_virtual}});
  }
  return list;
}

std::string host_name() {
  std::array<char, 256> name{};
  ::gethostname(name.data(), name.size() - 1);
  return name.data();
}

std::string hello_payload() {
  const char* ssh_connection = std::getenv("SSH_CONNECTION");
  const nlohmann::json hello = {{"protocol", kProtocolVersion},
                                {"version", HVD_VERSION_STRING},
                                {"hostname", host_name()},
                                {"boot_id", read_first_line("/proc/sys/kernel/random/boot_id")},
                                {"pid", ::getpid()},
                                {"ssh_connection", ssh_connection != nullptr ? ssh_connection : ""},
                                {"interfaces", interfaces_json()}};
  return hello.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Children of this process that are not ranks: ranks' descendants re-parented to us (we are
// a subreaper) after their parent died.
// Whether the child `pid` has exited, without reaping it (WNOWAIT).
bool has_exited(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

// This process's children, from /proc/self/task/*/children (a child is listed under the thread
// that forked it, or under the main thread once re-parented to us); nullopt where the kernel has
// no such file (CONFIG_PROC_CHILDREN off). Reading them costs a few files, where scanning /proc
// reads one per process of the machine (thousands on a busy node).
std::optional<std::vector<pid_t>> listed_children() {
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return std::nullopt;
  std::vector<pid_t> out;
  bool found = false;
  while (dirent* task = ::readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    std::ifstream in(fmt::format("/proc/self/task/{}/children", task->d_name));
    if (!in) continue;
    found = true;
    for (long pid = 0; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(tasks);
  if (!found) return std::nullopt;
  return out;
}

std::vector<pid_t> stray_children(const std::vector<LiveRank>& ranks) {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  std::vector<pid_t> candidates;
  if (auto children = listed_children()) {
    candidates = std::move(*children);
  } else {
    DIR* dir = ::opendir("/proc");
    if (dir == nullptr) return out;
    while (dirent* entry = ::readdir(dir)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
      if (pid > 0) candidates.push_back(pid);
    }
    ::closedir(dir);
  }
  for (const pid_t pid : candidates) {
    const std::string stat = read_first_line(fmt::format("/proc/{}/stat", pid).c_str());
    const auto close = stat.rfind(')');  // the command name may contain spaces and ')'
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != self || state == 'Z') continue;
    bool is_rank = false;
    for (const LiveRank& r : ranks) is_rank |= (r.process.pid() == pid && r.process.running());
    if (!is_rank) out.push_back(pid);
  }
  return out;
}

class Agent {
 public:
  Agent(int in_fd, int out_fd) : in_fd_(in_fd), out_fd_(out_fd) {}
  int run();

 private:
  bool send(FrameType type, std::string_view payload = {});
  bool read_spec();
  bool start_ranks();
  std::optional<std::pair<std::string, std::string>> start_rank(const RankSpec& rank);
  void start_more(const JobSpec& more);
  void error(const std::string& message, const std::string& hint = "");
  std::vector<std::string> rank_environment(const RankSpec& rank) const;
  void handle_input();
  void handle_frames();
  void handle_signals();
  void drain(LiveRank& rank, UniqueFd& fd, Stream stream, bool until_eof);
  void read_channel(LiveRank& rank);
  void announce(const GenerationNotice& notice);
  void reap();
  void report_exits();
  void stop(int signal);
  bool finished() const;
  void arm_timer(int ms);

  int in_fd_;   // borrowed: the agent's stdin (frames from the launcher)
  int out_fd_;  // borrowed: its stdout (frames to the launcher)
  JobSpec spec_;
  std::optional<ProbeListener> listener_;  // from kProbeListen until the ranks start
  FrameReader reader_;
  std::vector<LiveRank> ranks_;
  std::optional<SignalFd> signals_;
  UniqueFd timer_fd_;
  bool input_open_ = true;
  bool stopping_ = false;  // SIGTERM sent
  bool killing_ = false;   // SIGKILL sent
  bool launcher_gone_ = false;
  // The agent's side of --keepalive. From its hello on, the launcher pings it three times per
  // --keepalive period, each ping carrying the limit (2 x --keepalive): this long without a byte
  // from the launcher means the launcher or the link is gone although the connection looks open
  // (the launcher frozen, a link cut without a reset). Before the spec the agent then exits;
  // after it, it stops its ranks as when its input closes.
  std::chrono::steady_clock::time_point last_heard_ = std::chrono::steady_clock::now();
  std::chrono::milliseconds silence_limit_{0};  // 0: none (no ping yet, or --keepalive 0)
  // Until the launcher counts as gone, in ms; -1: never; 0: it is gone.
  int silence_left_ms() const;
  void on_ping(const std::string& payload);
  // Elastic jobs: a joining host's network check while the job runs (kProbeListen, kProbe,
  // kProbeClose). The probes run on a thread of their own, so that output keeps flowing; its
  // outcomes come back through `probed_` and a byte on the pipe.
  void start_probes(const ProbeRequest& request);
  void finish_probes();
  UniqueFd probe_done_read_, probe_done_write_;
  std::mutex probe_mutex_;
  std::vector<ProbeOutcome> probed_;
  std::jthread prober_;  // last: joined before what it uses is destroyed
};

bool Agent::send(FrameType type, std::string_view payload) {
  if (launcher_gone_) return false;
  if (!write_all(out_fd_, encode_frame(type, payload))) launcher_gone_ = true;
  return !launcher_gone_;
}

void Agent::error(const std::string& message, const std::string& hint) {
  // Messages quote paths and peer bytes, which need not be UTF-8.
  send(FrameType::kError, nlohmann::json{{"message", message}, {"hint", hint}}.dump(
                              -1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// Before the job: the launcher may have the agent probe the network (worker/probe.h), then
// sends the spec. The probe listener keeps greeting other hosts' probes while this agent waits.
bool Agent::read_spec() {
  std::array<char, kReadChunk> buf{};
  while (true) {
    try {
      while (auto frame = reader_.next()) {
        switch (frame->type) {
          case FrameType::kTerminate:
          case FrameType::kKill:
            return false;  // stopped before it started: nothing to do
          case FrameType::kProbeListen: {
            const ProbeListenRequest request = decode_probe_listen(frame->payload);
            listener_.emplace(request.range, request.token);
            send(FrameType::kListening, encode_listening(listener_->port()));
            break;
          }
          case FrameType::kProbe: {
            const ProbeRequest request = decode_probe_request(frame->payload);
            const auto outcomes =
                run_probes(request.targets, std::chrono::milliseconds(request.timeout_ms),
                           listener_ ? &*listener_ : nullptr);
            send(FrameType::kProbeResult, encode_probe_results(outcomes));
            break;
          }
          case FrameType::kProbeClose:
            listener_.reset();
            send(FrameType::kProbeClosed);
            break;
          case FrameType::kPing:
            on_ping(frame->payload);
            break;
          case FrameType::kSpec:
            spec_ = decode_spec(frame->payload);
            return true;
          default:
            error("protocol error: expected a job spec first");
            return false;
        }
      }
    } catch (const Error& e) {
      error(e.what(), e.hint());  // the launcher names the host
      return false;
    }
    // A launcher silent past the pings' limit (a link cut without a reset) sends no job: the
    // agent has nothing to stop and leaves.
    const int silence = silence_left_ms();
    std::vector<pollfd> fds{{in_fd_, POLLIN, 0}};
    if (listener_) listener_->add_pollfds(fds);
    if (::poll(fds.data(), fds.size(), silence) < 0 && errno != EINTR) return false;
    if (silence == 0 && fds[0].revents == 0) return false;  // nothing waiting to be read either
    if (listener_ &&
        std::any_of(fds.begin() + 1, fds.end(), [](const pollfd& f) { return f.revents != 0; })) {
      listener_->serve();
    }
    if (fds[0].revents == 0) continue;
    const long n = read_some(in_fd_, buf.data(), buf.size());
    if (n <= 0) return false;  // the launcher went away before sending a job
    last_heard_ = std::chrono::steady_clock::now();
    reader_.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
}

std::vector<std::string> Agent::rank_environment(const RankSpec& rank) const {
  // Base: this agent's own environment (the host's login environment), less anything that
  // would contradict the contract; then the planned values on top.
  std::vector<std::pair<std::string, std::string>> env;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string_view entry(*p);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string name(entry.substr(0, eq));
    if (name.starts_with(contract::kInternalPrefix) || contract::find_env_var(name) != nullptr) {
      continue;
    }
    env.emplace_back(name, std::string(entry.substr(eq + 1)));
  }
  for (const auto& [name, value] : rank.env) {
    auto it =
        std::find_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
    if (it != env.end()) {
      it->second = value;
    } else {
      env.emplace_back(name, value);
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

bool Agent::start_ranks() {
  // The probes are over: the listener goes before any rank starts (rank 0's host closed it
  // earlier, on kProbeClose, so that MASTER_PORT, its port, was free for the job).
  listener_.reset();
  struct stat st {};
  if (::stat(spec_.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    error(fmt::format("host {}: the working directory {} does not exist", spec_.host, spec_.cwd),
          "create it on that host, or pick another with --wd");
    return false;
  }
  for (const RankSpec& rank : spec_.ranks) {
    if (const auto failed = start_rank(rank)) {
      error(failed->first, failed->second);
      stop(SIGKILL);
      return false;
    }
  }
  return true;
}

// Starts one rank; on failure, what went wrong and the hint.
std::optional<std::pair<std::string, std::string>> Agent::start_rank(const RankSpec& rank) {
  // A rank dies with its agent (SIGKILL), the agent's dead-man switch of last resort.
  ProcessSpec process;
  process.argv = spec_.argv;
  process.env = rank_environment(rank);
  process.cwd = spec_.cwd;
  process.parent_death_signal = SIGKILL;
  // Elastic: the rank's channel to this agent, its end on fd 3 (HVD_ELASTIC_FD).
  UniqueFd ours, theirs;
  if (spec_.elastic) {
    std::array<int, 2> pair{};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair.data()) != 0) {
      return std::pair{fmt::format("host {}: rank {}: no socket pair for its elastic channel: {}",
                                   spec_.host, rank.rank, std::strerror(errno)),
                       std::string("the host is out of file descriptors")};
    }
    ours.reset(pair[0]);
    theirs.reset(pair[1]);
    ::fcntl(ours.get(), F_SETFL, ::fcntl(ours.get(), F_GETFL) | O_NONBLOCK);
    process.pass_fd = std::pair{theirs.get(), contract::kElasticChannelFd};
  }
  Process spawned = Process::spawn(process);
  theirs.reset();  // the rank has it now
  if (!spawned.started()) {
    return std::pair{
        fmt::format("host {}: rank {}: {}", spec_.host, rank.rank, spawned.error()),
        std::string("check the path of the program on that host (a relative path is relative to "
                    "the working directory, a bare name is looked up in the rank's PATH)")};
  }
  const auto pid = static_cast<uint32_t>(spawned.pid());
  ranks_.push_back({rank.rank, std::move(spawned), false, false, std::move(ours), {}});
  send(FrameType::kStarted, encode_started({static_cast<uint32_t>(rank.rank), pid}));
  return std::nullopt;
}

// Elastic jobs: more ranks while the job runs (a refilled slot). One that cannot start is
// reported (kStartFailed) and the job goes on: the launcher counts it as that worker's failure.
void Agent::start_more(const JobSpec& more) {
  for (const RankSpec& rank : more.ranks) {
    const bool taken = std::any_of(ranks_.begin(), ranks_.end(),
                                   [&](const LiveRank& r) { return r.rank == rank.rank; });
    std::optional<std::pair<std::string, std::string>> failed;
    if (stopping_ || killing_) {
      failed = std::pair{
          fmt::format("host {}: rank {} not started: the job is stopping", spec_.host, rank.rank),
          std::string()};
    } else if (taken) {
      failed =
          std::pair{fmt::format("host {}: worker {} was started before", spec_.host, rank.rank),
                    std::string("a launcher bug: worker ids are never reused")};
    } else {
      failed = start_rank(rank);
    }
    if (failed) {
      send(FrameType::kStartFailed,
           nlohmann::json{
               {"worker", rank.rank}, {"message", failed->first}, {"hint", failed->second}}
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
}

void Agent::drain(LiveRank& rank, UniqueFd& fd, Stream stream, bool until_eof) {
  std::array<char, kReadChunk> buf{};
  while (fd.valid()) {
    if (!until_eof) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return;
    }
    const long n = read_some(fd.get(), buf.data(), buf.size());
    if (n <= 0) {
      fd.reset();
      return;
    }
    send(FrameType::kOutput, encode_output({static_cast<uint32_t>(rank.rank), stream,
                                            std::string(buf.data(), static_cast<size_t>(n))}));
    if (until_eof) return;  // one chunk per poll wake-up keeps ranks fair
  }
}

// The lines a rank writes on its elastic channel ("joined 3") go to the launcher as they are;
// the launcher reads them. A line longer than kMaxRankEventLine is not one of ours: dropped.
void Agent::read_channel(LiveRank& rank) {
  std::array<char, 1024> buf{};
  const long n = read_some(rank.channel.get(), buf.data(), buf.size());
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    rank.channel.reset();  // the rank closed it or ended
    return;
  }
  rank.partial.append(buf.data(), static_cast<size_t>(n));
  size_t newline = 0;
  while ((newline = rank.partial.find('\n')) != std::string::npos) {
    if (newline <= kMaxRankEventLine) {
      send(FrameType::kRankEvent,
           encode_rank_event({static_cast<uint32_t>(rank.rank), rank.partial.substr(0, newline)}));
    }
    rank.partial.erase(0, newline + 1);
  }
  if (rank.partial.size() > kMaxRankEventLine) rank.partial.clear();
}

// "gen G" to each rank of this agent that is in generation G. A full channel (a rank that does
// not read it) loses the line rather than block the agent: the rank learns of G at its next
// commit from the others anyway.
void Agent::announce(const GenerationNotice& notice) {
  const std::string line = fmt::format("gen {}\n", notice.generation);
  for (LiveRank& r : ranks_) {
    if (!r.channel.valid()) continue;
    if (std::find(notice.workers.begin(), notice.workers.end(), static_cast<uint32_t>(r.rank)) ==
        notice.workers.end()) {
      continue;
    }
    [[maybe_unused]] const ssize_t n =
        ::send(r.channel.get(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

void Agent::reap() {
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (LiveRank& r : ranks_) {
      if (r.process.pid() == pid && r.process.running()) r.process.set_reaped(status);
    }
  }
}

void Agent::report_exits() {
  for (LiveRank& r : ranks_) {
    if (r.process.running() || r.reported) continue;
    // Take what is already in the pipes, but do not wait for an escaped descendant that
    // still holds them open.
    drain(r, r.process.out(), Stream::kStdout, false);
    drain(r, r.process.err(), Stream::kStderr, false);
    r.process.out().reset();
    r.process.err().reset();
    const ExitStatus status = *r.process.status();
    RankExited exited{static_cast<uint32_t>(r.rank), status.signaled,
                      static_cast<uint32_t>(status.value), r.stopped};
    send(FrameType::kExited, encode_exited(exited));
    r.reported = true;
  }
}

void Agent::stop(int signal) {
  if (signal == SIGKILL) {
    killing_ = true;
  } else if (!stopping_) {
    stopping_ = true;
    arm_timer(static_cast<int>(spec_.grace_seconds * 1000));
  }
  // Signal again on every sweep: descendants that escaped with setsid re-parent to us only
  // when their parent dies, so new strays keep appearing while the job winds down. A rank that
  // had already ended (reaped, or a zombie not reaped yet) ended on its own, not by the stop.
  for (LiveRank& r : ranks_) {
    if (r.process.running() && !has_exited(r.process.pid())) r.stopped = true;
    r.process.signal_group(signal);
  }
  for (pid_t stray : stray_children(ranks_)) {
    ::kill(-stray, signal);
    ::kill(stray, signal);
  }
}

void Agent::arm_timer(int ms) {
  itimerspec spec{};
  spec.it_value.tv_sec = ms / 1000;
  spec.it_value.tv_nsec = static_cast<long>(ms % 1000) * 1000000L + 1;
  ::timerfd_settime(timer_fd_.get(), 0, &spec, nullptr);
}

void Agent::start_probes(const ProbeRequest& request) {
  if (prober_.joinable()) prober_.join();  // the launcher asks one check at a time
  if (!probe_done_read_.valid()) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
    probe_done_read_.reset(fds[0]);
    probe_done_write_.reset(fds[1]);
  }
  prober_ = std::jthread([this, request] {
    std::vector<ProbeOutcome> outcomes =
        run_probes(request.targets, std::chrono::milliseconds(request.timeout_ms), nullptr);
    {
      std::lock_guard<std::mutex> lock(probe_mutex_);
      probed_ = std::move(outcomes);
    }
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(probe_done_write_.get(), &byte, 1);
  });
}

void Agent::finish_probes() {
  char byte = 0;
  while (::read(probe_done_read_.get(), &byte, 1) == 1) {
  }
  if (prober_.joinable()) prober_.join();
  std::vector<ProbeOutcome> outcomes;
  {
    std::lock_guard<std::mutex> lock(probe_mutex_);
    outcomes = std::move(probed_);
  }
  send(FrameType::kProbeResult, encode_probe_results(outcomes));
}

bool Agent::finished() const {
  // An elastic job may start more ranks here later: the agent stays until the launcher ends the
  // job (kTerminate, kKill) or goes away.
  if (spec_.elastic && !stopping_ && !killing_ && input_open_) return false;
  for (const LiveRank& r : ranks_) {
    if (!r.reported) return false;
  }
  return true;
}

void Agent::handle_input() {
  std::array<char, 4096> buf{};
  const long n = read_some(in_fd_, buf.data(), buf.size());
  if (n <= 0) {  // dead-man switch: the launcher or the link is gone
    input_open_ = false;
    launcher_gone_ = true;
    stop(SIGTERM);
    return;
  }
  last_heard_ = std::chrono::steady_clock::now();
  reader_.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
  handle_frames();
}

int Agent::silence_left_ms() const {
  if (silence_limit_.count() <= 0 || launcher_gone_ || !input_open_) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      last_heard_ + silence_limit_ - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(std::min<long>(left.count() + 1, 1 << 30)) : 0;
}

void Agent::on_ping(const std::string& payload) {
  silence_limit_ = std::chrono::milliseconds(decode_ping(payload));
  send(FrameType::kPong);
}

void Agent::handle_frames() {
  try {
    while (auto frame = reader_.next()) {
      if (frame->type == FrameType::kTerminate) stop(SIGTERM);
      if (frame->type == FrameType::kKill) stop(SIGKILL);
      if (frame->type == FrameType::kPing) on_ping(frame->payload);
      if (frame->type == FrameType::kGeneration) announce(decode_generation(frame->payload));
      if (spec_.elastic && frame->type == FrameType::kProbeListen) {
        const ProbeListenRequest request = decode_probe_listen(frame->payload);
        try {
          listener_.reset();
          listener_.emplace(request.range, request.token);
          send(FrameType::kListening, encode_listening(listener_->port()));
        } catch (const Error& e) {
          // No answer: the launcher's check of the joining host times out and says so.
          std::fprintf(stderr, "no probe listener for a joining host's check: %s\n", e.what());
        }
      }
      if (spec_.elastic && frame->type == FrameType::kProbe) {
        start_probes(decode_probe_request(frame->payload));
      }
      if (spec_.elastic && frame->type == FrameType::kProbeClose) {
        listener_.reset();
        send(FrameType::kProbeClosed);
      }
      if (frame->type == FrameType::kStartRanks) {
        if (!spec_.elastic)
          throw Error("protocol error: ranks to start in a job that is not elastic");
        start_more(decode_spec(frame->payload));
      }
      if (frame->type == FrameType::kSignal) {
        const int sig = decode_signal(frame->payload);
        for (const LiveRank& r : ranks_) r.process.signal_group(sig);
      }
    }
  } catch (const Error& e) {
    error(e.what(), e.hint());
    stop(SIGTERM);
  }
}

void Agent::handle_signals() {
  while (const std::optional<int> sig = signals_->next()) {
    if (*sig == SIGCHLD) {
      reap();
    } else {
      stop(SIGTERM);  // SIGTERM, SIGINT, SIGHUP to the agent: stop the job cleanly
    }
  }
}

int Agent::run() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);
  signals_.emplace(std::initializer_list<int>{SIGCHLD, SIGTERM, SIGINT, SIGHUP});
  timer_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));

  if (!send(FrameType::kHello, hello_payload())) return 2;
  if (!read_spec()) return 2;
  if (!start_ranks()) {
    while (!stray_children(ranks_).empty()) {  // whatever was started dies before we exit
      stop(SIGKILL);
      ::usleep(10000);
      reap();
    }
    return 2;
  }

  handle_frames();  // a terminate may have arrived in the same read as the spec
  while (true) {
    reap();
    report_exits();
    const bool ranks_done = finished();
    const std::vector<pid_t> strays = ranks_done ? stray_children(ranks_) : std::vector<pid_t>{};
    if (ranks_done && strays.empty()) break;
    if (ranks_done) stop(SIGTERM);  // leftovers of a finished job: stop them too

    std::vector<pollfd> fds;
    std::vector<std::pair<LiveRank*, Stream>> owners;
    fds.push_back({signals_->fd(), POLLIN, 0});
    fds.push_back({timer_fd_.get(), POLLIN, 0});
    fds.push_back({input_open_ ? in_fd_ : -1, POLLIN, 0});
    std::vector<LiveRank*> channels;
    for (LiveRank& r : ranks_) {
      if (r.channel.valid()) {
        fds.push_back({r.channel.get(), POLLIN, 0});
        channels.push_back(&r);
      }
    }
    // Elastic: a joining host's check (the probe thread's end, this host's probe listener).
    const size_t probe_done = fds.size();
    fds.push_back({probe_done_read_.valid() ? probe_done_read_.get() : -1, POLLIN, 0});
    const size_t first_listener = fds.size();
    if (listener_) listener_->add_pollfds(fds);
    const size_t first_output = fds.size();
    for (LiveRank& r : ranks_) {
      if (r.process.out().valid()) {
        fds.push_back({r.process.out().get(), POLLIN, 0});
        owners.emplace_back(&r, Stream::kStdout);
      }
      if (r.process.err().valid()) {
        fds.push_back({r.process.err().get(), POLLIN, 0});
        owners.emplace_back(&r, Stream::kStderr);
      }
    }
    // Sleep until something happens; while stopping, wake up to sweep for escaped descendants;
    // while the launcher is silent, wake up when it has been silent too long.
    int timeout = (stopping_ || killing_ || ranks_done) ? kSweepMs : -1;
    const int silence = silence_left_ms();
    if (silence == 0) {
      // Pings that came while this agent was blocked writing output (a slow link) are read
      // first: the limit is on the launcher's silence, not on ours.
      pollfd input{in_fd_, POLLIN, 0};
      if (::poll(&input, 1, 0) > 0) {
        handle_input();
        continue;
      }
      // The launcher pings three times per --keepalive: it is frozen, dead without a close, or
      // cut off by a link that dropped without a reset. Nobody is left to tell: stop as the
      // dead-man switch does when the input closes.
      launcher_gone_ = true;
      stop(SIGTERM);
      continue;
    }
    if (silence > 0) timeout = timeout < 0 ? silence : std::min(timeout, silence);
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) handle_signals();
    if (fds[1].revents != 0) {
      uint64_t expirations = 0;
      (void)!::read(timer_fd_.get(), &expirations, sizeof expirations);
      stop(SIGKILL);
    }
    if (fds[2].revents != 0) handle_input();
    if (killing_) stop(SIGKILL);  // keep sweeping: strays re-parent to us after their parent dies
    for (size_t i = 0; i < channels.size(); ++i) {
      if (fds[i + 3].revents != 0) read_channel(*channels[i]);
    }
    if (fds[probe_done].revents != 0) finish_probes();
    if (listener_ && std::any_of(fds.begin() + static_cast<std::ptrdiff_t>(first_listener),
                                 fds.begin() + static_cast<std::ptrdiff_t>(first_output),
                                 [](const pollfd& f) { return f.revents != 0; })) {
      listener_->serve();
    }
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i + first_output].revents == 0) continue;
      auto& [rank, stream] = owners[i];
      drain(*rank, stream == Stream::kStdout ? rank->process.out() : rank->process.err(), stream,
            true);
    }
  }
  send(FrameType::kDone);
  return 0;
}

}  // namespace

int run_agent(int in_fd, int out_fd) {
  Agent agent(in_fd, out_fd);
  return agent.run();
}

}  // namespace hvd::worker
