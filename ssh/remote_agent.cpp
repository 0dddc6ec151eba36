#include "ssh/remote_agent.h"

#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "common/fd_io.h"
#include "ssh/libssh_compat.h"

namespace hvd::ssh {
namespace {

constexpr auto kLingerAfterEof = std::chrono::seconds(3);
// What the pump holds per stream of the agent's that the launcher has not taken yet: one read
// of the channel. Beyond it the pump stops reading the channel, libssh stops growing its window
// and sshd stops reading the agent: back-pressure reaches the agent, never the pump's other
// direction.
constexpr size_t kPumpHeld = 64 * 1024;

// Bytes on their way from the agent to one of the launcher's sockets (frames or log), written
// without blocking: a launcher that does not read (its console backed up) must not stop the
// pump, which also carries the launcher's keepalive pings to the agent.
struct Outbound {
  UniqueFd& fd;
  std::string held;
  bool room() const { return held.size() < kPumpHeld; }
  bool pending() const { return fd.valid() && !held.empty(); }
  void flush() {
    while (pending()) {
      const ssize_t n = ::send(fd.get(), held.data(), held.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        // The launcher is gone (its end closed): nobody will read these bytes. The agent sees
        // EOF on its stdin once the launcher's end of `frames` closes (below).
        held.clear();
        return;
      }
      held.erase(0, static_cast<size_t>(n));
    }
  }
};

// Moves bytes between the channel and the local sockets until the agent exits or the link or
// the launcher goes away. Runs on its own thread, which owns the session. It never blocks on the
// launcher: the agent's output waits in `out` (at most kPumpHeld per stream, then in the SSH
// window) while the launcher's frames, its pings among them, still go to the agent at once.
void pump(std::unique_ptr<Connection> connection, Channel channel, UniqueFd frames, UniqueFd log,
          std::shared_ptr<std::atomic<bool>> cut, std::shared_ptr<std::atomic<int>> exit_status) {
  ssh_channel ch = channel.get();
  std::array<char, kPumpHeld> buf{};
  bool input_open = true;
  bool ended = false;  // the channel ended: what is held goes out, then the pump ends
  std::chrono::steady_clock::time_point input_closed_at;
  std::array<Outbound, 2> out{{{frames, {}}, {log, {}}}};
  // From the agent: what libssh has, as long as there is room for it, so that poll() below only
  // waits for new bytes (or for room).
  auto drain = [&] {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int is_stderr : {0, 1}) {
        Outbound& to = out[static_cast<size_t>(is_stderr)];
        if (!to.room()) continue;
        const int n = ssh_channel_read_nonblocking(
            ch, buf.data(), static_cast<uint32_t>(kPumpHeld - to.held.size()), is_stderr);
        if (n > 0) {
          if (to.fd.valid()) to.held.append(buf.data(), static_cast<size_t>(n));
          progress = true;
        }
      }
      for (Outbound& to : out) to.flush();
    }
  };
  while (true) {
    if (!ended) drain();
    for (Outbound& to : out) to.flush();
    if (!ended && (ssh_channel_is_eof(ch) || !ssh_channel_is_open(ch)) && out[0].room() &&
        out[1].room()) {
      drain();  // the EOF may have come in the same packets as the last output
      if (out[0].room() && out[1].room()) {
        // The exit status (the launcher reads it once the frames socket closes below). All
        // output is read, but a command that closed its stdout and still runs has none yet:
        // wait for it at most a second (libssh's call waits up to the session's timeout).
        const long one_second = 1;
        ssh_options_set(connection->session.get(), SSH_OPTIONS_TIMEOUT, &one_second);
        exit_status->store(channel_exit_status(ch));
        ended = true;
      }
    }
    if (ended && !out[0].pending() && !out[1].pending()) break;

    // The session's socket only while there is room for what it brings: a full buffer waits
    // for the launcher (POLLOUT), and libssh's window holds the agent back meanwhile.
    const bool room = !ended && out[0].room() && out[1].room();
    std::array<pollfd, 4> fds{{{room ? ssh_get_fd(connection->session.get()) : -1, POLLIN, 0},
                               {input_open ? frames.get() : -1, POLLIN, 0},
                               {out[0].pending() ? frames.get() : -1, POLLOUT, 0},
                               {out[1].pending() ? log.get() : -1, POLLOUT, 0}}};
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) {
      const ssize_t n = ::recv(frames.get(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        // nothing after all
      } else if (n <= 0) {
        if (!ended) ssh_channel_send_eof(ch);  // the launcher is done with this agent
        input_open = false;
        input_closed_at = std::chrono::steady_clock::now();
      } else if (!ended && !ssh_channel_is_eof(ch)) {
        // A write fails when the agent ended in the meantime (libssh: "Remote channel is
        // closed"): its last output and its exit are still in libssh's buffers, and the EOF
        // above takes them. Giving up on the agent there lost them (and its kDone: "lost the
        // agent") whenever a ping came while hvdrun's console was backed up.
        ssh_channel_write(ch, buf.data(), static_cast<uint32_t>(n));
      }  // once the agent ended, what the launcher still sends (a ping) has nobody to go to
    }
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      // The link went away; let libssh notice and report what is left.
      ssh_channel_read_nonblocking(ch, buf.data(), 0, 0);
      if (!ssh_channel_is_open(ch) || ssh_is_connected(connection->session.get()) == 0) {
        ended = true;
      }
    }
    if (!ended && ssh_is_connected(connection->session.get()) == 0) ended = true;
    // An agent that does not finish after its input closed (stuck before its hello, say) is
    // cut off: closing the session makes sshd close its stdin, and its dead-man switch fires.
    if (!input_open &&
        (cut->load() || std::chrono::steady_clock::now() - input_closed_at > kLingerAfterEof)) {
      break;
    }
  }
  // Closing our ends tells the launcher the agent is gone (EOF on both sockets).
  frames.reset();
  log.reset();
  channel.reset();
  connection.reset();
}

}  // namespace

RemoteAgent::RemoteAgent(std::unique_ptr<Connection> connection, const std::string& command) {
  Channel channel(ssh_channel_new(connection->session.get()));
  if (!channel || ssh_channel_open_session(channel.get()) != SSH_OK ||
      ssh_channel_request_exec(channel.get(), command.c_str()) != SSH_OK) {
    throw RemoteError(fmt::format("cannot start the agent on {}: {}", connection->target.host,
                                  last_error(connection->session)),
                      "the host accepted the login but not the command: check its sshd "
                      "(ForceCommand, MaxSessions) with `hvdrun --check-ssh`");
  }
  int frames[2] = {-1, -1}, log[2] = {-1, -1};
  const bool made = ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, frames) == 0 &&
                    ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, log) == 0;
  const int error = errno;
  frames_.reset(frames[0]);  // owned at once: a failure closes whatever was made
  log_.reset(log[0]);
  UniqueFd frames_pump(frames[1]), log_pump(log[1]);
  if (!made) {
    throw LauncherError(
        fmt::format("cannot create sockets for the agent on {}: {}", connection->target.host,
                    std::strerror(error)),
        error == EMFILE || error == ENFILE
            ? "hvdrun holds about four descriptors per remote host and its descriptor limit is "
              "used up: raise it (`ulimit -n`, or the hard limit in /etc/security/limits.conf; "
              "hvdrun raises its soft limit to the hard one by itself) or start fewer hosts"
            : "");
  }
  // The pump must never receive the launcher's signals (SIGINT, SIGTERM, SIGCHLD go to its event
  // loop's signalfd): it starts with every signal blocked.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  pump_ = std::thread(pump, std::move(connection), std::move(channel), std::move(frames_pump),
                      std::move(log_pump), cut_, exit_status_);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void RemoteAgent::close_input() {
  if (frames_.valid()) ::shutdown(frames_.get(), SHUT_WR);
}

std::optional<int> RemoteAgent::exit_status() const {
  const int status = exit_status_->load();
  if (status == kNoExitStatus) return std::nullopt;
  return status;
}

void RemoteAgent::cut() {
  cut_->store(true);
  close_input();
}

RemoteAgent::~RemoteAgent() {
  if (pump_.joinable()) {
    close_input();
    pump_.join();
  }
}

}  // namespace hvd::ssh
