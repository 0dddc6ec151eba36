// The host agent's job loop (agent/agent.h): frames from the launcher, the ranks' output and
// elastic channels, their exits, and stopping the job (with whatever escaped from it). Before
// the job and the ranks' start: agent/agent_start.cpp; what it reads of its host:
// agent/agent_host.cpp.
#include "agent/agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "agent/agent_host.h"
#include "agent/agent_impl.h"
#include "common/error.h"

namespace hvd::agent {
namespace {

constexpr int kSweepMs = 100;  // how often leftover descendants are looked for while stopping

}  // namespace

bool Agent::send(FrameType type, std::string_view payload) {
  if (launcher_gone_) return false;
  if (sealer_) {
    sealer_->seal(encode_frame(type, payload), out_queue_);
  } else {
    out_queue_ += encode_frame(type, payload);
  }
  flush_output();
  return !launcher_gone_;
}

void Agent::flush_output() {
  while (!out_queue_.empty() && !launcher_gone_) {
    const ssize_t n = ::write(out_fd_, out_queue_.data(), out_queue_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      launcher_gone_ = true;  // its end is closed: the input's EOF follows
      break;
    }
    out_queue_.erase(0, static_cast<size_t>(n));
  }
  if (launcher_gone_) out_queue_.clear();
}

bool Agent::read_input() {
  std::array<char, 4096> buf{};
  const long n = read_some(in_fd_, buf.data(), buf.size());
  // Stdin and stdout may be one socket (an agent that connected back, or sshd's socketpair),
  // non-blocking for the output's sake: a wake-up without bytes is not the end.
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  if (n <= 0) return false;
  last_heard_ = std::chrono::steady_clock::now();
  const std::string_view bytes(buf.data(), static_cast<size_t>(n));
  if (!opener_) {
    reader_.feed(bytes);
    return true;
  }
  try {
    opener_->open(bytes, reader_.input());
  } catch (const SealError& e) {
    // Tampered with on the way: nothing more is taken from that direction. The launcher hears
    // why on ours (sealed, still sound), and the node's log has it too (srun's stderr).
    seal_refused_ = true;
    std::fprintf(stderr, "hvdrun agent: %s\n", e.what());
    error(e.what(), e.hint(), e.kind());
    return false;
  }
  return true;
}

void Agent::finish_output() {
  while (!out_queue_.empty() && !launcher_gone_) {
    if (launcher_silent()) break;
    std::array<pollfd, 2> fds{{{out_fd_, POLLOUT, 0}, {input_open_ ? in_fd_ : -1, POLLIN, 0}}};
    if (::poll(fds.data(), fds.size(), silence_left_ms()) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) {
      if (!read_input()) break;  // the launcher went away: nobody reads the rest
      reader_ = FrameReader();   // the job is over: its frames need no answer now
    }
    if (fds[0].revents != 0) flush_output();
  }
}

void Agent::error(const std::string& message, const std::string& hint, ErrorKind kind) {
  // Messages quote paths and peer bytes, which need not be UTF-8.
  send(FrameType::kError,
       nlohmann::json{{"message", message}, {"hint", hint}, {"kind", kind_name(kind)}}.dump(
           -1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void Agent::drain(LiveRank& rank, UniqueFd& fd, Stream stream, bool until_eof) {
  std::array<char, kAgentReadChunk> buf{};
  size_t taken = 0;
  while (fd.valid()) {
    if (!until_eof) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0 || taken >= kAgentLastOutput) return;
    }
    const long n = read_some(fd.get(), buf.data(), buf.size());
    if (n <= 0) {
      fd.reset();
      return;
    }
    taken += static_cast<size_t>(n);
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
    // And its last report lines before its exit: the stall shutdown's report (docs/why.md)
    // must reach hvdrun before the exit it causes.
    for (int reads = 0; reads < 8 && r.report.valid() && read_report(r); ++reads) {
    }
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
  for (pid_t stray : strays()) {
    ::kill(-stray, signal);
    ::kill(stray, signal);
  }
}

std::vector<pid_t> Agent::strays() const {
  std::vector<pid_t> running;
  for (const LiveRank& r : ranks_) {
    if (r.process.running()) running.push_back(r.process.pid());
  }
  return stray_children(running);
}

void Agent::arm_timer(int ms) {
  itimerspec spec{};
  spec.it_value.tv_sec = ms / 1000;
  spec.it_value.tv_nsec = static_cast<long>(ms % 1000) * 1000000L + 1;
  ::timerfd_settime(timer_fd_.get(), 0, &spec, nullptr);
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
  if (!read_input()) {  // dead-man switch: the launcher or the link is gone
    input_open_ = false;
    if (!seal_refused_) {  // else the launcher is still there to read why (read_input)
      launcher_gone_ = true;
      out_queue_.clear();
    }
    stop(SIGTERM);
    return;
  }
  handle_frames();
}

int Agent::silence_left_ms() const {
  if (silence_limit_.count() <= 0 || launcher_gone_ || !input_open_) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      last_heard_ + silence_limit_ - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(std::min<long>(left.count() + 1, 1 << 30)) : 0;
}

bool Agent::launcher_silent() const {
  if (silence_left_ms() != 0) return false;
  pollfd input{in_fd_, POLLIN, 0};
  return ::poll(&input, 1, 0) <= 0;
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
      if (frame->type == FrameType::kInspect) inspect(frame->payload);
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
  // The agent is the only holder of its stdout (its guard dropped its copies, ranks get pipes of
  // their own), so the flag is ours to set.
  ::fcntl(out_fd_, F_SETFL, ::fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  const int code = run_job();
  finish_output();
  return code;
}

int Agent::run_job() {
  if (!send(FrameType::kHello, hello_payload())) return 2;
  if (!read_spec()) return 2;
  if (!start_ranks()) {
    while (!strays().empty()) {  // whatever was started dies before we exit
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
    if (ranks_done && strays().empty()) break;
    if (ranks_done) stop(SIGTERM);  // leftovers of a finished job: stop them too

    std::vector<pollfd> fds;
    std::vector<std::pair<LiveRank*, Stream>> owners;
    fds.push_back({signals_->fd(), POLLIN, 0});
    fds.push_back({timer_fd_.get(), POLLIN, 0});
    fds.push_back({input_open_ ? in_fd_ : -1, POLLIN, 0});
    fds.push_back({out_queue_.empty() ? -1 : out_fd_, POLLOUT, 0});
    std::vector<LiveRank*> channels;
    for (LiveRank& r : ranks_) {
      if (r.channel.valid()) {
        fds.push_back({r.channel.get(), POLLIN, 0});
        channels.push_back(&r);
      }
    }
    // Every rank's report channel and stack pipe (agent/agent_why.cpp).
    std::vector<std::pair<LiveRank*, bool>> reports;  // true: the stack pipe
    const size_t first_report = fds.size();
    for (LiveRank& r : ranks_) {
      if (r.report.valid()) {
        fds.push_back({r.report.get(), POLLIN, 0});
        reports.emplace_back(&r, false);
      }
      if (r.stack.valid()) {
        fds.push_back({r.stack.get(), POLLIN, 0});
        reports.emplace_back(&r, true);
      }
    }
    // Elastic: a joining host's check (the probe thread's end, this host's probe listener).
    const size_t probe_done = fds.size();
    fds.push_back({probe_done_read_.valid() ? probe_done_read_.get() : -1, POLLIN, 0});
    const size_t first_listener = fds.size();
    if (listener_) listener_->add_pollfds(fds);
    const size_t first_output = fds.size();
    // While the launcher has not taken the queue, the ranks' output waits in their pipes.
    for (LiveRank& r : ranks_) {
      if (output_backed_up()) break;
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
    if (launcher_silent()) {
      // The launcher pings three times per --keepalive: it is frozen, dead without a close, or
      // cut off by a link that dropped without a reset. Nobody is left to tell: stop as the
      // dead-man switch does when the input closes.
      launcher_gone_ = true;
      out_queue_.clear();  // nobody will read it: the ranks' output is drained and dropped
      stop(SIGTERM);
      continue;
    }
    const int silence = silence_left_ms();
    if (silence > 0) timeout = timeout < 0 ? silence : std::min(timeout, silence);
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) handle_signals();
    if (fds[1].revents != 0) {
      uint64_t expirations = 0;
      (void)!::read(timer_fd_.get(), &expirations, sizeof expirations);
      stop(SIGKILL);
    }
    if (fds[2].revents != 0) handle_input();
    if (fds[3].revents != 0) flush_output();
    if (killing_) stop(SIGKILL);  // keep sweeping: strays re-parent to us after their parent dies
    for (size_t i = 0; i < channels.size(); ++i) {
      if (fds[i + 4].revents != 0) read_channel(*channels[i]);
    }
    for (size_t i = 0; i < reports.size(); ++i) {
      if (fds[first_report + i].revents == 0) continue;
      auto& [rank, stack] = reports[i];
      if (stack) {
        read_stack(*rank);
      } else {
        read_report(*rank);
      }
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

int run_agent(int in_fd, int out_fd) {
  Agent agent(in_fd, out_fd);
  return agent.run();
}

int run_agent_sealed(int fd, const SealKeys& keys) {
  Agent agent(fd, keys);
  return agent.run();
}

}  // namespace hvd::agent
