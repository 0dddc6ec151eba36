#include "launcher/core/status_line.h"

#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace hvd::launcher {
namespace {

constexpr char kClear[] = "\r\033[K";  // to the line's start, erase to its end

void write_all_now(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) return;  // a terminal that is gone: nothing more to show
    done += static_cast<size_t>(n);
  }
}

}  // namespace

bool stderr_wants_status_line(bool json) {
  const char* term = std::getenv("TERM");
  return !json && ::isatty(STDERR_FILENO) != 0 &&
         !(term != nullptr && std::string_view(term) == "dumb");
}

StatusLine& StatusLine::get() {
  static StatusLine line;
  return line;
}

void StatusLine::enable(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = fd;
}

bool StatusLine::enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fd_ >= 0;
}

void StatusLine::set(std::string text) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (text == text_) return;
  text_ = std::move(text);
  dirty_ = true;
  if (text_.empty() && visible_ && fd_ >= 0) {
    write_all_now(fd_, kClear);
    visible_ = false;
  }
}

void StatusLine::clear_now() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!visible_ || fd_ < 0) return;
  write_all_now(fd_, kClear);
  visible_ = false;
}

void StatusLine::draw_now() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0 || text_.empty() || (visible_ && !dirty_)) return;
  write_all_now(fd_, kClear + text_);
  visible_ = true;
  dirty_ = false;
}

}  // namespace hvd::launcher
