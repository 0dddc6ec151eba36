#include "agent/agent_host.h"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "agent/interfaces.h"
#include "agent/protocol.h"
#include "hvd/build_config.h"

namespace hvd::agent {
namespace {

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

}  // namespace

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

bool has_exited(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

std::vector<pid_t> stray_children(const std::vector<pid_t>& rank_pids) {
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
    if (std::find(rank_pids.begin(), rank_pids.end(), pid) == rank_pids.end()) out.push_back(pid);
  }
  return out;
}

}  // namespace hvd::agent
