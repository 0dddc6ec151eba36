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

namespace hvd::ssh {
namespace {

constexpr auto kLingerAfterEof = std::chrono::seconds(3);

// Moves bytes between the channel and the local sockets until the agent exits or the link or
// the launcher goes away. Runs on its own thread, which owns the session.
void pump(std::unique_ptr<Connection> connection, Channel channel, UniqueFd frames, UniqueFd log,
          std::shared_ptr<std::atomic<bool>> cut, std::shared_ptr<std::atomic<int>> exit_status) {
  ssh_channel ch = channel.get();
  std::array<char, 64 * 1024> buf{};
  bool input_open = true;
  std::chrono::steady_clock::time_point input_closed_at;
  // From the agent: everything libssh has, so poll() below only waits for new bytes.
  auto drain = [&] {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int is_stderr : {0, 1}) {
        const int n = ssh_channel_read_nonblocking(ch, buf.data(), buf.size(), is_stderr);
        if (n > 0) {
          const int fd = is_stderr ? log.get() : frames.get();
          // A failed write means the launcher is gone; the agent then sees EOF on its stdin.
          if (fd >= 0) write_all(fd, std::string_view(buf.data(), static_cast<size_t>(n)));
          progress = true;
        }
      }
    }
  };
  while (true) {
    drain();
    if (ssh_channel_is_eof(ch) || !ssh_channel_is_open(ch)) {
      drain();  // the EOF may have come in the same packets as the last output
      // The exit status (the launcher reads it once the frames socket closes below). All output
      // is read, but a command that closed its stdout and still runs has none yet: wait for it
      // at most a second (libssh's call waits up to the session's timeout).
      const long one_second = 1;
      ssh_options_set(connection->session.get(), SSH_OPTIONS_TIMEOUT, &one_second);
      exit_status->store(ssh_channel_get_exit_status(ch));
      break;
    }

    std::array<pollfd, 2> fds{{{ssh_get_fd(connection->session.get()), POLLIN, 0},
                               {input_open ? frames.get() : -1, POLLIN, 0}}};
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) {
      const ssize_t n = ::read(frames.get(), buf.data(), buf.size());
      if (n <= 0) {
        ssh_channel_send_eof(ch);  // the launcher is done with this agent
        input_open = false;
        input_closed_at = std::chrono::steady_clock::now();
      } else if (ssh_channel_write(ch, buf.data(), static_cast<uint32_t>(n)) == SSH_ERROR) {
        break;
      }
    }
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      // The link went away; let libssh notice and report what is left.
      ssh_channel_read_nonblocking(ch, buf.data(), 0, 0);
      if (!ssh_channel_is_open(ch) || ssh_is_connected(connection->session.get()) == 0) break;
    }
    if (ssh_is_connected(connection->session.get()) == 0) break;
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
