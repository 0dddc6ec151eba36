#include "ssh/host_check.h"

namespace hvd::ssh {

std::string_view to_string(CheckCode code) {
  switch (code) {
    case CheckCode::kOk:
      return "ok";
    case CheckCode::kDnsFailure:
      return "dns_failure";
    case CheckCode::kConnectionRefused:
      return "connection_refused";
    case CheckCode::kTimeout:
      return "timeout";
    case CheckCode::kClosedBeforeBanner:
      return "closed_before_banner";
    case CheckCode::kTooManyConnections:
      return "too_many_connections";
    case CheckCode::kNotSsh:
      return "not_ssh";
    case CheckCode::kBannerTimeout:
      return "banner_timeout";
    case CheckCode::kKeyExchangeFailed:
      return "key_exchange_failed";
    case CheckCode::kHostKeyUnknown:
      return "host_key_unknown";
    case CheckCode::kHostKeyChanged:
      return "host_key_changed";
    case CheckCode::kAuthDenied:
      return "auth_denied";
    case CheckCode::kRemoteCommandFailed:
      return "remote_command_failed";
    case CheckCode::kLoginPrintsText:
      return "login_prints_text";
    case CheckCode::kAgentMissing:
      return "agent_missing";
    case CheckCode::kAgentNotRunnable:
      return "agent_not_runnable";
    case CheckCode::kAgentVersionMismatch:
      return "agent_version_mismatch";
    case CheckCode::kCount:
      break;
  }
  return "unknown";
}

std::string_view to_string(Stage stage) {
  switch (stage) {
    case Stage::kConfig:
      return "config";
    case Stage::kResolve:
      return "resolve";
    case Stage::kConnect:
      return "connect";
    case Stage::kBanner:
      return "banner";
    case Stage::kKex:
      return "kex";
    case Stage::kHostKey:
      return "host_key";
    case Stage::kAuth:
      return "auth";
    case Stage::kProbe:
      return "probe";
  }
  return "unknown";
}

}  // namespace hvd::ssh
