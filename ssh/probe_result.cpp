#include "ssh/probe_result.h"

namespace hvd::ssh {

std::string_view to_string(ProbeCode code) {
  switch (code) {
    case ProbeCode::kOk:
      return "ok";
    case ProbeCode::kDnsFailure:
      return "dns_failure";
    case ProbeCode::kConnectionRefused:
      return "connection_refused";
    case ProbeCode::kTimeout:
      return "timeout";
    case ProbeCode::kClosedBeforeBanner:
      return "closed_before_banner";
    case ProbeCode::kTooManyConnections:
      return "too_many_connections";
    case ProbeCode::kNotSsh:
      return "not_ssh";
    case ProbeCode::kBannerTimeout:
      return "banner_timeout";
    case ProbeCode::kKeyExchangeFailed:
      return "key_exchange_failed";
    case ProbeCode::kHostKeyUnknown:
      return "host_key_unknown";
    case ProbeCode::kHostKeyChanged:
      return "host_key_changed";
    case ProbeCode::kAuthDenied:
      return "auth_denied";
    case ProbeCode::kRemoteCommandFailed:
      return "remote_command_failed";
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
