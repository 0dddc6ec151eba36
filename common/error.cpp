#include "common/error.h"

#include <utility>

namespace hvd {

ExitCode exit_code_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage:
      return ExitCode::kUsage;
    case ErrorKind::kNetCheck:
      return ExitCode::kNetCheckFailed;
    case ErrorKind::kSsh:
      return ExitCode::kSshCheckFailed;
    case ErrorKind::kHostLost:
      return ExitCode::kHostLost;
    case ErrorKind::kRemote:
      return ExitCode::kCannotStart;
    case ErrorKind::kTimeout:
      return ExitCode::kStartupTimeout;
    case ErrorKind::kLauncher:
      return ExitCode::kLauncherFailed;
    case ErrorKind::kJobTimeout:
      return ExitCode::kJobTimeout;
    case ErrorKind::kStalled:
      return ExitCode::kStalled;
    case ErrorKind::kInternal:
    case ErrorKind::kCount:
      break;
  }
  return ExitCode::kInternal;
}

std::string_view kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage:
      return "usage";
    case ErrorKind::kNetCheck:
      return "net_check";
    case ErrorKind::kSsh:
      return "ssh";
    case ErrorKind::kRemote:
      return "remote";
    case ErrorKind::kHostLost:
      return "host_lost";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kLauncher:
      return "launcher";
    case ErrorKind::kJobTimeout:
      return "job_timeout";
    case ErrorKind::kStalled:
      return "stalled";
    case ErrorKind::kInternal:
    case ErrorKind::kCount:
      break;
  }
  return "internal";
}

Error::Error(const std::string& what, std::string hint, ErrorKind kind)
    : std::runtime_error(what), hint_(std::move(hint)), kind_(kind) {}

}  // namespace hvd
