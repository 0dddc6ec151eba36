#include "allreduce/engine/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstring>

#include "allreduce/api/status_error.h"

namespace hvd::runtime {
namespace {

// JSON string contents: tensor names are the user's.
std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

namespace {

// The timeline file, never through a symbolic link (in a shared folder another user could point
// it at any file of the job's user, which would be truncated), close-on-exec.
std::FILE* open_timeline(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  std::FILE* file = fd < 0 ? nullptr : ::fdopen(fd, "w");
  if (file != nullptr) return file;
  const int e = errno;
  if (fd >= 0) ::close(fd);
  if (e == ELOOP) {
    throw StatusError(
        HVD_ERR_CONFIG,
        fmt::format("HOROVOD_TIMELINE={:?} is a symbolic link: libhvd does not "
                    "follow it",
                    path),
        "give the real path, or remove the link (someone else may have put it there)");
  }
  throw StatusError(
      HVD_ERR_CONFIG,
      fmt::format("HOROVOD_TIMELINE={:?}: cannot write it: {}", path, std::strerror(e)),
      "give a writable path on rank 0's host");
}

}  // namespace

Timeline::Timeline(const std::string& path) : file_(open_timeline(path)) {
  std::fputs("[\n", file_);
  writer_ = std::thread([this] { write_loop(); });
}

Timeline::~Timeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  cv_.notify_one();
  writer_.join();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

long long Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start_)
      .count();
}

int Timeline::row(const std::string& name) {
  auto [it, inserted] = rows_.emplace(name, static_cast<int>(rows_.size()) + 1);
  if (inserted) {
    queue_.push_back(
        fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "{}"}}}})",
                    it->second, escape(name)));
  }
  return it->second;
}

void Timeline::emit(std::string event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(event));
  }
  cv_.notify_one();
}

void Timeline::negotiating(const Request& q, int rank) {
  const long long ts = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const bool first = negotiating_.insert(q.name).second;
  const int pid = row(q.name);
  if (first) {
    queue_.push_back(fmt::format(
        R"({{"name": "NEGOTIATE_{}", "ph": "B", "ts": {}, "pid": {}, "tid": 1, "args": {{"dtype": "{}", "shape": "[{}]"}}}})",
        fmt::format("{}", op_kind_name(q.kind)), ts, pid, dtype_name(q.dtype),
        fmt::join(q.shape, ", ")));
  }
  queue_.push_back(fmt::format(
      R"({{"name": "rank {} ready", "ph": "i", "s": "t", "ts": {}, "pid": {}, "tid": 1}})", rank,
      ts, pid));
  cv_.notify_one();
}

void Timeline::negotiated(const Response& r) {
  const long long ts = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& name : r.names) {
    if (negotiating_.erase(name) == 0) continue;  // an error for a name rank 0 never saw
    const int pid = row(name);
    queue_.push_back(fmt::format(R"({{"ph": "E", "ts": {}, "pid": {}, "tid": 1}})", ts, pid));
    queue_.push_back(fmt::format(
        R"({{"name": "QUEUE", "ph": "B", "ts": {}, "pid": {}, "tid": 1, "args": {{"fused_with": {}}}}})",
        ts, pid, r.names.size() - 1));
  }
  cv_.notify_one();
}

void Timeline::begin(const std::string& name, const std::string& phase) {
  const long long ts = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const int pid = row(name);
  queue_.push_back(
      fmt::format(R"({{"name": "{}", "ph": "B", "ts": {}, "pid": {}, "tid": 1}})", phase, ts, pid));
  cv_.notify_one();
}

void Timeline::end(const std::string& name, const std::string& /*phase*/) {
  const long long ts = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const int pid = row(name);
  queue_.push_back(fmt::format(R"({{"ph": "E", "ts": {}, "pid": {}, "tid": 1}})", ts, pid));
  cv_.notify_one();
}

void Timeline::write_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    std::deque<std::string> batch;
    batch.swap(queue_);
    const bool done = closing_;
    lock.unlock();
    for (const std::string& line : batch) {
      if (!first_line_) std::fputs(",\n", file_);
      first_line_ = false;
      std::fputs(line.c_str(), file_);
    }
    lock.lock();
    if (done && queue_.empty()) return;
  }
}

}  // namespace hvd::runtime
