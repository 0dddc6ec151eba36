#include "allreduce/engine/timeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>

#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "common/json_text.h"

namespace hvd::runtime {
namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The timeline file, never through a symbolic link (in a shared folder another user could point
// it at any file of the job's user, which would be truncated), close-on-exec.
std::FILE* open_timeline(const std::string& path, hvd_status status, const std::string& what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  std::FILE* file = fd < 0 ? nullptr : ::fdopen(fd, "w");
  if (file != nullptr) return file;
  const int e = errno;
  if (fd >= 0) ::close(fd);
  if (e == ELOOP) {
    throw StatusError(status, fmt::format("{} is a symbolic link: libhvd does not follow it", what),
                      "give the real path, or remove the link (someone else may have put it "
                      "there)");
  }
  throw StatusError(status, fmt::format("{}: cannot write it: {}", what, std::strerror(e)),
                    "give a writable path on rank 0's host");
}

}  // namespace

// One open timeline file and the thread that writes its queued events, in order.
class Timeline::File {
 public:
  File(const std::string& path, hvd_status status, const std::string& what)
      : path_(path), file_(open_timeline(path, status, what)) {
    struct stat st {};
    if (::fstat(::fileno(file_), &st) == 0) {
      device_ = st.st_dev;
      inode_ = st.st_ino;
    }
    std::fputs("[\n", file_);
    writer_ = std::thread([this] { write_loop(); });
  }
  // Writes what is queued, closes the array and the file.
  ~File() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    cv_.notify_one();
    writer_.join();
    std::fputs("\n]\n", file_);
    const bool failed = std::ferror(file_) != 0;
    if (std::fclose(file_) != 0 || failed) {
      logger().warn("timeline {:?}: writing it failed ({}); the file is incomplete", path_,
                    std::strerror(errno));
    }
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // `path` names this very file (another spelling of it included; a link to it does not).
  bool is(const std::string& path) const {
    struct stat st {};
    return path == path_ ||
           (::lstat(path.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_);
  }
  void push(std::string event) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(event));
    }
    cv_.notify_one();
  }

 private:
  void write_loop() {
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

  const std::string path_;
  std::FILE* file_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool closing_ = false;
  bool first_line_ = true;  // the writer's
  std::thread writer_;
};

Timeline::Timeline()
    : start_epoch_us_(std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()) {}

Timeline::Timeline(std::shared_ptr<Timeline> parent, int set_id, std::vector<int> ranks)
    : parent_(std::move(parent)),
      set_id_(set_id),
      set_ranks_(std::move(ranks)),
      start_epoch_us_(parent_->start_epoch_us_) {}

Timeline::~Timeline() {
  if (!parent_) stop();
}

std::string Timeline::row_name(const std::string& name) const {
  return set_id_ == 0 ? name : fmt::format("{} [process set {}]", name, set_id_);
}

std::string Timeline::set_args() const {
  return set_id_ == 0 ? std::string() : fmt::format(R"(, "process_set": {})", set_id_);
}

int Timeline::global_rank(int rank) const {
  return rank >= 0 && static_cast<std::size_t>(rank) < set_ranks_.size()
             ? set_ranks_[static_cast<std::size_t>(rank)]
             : rank;
}

void Timeline::start(const std::string& path, bool mark_cycles, hvd_status status,
                     const std::string& what) {
  if (parent_) return parent_->start(path, mark_cycles, status, what);
  std::lock_guard<std::mutex> control(control_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (file_ && file_->is(path)) {
      mark_cycles_ = mark_cycles;
      return;
    }
  }
  auto file = std::make_unique<File>(path, status, what);  // throws: the old one goes on
  file->push(fmt::format(
      R"({{"name": "process_name", "ph": "M", "pid": 0, "args": {{"start_time_since_epoch_in_micros": {}}}}})",
      start_epoch_us_));
  file->push(R"({"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}})");
  std::unique_ptr<File> old;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    old = std::move(file_);
    file_ = std::move(file);
    mark_cycles_ = mark_cycles;
    rows_.clear();
    negotiating_.clear();
    recording_.store(true, std::memory_order_relaxed);
  }
  // `old` closes here, outside mutex_: its writer finishes while the new file records.
}

void Timeline::stop() {
  if (parent_) return parent_->stop();
  std::lock_guard<std::mutex> control(control_);
  std::unique_ptr<File> old;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_.store(false, std::memory_order_relaxed);
    old = std::move(file_);
    rows_.clear();
    negotiating_.clear();
  }
  // `old` is written out and closed here, before stop() returns.
}

long long Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               root().start_)
      .count();
}

void Timeline::push(std::string event) {
  if (file_) file_->push(std::move(event));
}

int Timeline::row(const std::string& name) {
  auto [it, inserted] = rows_.emplace(name, static_cast<int>(rows_.size()) + 1);
  if (inserted) {
    push(
        fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "{}"}}}})",
                    it->second, json_escape(name)));
    push(fmt::format(
        R"({{"name": "process_sort_index", "ph": "M", "pid": {}, "args": {{"sort_index": {}}}}})",
        it->second, it->second));
  }
  return it->second;
}

// The record methods below work on root()'s file, rows and phases (a set's view has none of
// its own), under its mutex_.

void Timeline::negotiating(const Request& q, int rank) {
  if (!recording()) return;
  const long long ts = now_us();
  Timeline& t = root();
  std::lock_guard<std::mutex> lock(t.mutex_);
  if (!t.file_) return;
  const std::string name = row_name(q.name);
  const int pid = t.row(name);
  if (t.negotiating_.insert(name).second) {
    t.push(fmt::format(
        R"({{"name": "NEGOTIATE_{}", "ph": "B", "ts": {}, "pid": {}, "tid": 1, "args": {{"dtype": "{}", "shape": "[{}]"{}}}}})",
        upper(op_kind_name(q.kind)), ts, pid, dtype_name(q.dtype), fmt::join(q.shape, ", "),
        set_args()));
  }
  t.push(fmt::format(R"({{"name": "{}", "ph": "X", "ts": {}, "dur": 0, "pid": {}, "tid": 1}})",
                     global_rank(rank), ts, pid));
}

void Timeline::negotiated(const Response& r) {
  if (!recording()) return;
  const long long ts = now_us();
  Timeline& t = root();
  std::lock_guard<std::mutex> lock(t.mutex_);
  if (!t.file_) return;
  for (const std::string& tensor : r.names) {
    const std::string name = row_name(tensor);
    if (t.negotiating_.erase(name) == 0) continue;  // an error for a name rank 0 never saw
    const int pid = t.row(name);
    t.push(fmt::format(R"({{"ph": "E", "ts": {}, "pid": {}, "tid": 1}})", ts, pid));
    if (!r.error.empty()) continue;  // it fails at once: no collective follows
    t.push(fmt::format(
        R"({{"name": "QUEUE", "ph": "B", "ts": {}, "pid": {}, "tid": 1, "args": {{"fused_with": {}}}}})",
        ts, pid, r.names.size() - 1));
  }
}

void Timeline::cycle_start() {
  if (!recording()) return;
  const long long ts = now_us();
  Timeline& t = root();
  std::lock_guard<std::mutex> lock(t.mutex_);
  if (!t.file_ || !t.mark_cycles_) return;
  const std::string args =
      set_id_ == 0 ? std::string() : fmt::format(R"(, "args": {{"process_set": {}}})", set_id_);
  t.push(fmt::format(R"({{"name": "CYCLE_START", "ph": "i", "s": "g", "ts": {}, "pid": 0{}}})", ts,
                     args));
}

void Timeline::begin(const std::string& name, const std::string& phase) {
  if (!recording()) return;
  const long long ts = now_us();
  Timeline& t = root();
  std::lock_guard<std::mutex> lock(t.mutex_);
  if (!t.file_) return;
  const int pid = t.row(row_name(name));
  t.push(
      fmt::format(R"({{"name": "{}", "ph": "B", "ts": {}, "pid": {}, "tid": 1}})", phase, ts, pid));
}

void Timeline::end(const std::string& name) {
  if (!recording()) return;
  const long long ts = now_us();
  Timeline& t = root();
  std::lock_guard<std::mutex> lock(t.mutex_);
  if (!t.file_) return;
  const int pid = t.row(row_name(name));
  t.push(fmt::format(R"({{"ph": "E", "ts": {}, "pid": {}, "tid": 1}})", ts, pid));
}

void Timeline::end_op(const std::string& name, DataType dtype,
                      const std::vector<std::int64_t>& shape) {
  if (!recording()) return;
  const long long ts = now_us();
  Timeline& t = root();
  std::lock_guard<std::mutex> lock(t.mutex_);
  if (!t.file_) return;
  const int pid = t.row(row_name(name));
  t.push(fmt::format(
      R"({{"ph": "E", "ts": {}, "pid": {}, "tid": 1, "args": {{"dtype": "{}", "shape": "[{}]"{}}}}})",
      ts, pid, dtype_name(dtype), fmt::join(shape, ", "), set_args()));
}

}  // namespace hvd::runtime
