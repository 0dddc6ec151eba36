// CPU time for the benchmarks: the whole process's, and each thread's with how often it was
// scheduled (/proc/self/task/*/schedstat), with what a sleeping thread is waiting in. Linux only.
#pragma once

#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace hvd_bench {

// ---- CPU time: the process, and each of its threads ----

inline std::int64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline double tv_seconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

struct ThreadCpu {
  std::string name;
  std::int64_t ns = 0;    // on-CPU time
  std::int64_t runs = 0;  // times scheduled in (schedstat), or context switches (status)
  std::string waits_in;   // the system call it sleeps in (/proc/.../syscall), when known
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "epoll_wait, timeout 10 ms": what a sleeping thread waits in, from /proc/self/task/<tid>/syscall
// ("nr arg1 .. arg6 sp pc"; names and argument positions for x86-64 only, else the number).
inline std::string describe_syscall(const std::string& text) {
  std::istringstream in(text);
  std::string nr_s;
  if (!(in >> nr_s)) return {};
  if (nr_s == "running" || nr_s == "-1") return {};
  std::vector<unsigned long long> args;
  for (std::string a; args.size() < 6 && in >> a;) args.push_back(std::stoull(a, nullptr, 16));
  const long nr = std::stol(nr_s);
  std::string name = "syscall " + nr_s;
  int timeout_ms_arg = -1;  // which argument is a timeout in milliseconds
#if defined(__x86_64__)
  switch (nr) {
    case 7:
      name = "poll";
      timeout_ms_arg = 2;
      break;
    case 23:
      name = "select";
      break;
    case 202:
      name = "futex";
      break;
    case 230:
      name = "clock_nanosleep";
      break;
    case 35:
      name = "nanosleep";
      break;
    case 232:
      name = "epoll_wait";
      timeout_ms_arg = 3;
      break;
    case 281:
      name = "epoll_pwait";
      timeout_ms_arg = 3;
      break;
    case 441:
      name = "epoll_pwait2";
      break;
    case 270:
      name = "pselect6";
      break;
    case 271:
      name = "ppoll";
      break;
    case 0:
      name = "read";
      break;
    case 45:
      name = "recvfrom";
      break;
    case 47:
      name = "recvmsg";
      break;
    case 43:
      name = "accept";
      break;
    case 288:
      name = "accept4";
      break;
    default:
      break;
  }
#endif
  if (timeout_ms_arg >= 0 && static_cast<std::size_t>(timeout_ms_arg) < args.size()) {
    name += ", timeout " +
            std::to_string(static_cast<int>(args[static_cast<std::size_t>(timeout_ms_arg)])) +
            " ms";
  }
  return name;
}

// Every thread of this process: /proc/self/task/<tid>/schedstat ("ns wait_ns runs"); without
// schedstats, utime+stime from stat (clock ticks) and the context switches from status.
inline std::map<int, ThreadCpu> thread_snapshot() {
  std::map<int, ThreadCpu> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    int tid = 0;
    try {
      tid = std::stoi(e.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    ThreadCpu t;
    t.name = slurp(e.path() / "comm");
    while (!t.name.empty() && std::isspace(static_cast<unsigned char>(t.name.back()))) {
      t.name.pop_back();
    }
    std::istringstream sched(slurp(e.path() / "schedstat"));
    std::int64_t wait = 0;
    if (!(sched >> t.ns >> wait >> t.runs)) {
      const std::string stat = slurp(e.path() / "stat");
      const auto close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream fields(stat.substr(close + 2));  // from field 3 (state) on
      std::string f;
      std::vector<std::string> v;
      while (fields >> f) v.push_back(f);
      if (v.size() < 13) continue;
      const double tick = 1e9 / static_cast<double>(sysconf(_SC_CLK_TCK));
      t.ns = static_cast<std::int64_t>((std::stod(v[11]) + std::stod(v[12])) * tick);
      std::istringstream status(slurp(e.path() / "status"));
      for (std::string line; std::getline(status, line);) {
        if (line.find("ctxt_switches:") != std::string::npos) {
          t.runs += std::stoll(line.substr(line.find(':') + 1));
        }
      }
    }
    // What it sleeps in; not for the calling thread, which is busy reading this.
    if (tid != static_cast<int>(::syscall(SYS_gettid))) {
      t.waits_in = describe_syscall(slurp(e.path() / "syscall"));
    }
    out[tid] = t;
  }
  return out;
}

// One line per thread of `after`: its CPU time and how often it was scheduled since `before`,
// both divided by `per` (1, or a number of steps), and what it sleeps in now. `only_active`:
// skip threads that were not scheduled.
inline std::string thread_report(const std::map<int, ThreadCpu>& before,
                                 const std::map<int, ThreadCpu>& after, double per,
                                 const char* unit, bool only_active) {
  std::string text;
  char line[256];
  for (const auto& [tid, a] : after) {
    const auto b = before.find(tid);
    const std::int64_t ns = a.ns - (b == before.end() ? 0 : b->second.ns);
    const std::int64_t runs = a.runs - (b == before.end() ? 0 : b->second.runs);
    if (only_active && runs == 0) continue;
    std::snprintf(line, sizeof line, "    tid %d (%s)%s: %.3f ms CPU, scheduled %.1f times%s%s%s\n",
                  tid, a.name.c_str(), tid == static_cast<int>(getpid()) ? " main" : "",
                  static_cast<double>(ns) / 1e6 / per, static_cast<double>(runs) / per, unit,
                  a.waits_in.empty() ? "" : "; sleeps in ", a.waits_in.c_str());
    text += line;
  }
  for (const auto& [tid, b] : before) {
    if (!after.count(tid)) text += "    tid " + std::to_string(tid) + " exited meanwhile\n";
  }
  return text;
}

}  // namespace hvd_bench
