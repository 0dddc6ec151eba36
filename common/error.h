// One error hierarchy for hvdrun's C++ code (STYLE.md point 4).
//
// Every user-facing error says what happened and where (in the message) and what to do next (the
// hint). Each error has a kind, and each kind maps to one documented exit code
// (docs/exit-codes.md). Errors are thrown inside C++ call chains only; event loops and background
// threads carry them as values (a Failure: kind, message, hint).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace hvd {

// hvdrun's own exit codes. A failed rank's exit code (or 128+signal) is passed through instead;
// the values below follow sysexits.h, which training programs rarely use, to keep collisions rare.
// docs/exit-codes.md documents them; `--json` output is the authoritative result.
enum class ExitCode : int {
  kSuccess = 0,
  kUsage = 64,           // bad flags, host list, hostfile, -x, or -np (EX_USAGE)
  kNetCheckFailed = 68,  // a host cannot reach another host or the launcher (EX_NOHOST)
  kSshCheckFailed = 69,  // a host failed the SSH check or an SSH stage of a launch (EX_UNAVAILABLE)
  kInternal = 70,        // a bug in hvdrun itself (EX_SOFTWARE)
  kLauncherFailed = 71,  // the launcher could not do its own part: bind, spawn (EX_OSERR)
  kHostLost =
      74,  // a host was lost while the job ran: link closed or silent, agent died (EX_IOERR)
  kStartupTimeout = 75,  // a start-up phase did not finish in time (EX_TEMPFAIL)
  // the ranks stalled past --stall-check-shutdown-time-seconds: some never submitted an op the
  // others wait in (EX_PROTOCOL: the ranks' exchange broke down)
  kStalled = 76,
  kJobTimeout = 124,   // the job ran past --timeout and was stopped (timeout(1)'s code)
  kCannotStart = 127,  // the command, its directory or the agent is missing on a host (as sh)
};

inline int to_int(ExitCode code) { return static_cast<int>(code); }

// What kind of failure an error is; each kind has one exit code (exit_code_of).
enum class ErrorKind {
  kUsage,       // bad input from the user: flags, host lists, hostfiles, -x, environment values
  kNetCheck,    // a host cannot reach another host or the launcher's rendezvous server
  kSsh,         // a host failed an SSH stage (connect, host key, authentication)
  kRemote,      // a host could not start the job: the agent or the command is missing there
  kHostLost,    // a host's agent or its connection went away while the job ran
  kTimeout,     // a start-up phase did not finish in time
  kLauncher,    // the launcher's own part failed: no port to listen on, a process it cannot start
  kJobTimeout,  // the job ran past --timeout
  kStalled,     // the ranks stalled past --stall-check-shutdown-time-seconds (docs/why.md)
  kInternal,    // a bug in hvdrun
  kCount,       // the number of kinds, not a kind
};

ExitCode exit_code_of(ErrorKind kind);
// "usage", "net_check", "ssh", "remote", "host_lost", "timeout", "launcher", "job_timeout",
// "stalled", "internal": the JSON result's error kind.
std::string_view kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string hint = {},
                 ErrorKind kind = ErrorKind::kInternal);
  // What the user can do about it; may be empty.
  const std::string& hint() const noexcept { return hint_; }
  ErrorKind kind() const noexcept { return kind_; }
  ExitCode exit_code() const noexcept { return exit_code_of(kind_); }

 private:
  std::string hint_;
  ErrorKind kind_;
};

// One class per kind that code throws, so a throw says its kind where it stands.
template <ErrorKind K>
class KindError : public Error {
 public:
  explicit KindError(const std::string& what, std::string hint = {})
      : Error(what, std::move(hint), K) {}
};
using UsageError = KindError<ErrorKind::kUsage>;
using SshError = KindError<ErrorKind::kSsh>;
using RemoteError = KindError<ErrorKind::kRemote>;
using HostLostError = KindError<ErrorKind::kHostLost>;
using TimeoutError = KindError<ErrorKind::kTimeout>;
using LauncherError = KindError<ErrorKind::kLauncher>;

// The launcher<->rank contract was broken (a rank saw an invalid HOROVOD_* / HVD_* value).
class ContractError : public Error {
 public:
  using Error::Error;
};

// An error as a value, for event loops and threads (nothing throws across them).
struct Failure {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
  std::string hint;
};

}  // namespace hvd
