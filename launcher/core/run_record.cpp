#include "launcher/core/run_record.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/fd_io.h"

namespace hvd::launcher {

std::shared_ptr<RunRecord> RunRecord::open(const std::string& path, std::size_t max_bytes) {
  if (path.empty()) {
    throw UsageError("--record: the path is empty", "give a file, e.g. --record run.jsonl");
  }
  // O_NOFOLLOW: a link planted at the path (a shared folder) is not written through.
  // O_NONBLOCK: a FIFO there fails at once (no reader) instead of hanging the launch; what is
  // opened must be a regular file, which hvdrun's loop can write without waiting on a reader.
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    const int e = errno;
    std::string why = std::strerror(e);
    std::string hint = "choose a file in a folder that exists and that you may write to";
    if (e == ELOOP) {
      why = "it is a symbolic link, which hvdrun does not follow";
      hint = "remove the link or choose another path";
    } else if (e == ENXIO) {
      why = "it is a FIFO (no reader), and the record is a regular file";
      hint = "give the path of a file (it is created, or truncated if it exists)";
    }
    throw UsageError(fmt::format("--record {}: cannot write it: {}", path, why), hint);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError(fmt::format("--record {}: not a regular file", path),
                     "give the path of a file (it is created, or truncated if it exists)");
  }
  // An existing file keeps its mode through open(2): the record (stacks, commands, host names)
  // is the user's alone whatever the file was.
  if (::fchmod(fd, 0600) != 0) {
    spdlog::debug("--record {}: cannot make it 0600: {}", path, std::strerror(errno));
  }
  return std::shared_ptr<RunRecord>(new RunRecord(path, UniqueFd(fd), max_bytes));
}

RunRecord::RunRecord(std::string path, UniqueFd fd, std::size_t max_bytes)
    : path_(std::move(path)), fd_(std::move(fd)), max_bytes_(max_bytes) {}

std::string RunRecord::line(std::string_view kind, const nlohmann::ordered_json& fields) const {
  nlohmann::ordered_json doc;
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_).count();
  doc["t"] = std::round(t * 1000.0) / 1000.0;
  doc["event"] = kind;
  if (fields.is_object()) {
    for (const auto& [key, value] : fields.items()) doc[key] = value;
  }
  // Host names, stacks and messages come from outside: bytes that are not UTF-8 are replaced.
  return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

void RunRecord::event(std::string_view kind, const nlohmann::ordered_json& fields) {
  if (failed_) return;
  if (truncated_) {
    ++left_out_;
    return;
  }
  std::string one = line(kind, fields);
  // Room is kept for the "truncated" line; "end" has its own.
  if (written_ + one.size() + 128 > max_bytes_) {
    truncated_ = true;
    left_out_ = 1;
    write(line("truncated", {{"max_bytes", max_bytes_}}));
    return;
  }
  write(one);
}

void RunRecord::end(const nlohmann::ordered_json& fields) {
  if (failed_) return;
  nlohmann::ordered_json all = fields.is_object() ? fields : nlohmann::ordered_json::object();
  if (truncated_) all["left_out"] = left_out_;
  write(line("end", all));
}

void RunRecord::write(const std::string& line) {
  if (!write_all(fd_.get(), line)) {
    const int e = errno;
    failed_ = true;
    spdlog::warn("--record {}: writing failed ({}); the rest of this run is not recorded", path_,
                 std::strerror(e));
    return;
  }
  written_ += line.size();
}

}  // namespace hvd::launcher
