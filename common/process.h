// Child processes: one owning type for every process hvdrun starts (the agent's ranks, the
// launcher's local agent and mpirun).
//
// A Process runs in its own process group (a Ctrl-C in the terminal reaches hvdrun only, which
// stops the job in order; the group is what gets signalled), with exactly the given environment
// (a bare command name is looked up in *that* PATH, as a shell started with it would; or, when
// asked, in the parent's: mpirun is found where the launcher finds it), in the given directory,
// stdin from a pipe or /dev/null, stdout and stderr to pipes, every signal unblocked and
// SIGPIPE/SIGINT at their defaults (the launcher and the agent block and ignore
// them for their own event loops). A chdir or exec failure comes back through a close-on-exec
// pipe as a clear error (never a silent exit 127). Optionally a parent-death signal: the child
// gets it when the thread that started it dies, however it dies (SIGKILL included).
//
// Ownership: the destructor of a Process that is still running kills its group (SIGKILL) and
// reaps it, so nothing outlives its owner by accident. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace hvd {

// How a process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  bool signaled = false;
  int value = 0;  // the exit code, or the signal number

  int code() const { return signaled ? 128 + value : value; }  // as a shell reports it
  static ExitStatus from_wait_status(int status);
  bool operator==(const ExitStatus&) const = default;
};

struct ProcessSpec {
  std::vector<std::string> argv;    // argv[0]: a path, or a name looked up in env's PATH
  std::vector<std::string> env;     // NAME=value: exactly these
  std::optional<std::string> cwd;   // default: the parent's
  bool stdin_pipe = false;          // else stdin is /dev/null
  int parent_death_signal = 0;      // e.g. SIGKILL; PR_SET_PDEATHSIG follows the spawning thread
  bool lookup_in_our_path = false;  // look argv[0] up in the parent's PATH, not env's
  // {from, to} each: the parent's descriptor `from` becomes the child's `to` (3 and up, each
  // `to` once), inherited across exec (a rank's report channel and stack pipe, an elastic rank's
  // channel to its agent). Every other descriptor but the three standard ones stays close-on-exec
  // as the caller made it.
  std::vector<std::pair<int, int>> pass_fds;
};

class Process {
 public:
  // Where starting failed.
  enum class Stage { kNone, kPipe, kFork, kChdir, kExec, kParentGone };

  Process() = default;
  // Starts the process. Never throws: check started(), else error() says why.
  static Process spawn(const ProcessSpec& spec);

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  bool started() const { return pid_ > 0; }
  Stage failed_stage() const { return stage_; }
  int error_number() const { return errno_; }
  // "cannot run the command './train': No such file or directory", or empty.
  std::string error() const;

  pid_t pid() const { return pid_; }  // also its process group id
  UniqueFd& in() { return in_; }      // valid with stdin_pipe
  UniqueFd& out() { return out_; }
  UniqueFd& err() { return err_; }
  const UniqueFd& in() const { return in_; }
  const UniqueFd& out() const { return out_; }
  const UniqueFd& err() const { return err_; }

  bool running() const { return started() && !status_; }
  const std::optional<ExitStatus>& status() const { return status_; }
  // Reaps it if it has exited, without blocking; true once it has.
  bool try_reap();
  // Waits for it to exit.
  ExitStatus wait();
  // For an owner that reaps every child itself (a subreaper's waitpid(-1)): its wait status.
  void set_reaped(int wait_status) { status_ = ExitStatus::from_wait_status(wait_status); }
  // Signals its process group (nothing once it was reaped: the id may be reused).
  void signal_group(int sig) const;

 private:
  pid_t pid_ = -1;
  UniqueFd in_, out_, err_;
  std::optional<ExitStatus> status_;
  Stage stage_ = Stage::kNone;
  int errno_ = 0;
  std::string argv0_, cwd_;  // for error()
};

// Raises this process's soft RLIMIT_NOFILE to its hard limit and returns the new soft limit.
// The launcher keeps a few descriptors per remote host, so the usual soft limit of 1024 is a few
// hundred hosts. Processes started by Process::spawn afterwards get the old soft limit back: a
// rank that uses select() (which cannot watch descriptors >= 1024) sees the limit it would have
// had without hvdrun. Call it once, before any thread starts.
unsigned long raise_descriptor_limit();

// This process's environment as NAME=value strings (for a child that should see it all).
std::vector<std::string> environ_strings();

// Runs a short helper (`mpirun --version`) to the end: its stdout and stderr together in the
// order they came (as `2>&1` would), and its exit status; nullopt when it cannot start. Blocks
// until the process exits, so not for jobs.
struct CapturedRun {
  ExitStatus status;
  std::string output;
};
std::optional<CapturedRun> run_and_capture(const ProcessSpec& spec);

}  // namespace hvd
