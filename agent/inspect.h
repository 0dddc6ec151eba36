// What a host agent reads of a rank's process when the launcher asks (kInspect, a stalled job:
// docs/why.md): its state from /proc (running, sleeping, in uninterruptible sleep,
// stopped, a zombie, gone), the CPU it used over a short window, its threads' states (libhvd's
// engine thread by name) and, for a Python rank whose binding installed the stack handler, every
// thread's Python stack from faulthandler. The parsing is pure; the readers take /proc as it is.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::agent {

struct ProcSample {
  char state = '?';        // /proc/PID/stat's state letter
  uint64_t cpu_ticks = 0;  // utime + stime, in clock ticks
  std::string name;        // comm
};

// /proc/PID/stat's text (the name may hold spaces and parentheses): nullopt when malformed.
std::optional<ProcSample> parse_proc_stat(std::string_view text);
// /proc/PID/stat (or /proc/PID/task/TID/stat) now; nullopt when the process is gone.
std::optional<ProcSample> sample_process(pid_t pid, pid_t tid = 0);
// "running", "sleeping", "uninterruptible" (D: waiting on a disk or a hung filesystem),
// "stopped" (T, t: SIGSTOP, a debugger), "zombie" (Z, X), "idle" (I), or "unknown".
const char* state_name(char state);

struct ThreadSample {
  pid_t tid = 0;
  std::string name;
  char state = '?';
};
// Every thread of `pid` (at most `limit`), by tid.
std::vector<ThreadSample> thread_states(pid_t pid, size_t limit = 64);

// faulthandler's dump ("Thread 0x... (most recent call first):", "  File \"x.py\", line 41 in
// f") as the lines a verdict shows: "thread 0x... (current):" headers and "x.py:41 in f" frames,
// innermost first, at most `limit` lines; anything else in the dump is left out.
std::vector<std::string> parse_faulthandler_dump(std::string_view dump, size_t limit = 200);

}  // namespace hvd::agent
