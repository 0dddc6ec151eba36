#include "launcher/core/output_router.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "common/error.h"
#include "launcher/core/status_line.h"

namespace hvd::launcher {

using agent::Stream;

namespace {

// The live router and its thread (before_own_console_line).
OutputRouter* g_live_router = nullptr;
std::thread::id g_live_thread;

}  // namespace

OutputRouter::OutputRouter(int out_fd, int err_fd, std::optional<std::string> dir,
                           LineFormat format, std::optional<std::string> subdir)
    : out_fd_(out_fd),
      err_fd_(err_fd),
      dir_(std::move(dir)),
      subdir_(std::move(subdir)),
      format_(format) {
  g_live_router = this;
  g_live_thread = std::this_thread::get_id();
}

OutputRouter::~OutputRouter() {
  if (g_live_router == this) g_live_router = nullptr;
}

void before_own_console_line() {
  if (g_live_router != nullptr && std::this_thread::get_id() == g_live_thread) {
    g_live_router->drain_ready();
  }
}

OutputRouter::StreamState& OutputRouter::state(int rank, Stream stream) {
  return streams_[{rank, static_cast<int>(stream)}];
}

std::vector<int> parse_rank_list(std::string_view text) {
  constexpr int kMaxRank = (1 << 20) - 1;
  auto bad = [&](std::string_view item) {
    return UsageError(
        fmt::format("--output-ranks {}: '{}' is not a rank or a range LOW-HIGH", text, item),
        "e.g. --output-ranks 0 (rank 0 only) or --output-ranks 0,3-5");
  };
  auto number = [&](std::string_view digits, std::string_view item) {
    int value = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || value < 0 ||
        value > kMaxRank) {
      throw bad(item);
    }
    return value;
  };
  // Ranges first, merged, then spelled out once: a list like 0-90000,80-90000 is no sort of
  // 180000 numbers (under the fuzzer's instrumentation, seconds per input).
  std::vector<std::pair<int, int>> ranges;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const size_t dash = item.find('-');
    const int low = number(item.substr(0, dash), item);
    const int high = dash == std::string_view::npos ? low : number(item.substr(dash + 1), item);
    if (high < low) throw bad(item);
    ranges.emplace_back(low, high);
    start = comma + 1;
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<int> ranks;
  int next = 0;  // the lowest rank not yet in `ranks`
  for (const auto& [low, high] : ranges) {
    for (int r = std::max(low, next); r <= high; ++r) ranks.push_back(r);
    next = std::max(next, high + 1);
  }
  return ranks;
}

void OutputRouter::keep_stderr_line(int rank, std::string_view line) {
  std::string kept(line.substr(0, kKeptStderrLineBytes));
  if (line.size() > kKeptStderrLineBytes) kept += " [...]";
  tail_bytes_ += kept.size();
  stderr_tail_[rank].push_back(std::move(kept));
  tail_seq_[rank].push_back(tail_next_);
  tail_order_.emplace(tail_next_++, rank);
  if (stderr_tail_[rank].size() > kKeptStderrLines) drop_oldest_stderr_line(rank);
  while (tail_bytes_ > kKeptStderrBytes && tail_order_.size() > 1) {
    drop_oldest_stderr_line(tail_order_.begin()->second);
  }
}

void OutputRouter::drop_oldest_stderr_line(int rank) {
  auto& tail = stderr_tail_[rank];
  auto& seq = tail_seq_[rank];
  tail_bytes_ -= tail.front().size();
  tail_order_.erase(seq.front());
  tail.pop_front();
  seq.pop_front();
}

std::string OutputRouter::last_line(int rank) const {
  const auto it = last_line_.find(rank);
  return it == last_line_.end() ? std::string() : it->second;
}

void OutputRouter::emit_line(int rank, Stream stream, std::string_view line, std::string& batch) {
  last_line_[rank].assign(line.substr(0, 200));
  if (stream == Stream::kStderr) keep_stderr_line(rank, line);
  if (format_.ranks && !std::binary_search(format_.ranks->begin(), format_.ranks->end(), rank)) {
    return;  // not for the console (--output-ranks); the file and the tail have it
  }
  if (format_.timestamp) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    ::localtime_r(&now, &local);
    std::array<char, 32> when{};
    batch.append(when.data(),
                 std::strftime(when.data(), when.size(), "%a %b %d %H:%M:%S %Y", &local));
  }
  if (format_.tag) {
    batch += fmt::format("[1,{}]<{}>:", rank, stream == Stream::kStdout ? "stdout" : "stderr");
  }
  batch.append(line);
  batch += '\n';
}

// DIR/rank.N/{stdout,stderr} (DIR/attempt.K/rank.N/... with --max-restarts). DIR is the user's;
// below it hvdrun never follows a symbolic link: in a shared directory another user could
// otherwise point attempt.K, rank.N or its files at anything the job's user may write, and have
// it truncated.
UniqueFd OutputRouter::open_rank_file(int rank, Stream stream) {
  const char* name = stream == Stream::kStdout ? "stdout" : "stderr";
  const std::string sub = subdir_ ? *subdir_ + "/" : "";
  const std::string path = fmt::format("{}/{}rank.{}/{}", *dir_, sub, rank, name);
  auto refuse = [&](const char* what) {
    const int e = errno;
    if (e == ELOOP || e == ENOTDIR) {
      spdlog::error(
          "--output-filename: refusing to write {}: {} is a symbolic link or not a "
          "folder (someone else may have put it there); remove it or choose another "
          "folder",
          path, what);
    } else {
      spdlog::error("--output-filename: cannot write {}: {}", path, std::strerror(e));
    }
    return UniqueFd();
  };
  if (!dir_fd_.valid()) {
    std::error_code ec;
    std::filesystem::create_directories(*dir_, ec);
    dir_fd_.reset(::open(dir_->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir_fd_.valid()) return refuse("the folder");
    if (subdir_) {
      if (::mkdirat(dir_fd_.get(), subdir_->c_str(), 0755) != 0 && errno != EEXIST) {
        dir_fd_.reset();
        return refuse(subdir_->c_str());
      }
      UniqueFd sub_fd(::openat(dir_fd_.get(), subdir_->c_str(),
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      const int e = errno;
      dir_fd_ = std::move(sub_fd);
      errno = e;
      if (!dir_fd_.valid()) return refuse(subdir_->c_str());
    }
  }
  const std::string folder = fmt::format("rank.{}", rank);
  if (::mkdirat(dir_fd_.get(), folder.c_str(), 0755) != 0 && errno != EEXIST) {
    return refuse("rank.N");
  }
  UniqueFd folder_fd(
      ::openat(dir_fd_.get(), folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!folder_fd.valid()) return refuse(("rank." + std::to_string(rank)).c_str());
  UniqueFd fd(
      ::openat(folder_fd.get(), name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return refuse(name);
  return fd;
}

void OutputRouter::open_file(int rank, Stream stream, StreamState& s) {
  if (!dir_ || s.file_opened) return;
  s.file_opened = true;
  s.file = open_rank_file(rank, stream);
}

void OutputRouter::open_files(int rank) {
  for (const Stream stream : {Stream::kStdout, Stream::kStderr}) {
    open_file(rank, stream, state(rank, stream));
  }
}

void OutputRouter::write_file(int rank, Stream stream, StreamState& s, std::string_view bytes) {
  if (!dir_) return;
  open_file(rank, stream, s);
  if (s.file.valid()) agent::write_all(s.file.get(), bytes);
}

void OutputRouter::write(int rank, Stream stream, std::string_view bytes) {
  StreamState& s = state(rank, stream);
  write_file(rank, stream, s, bytes);
  std::string batch;
  for (char c : bytes) {
    if (c == '\n' && s.after_cr) {
      s.after_cr = false;
      continue;
    }
    s.after_cr = c == '\r';
    if (c == '\n' || c == '\r') {
      emit_line(rank, stream, s.partial, batch);
      s.partial.clear();
    } else {
      s.partial += c;
      if (s.partial.size() >= kMaxLineBytes) {
        emit_line(rank, stream, s.partial, batch);
        s.partial.clear();
      }
    }
  }
  if (!batch.empty()) enqueue(stream == Stream::kStdout ? out_fd_ : err_fd_, batch);
}

void OutputRouter::enqueue(int fd, std::string_view bytes) {
  if (abandoned_) return;
  // An elastic job's status line (status_line.h) leaves the terminal before output comes.
  if (StatusLine::get().enabled() && is_terminal(fd)) StatusLine::get().clear_now();
  queues_[fd].bytes.append(bytes);
}

bool OutputRouter::is_terminal(int fd) {
  const auto it = terminal_.find(fd);
  if (it != terminal_.end()) return it->second;
  return terminal_[fd] = ::isatty(fd) != 0;
}

void OutputRouter::refresh_status() {
  if (abandoned_ || !StatusLine::get().enabled()) return;
  for (const auto& [fd, q] : queues_) {
    if (q.offset < q.bytes.size()) return;  // output first
  }
  StatusLine::get().draw_now();
}

bool OutputRouter::pending(int fd) const {
  auto it = queues_.find(fd);
  return it != queues_.end() && it->second.offset < it->second.bytes.size();
}

size_t OutputRouter::queued_bytes() const {
  size_t total = 0;
  for (const auto& [fd, q] : queues_) total += q.bytes.size() - q.offset;
  return total;
}

bool OutputRouter::drain(int fd) {
  auto it = queues_.find(fd);
  if (it == queues_.end() || it->second.offset == it->second.bytes.size()) return false;
  Queue& q = it->second;
  // Asked now, not from the caller's poll(): between that poll and this call hvdrun's own log
  // line (a signal's "stopping all ranks", before_own_console_line) may have drained the queue
  // into the pipe's last free room, and a write to a full pipe would block the launcher's loop
  // for as long as nobody reads (the e2e test "SIGTERM stops the job even when nobody reads
  // hvdrun's stdout" hung so in about 1 of 12 runs beside busy loops). A console that is gone
  // (no reader, hung up, closed) is written to at once: the write fails, no wait.
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1 || p.revents == 0) return false;
  // PIPE_BUF bytes fit whenever poll() says POLLOUT, so this write never blocks.
  const size_t n = std::min<size_t>(q.bytes.size() - q.offset, PIPE_BUF);
  const ssize_t written = ::write(fd, q.bytes.data() + q.offset, n);
  if (written > 0) q.offset += static_cast<size_t>(written);
  if (written < 0 && errno != EINTR && errno != EAGAIN) q.offset = q.bytes.size();  // gone
  if (q.offset == q.bytes.size() || q.offset > (1u << 20)) {
    q.bytes.erase(0, q.offset);
    q.offset = 0;
  }
  return written != 0;
}

void OutputRouter::drain_ready() {
  for (const auto& [fd, queue] : queues_) {
    while (drain(fd)) {
    }
  }
}

void OutputRouter::abandon_console() {
  abandoned_ = true;
  queues_.clear();
}

void OutputRouter::flush(int rank) {
  for (Stream stream : {Stream::kStdout, Stream::kStderr}) {
    StreamState& s = state(rank, stream);
    if (s.partial.empty()) continue;
    std::string batch;
    emit_line(rank, stream, s.partial, batch);
    s.partial.clear();
    enqueue(stream == Stream::kStdout ? out_fd_ : err_fd_, batch);
  }
}

const std::deque<std::string>& OutputRouter::last_stderr(int rank) { return stderr_tail_[rank]; }

}  // namespace hvd::launcher
