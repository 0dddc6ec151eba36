#include "agent/inspect.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "common/unique_fd.h"

namespace hvd::agent {
namespace {

std::optional<std::string> read_small_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  std::string out;
  std::array<char, 4096> buf{};
  while (out.size() < 65536) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

std::optional<ProcSample> parse_proc_stat(std::string_view text) {
  // "PID (comm) S ppid ..." where comm may hold ") ": the name ends at the last ')'.
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
      close + 2 >= text.size()) {
    return std::nullopt;
  }
  ProcSample sample;
  sample.name = std::string(text.substr(open + 1, close - open - 1));
  // After ") ": field 3 (state), then fields 4.. ; utime and stime are fields 14 and 15.
  std::string_view rest = text.substr(close + 2);
  sample.state = rest[0];
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (at < rest.size() && fields.size() < 14) {
    const size_t space = rest.find(' ', at);
    const size_t end = space == std::string_view::npos ? rest.size() : space;
    fields.push_back(rest.substr(at, end - at));
    at = end + 1;
  }
  if (fields.size() < 13) return std::nullopt;
  uint64_t utime = 0;
  uint64_t stime = 0;
  const auto number = [](std::string_view f, uint64_t& v) {
    const auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    return ec == std::errc() && p == f.data() + f.size();
  };
  // fields[0] is field 3 (state): utime (14) is fields[11], stime (15) fields[12].
  if (!number(fields[11], utime) || !number(fields[12], stime)) return std::nullopt;
  sample.cpu_ticks = utime + stime;
  return sample;
}

std::optional<ProcSample> sample_process(pid_t pid, pid_t tid) {
  const std::string path =
      tid == 0 ? fmt::format("/proc/{}/stat", pid) : fmt::format("/proc/{}/task/{}/stat", pid, tid);
  const auto text = read_small_file(path);
  if (!text) return std::nullopt;
  return parse_proc_stat(*text);
}

const char* state_name(char state) {
  switch (state) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "uninterruptible";
    case 'T':
    case 't':
      return "stopped";
    case 'Z':
    case 'X':
      return "zombie";
    case 'I':
      return "idle";
    default:
      return "unknown";
  }
}

std::vector<ThreadSample> thread_states(pid_t pid, size_t limit) {
  std::vector<ThreadSample> out;
  const std::string dir = fmt::format("/proc/{}/task", pid);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  std::vector<pid_t> tids;
  while (const dirent* e = ::readdir(d)) {
    pid_t tid = 0;
    const std::string_view name(e->d_name);
    const auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), tid);
    if (ec == std::errc() && p == name.data() + name.size()) tids.push_back(tid);
  }
  ::closedir(d);
  std::sort(tids.begin(), tids.end());
  for (const pid_t tid : tids) {
    if (out.size() == limit) break;
    if (const auto s = sample_process(pid, tid)) out.push_back({tid, s->name, s->state});
  }
  return out;
}

std::vector<std::string> parse_faulthandler_dump(std::string_view dump, size_t limit) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < dump.size() && out.size() < limit) {
    const size_t nl = dump.find('\n', at);
    const size_t end = nl == std::string_view::npos ? dump.size() : nl;
    std::string_view line = dump.substr(at, end - at);
    at = end + 1;
    // "Thread 0x00007f12 (most recent call first):" / "Current thread 0x... (most ...):"
    const bool current = line.starts_with("Current thread ");
    if (current || line.starts_with("Thread ")) {
      std::string_view id = line.substr(current ? 15 : 7);
      id = id.substr(0, id.find(' '));
      out.push_back(fmt::format("thread {}{}:", id, current ? " (current)" : ""));
      continue;
    }
    // '  File "train.py", line 41 in load_batch'
    const size_t file = line.find("File \"");
    if (file == std::string_view::npos) continue;
    const size_t quote = line.rfind("\", line ");
    if (quote == std::string_view::npos || quote < file + 6) continue;
    const std::string_view path = line.substr(file + 6, quote - file - 6);
    std::string_view tail = line.substr(quote + 8);  // "41 in load_batch"
    const size_t in = tail.find(" in ");
    const std::string_view number = tail.substr(0, in);
    const std::string_view function =
        in == std::string_view::npos ? std::string_view() : tail.substr(in + 4);
    out.push_back(function.empty() ? fmt::format("{}:{}", path, number)
                                   : fmt::format("{}:{} in {}", path, number, function));
  }
  return out;
}

}  // namespace hvd::agent
