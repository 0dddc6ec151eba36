// One error hierarchy for hvdrun's C++ code (STYLE.md point 4).
//
// Every user-facing error says what happened and where (in the message) and what to do next (the
// hint). Each error class maps to one documented exit code (docs/exit-codes.md). Errors are thrown
// inside C++ call chains only; event loops and background threads carry them as values.
#pragma once

#include <stdexcept>
#include <string>

namespace hvd {

// hvdrun's own exit codes. A failed rank's exit code (or 128+signal) is passed through instead;
// the values below follow sysexits.h, which training programs rarely use, to keep collisions rare.
// docs/exit-codes.md documents them; `--json` output is the authoritative result.
enum class ExitCode : int {
  kSuccess = 0,
  kUsage = 64,           // bad flags, host list, hostfile, -x, or -np (EX_USAGE)
  kNetCheckFailed = 68,  // a host cannot reach another host or the launcher (EX_NOHOST)
  kSshCheckFailed = 69,  // a host failed the SSH check (EX_UNAVAILABLE)
  kInternal = 70,        // a bug or an unavailable feature in hvdrun itself (EX_SOFTWARE)
  kStartupTimeout = 75,  // a start-up phase did not finish in time (EX_TEMPFAIL)
  kCannotStart = 127,    // the command or its working directory is missing on a host (as sh)
};

inline int to_int(ExitCode code) { return static_cast<int>(code); }

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string hint = {});
  // What the user can do about it; may be empty.
  const std::string& hint() const noexcept { return hint_; }
  virtual ExitCode exit_code() const noexcept { return ExitCode::kInternal; }

 private:
  std::string hint_;
};

// Bad input from the user: flags, host lists, hostfiles, -x specs, environment values.
class UsageError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return ExitCode::kUsage; }
};

// The launcher<->rank contract was broken (a rank saw an invalid HOROVOD_* / HVD_* value).
class ContractError : public Error {
 public:
  using Error::Error;
};

}  // namespace hvd
