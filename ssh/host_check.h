// What the SSH check found for one host: a code from a fixed set, a message, a hint, the ssh
// command that reproduces it, and how long each stage took (docs/check-ssh.md).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::ssh {

// remote_command_failed's hint: the check's, and a launch's when the agent command fails the same
// way (a forced command in authorized_keys runs instead of it).
inline constexpr std::string_view kRemoteCommandFailedHint =
    "login works, but commands fail: a forced command= in authorized_keys, or a login shell or "
    "~/.bashrc that exits or prints errors";

// login_prints_text's hint, in the words a launch uses when the agent's first bytes are such
// text (agent/protocol.cpp).
inline constexpr std::string_view kLoginPrintsTextHint =
    "a login script (~/.bashrc, /etc/profile) printing text for non-interactive sessions: the "
    "hvdrun agent speaks on stdout, so a launch fails on it. Print only in interactive shells "
    "(case $- in *i*) or to stderr";

enum class CheckCode {
  kOk,
  kDnsFailure,
  kConnectionRefused,
  kTimeout,
  kClosedBeforeBanner,
  kTooManyConnections,
  kNotSsh,
  kBannerTimeout,
  kKeyExchangeFailed,
  kHostKeyUnknown,
  kHostKeyChanged,
  kAuthDenied,
  kRemoteCommandFailed,
  kLoginPrintsText,
  kAgentMissing,          // no hvdrun at --agent-path: a launch would exit 127 there
  kAgentNotRunnable,      // there, but `PATH --version` says nothing: it does not run there
  kAgentVersionMismatch,  // another hvdrun version: a launch would refuse its agent
  kCount,  // the number of codes, not a code: a new code goes above (docs/architecture.md)
};

// The stages in order; the first that fails decides the code.
enum class Stage { kConfig, kResolve, kConnect, kBanner, kKex, kHostKey, kAuth, kProbe };

std::string_view to_string(CheckCode code);
std::string_view to_string(Stage stage);

struct StageTime {
  Stage stage = Stage::kConfig;
  std::chrono::microseconds elapsed{0};
  bool ok = false;
};

// What the facts script reported from a host that let us in.
struct RemoteInfo {
  std::string hostname;
  std::string boot_id;
  std::string agent_path;
  bool agent_present = false;
  std::string agent_version;  // "0.1.0"; empty when absent or unreadable
};

enum class HostKeyOutcome { kNotChecked, kKnown, kRecorded };

struct HostCheck {
  std::string host;     // as the user wrote it
  int port = 22;        // after the ssh config, -p and the hostfile
  std::string user;     // likewise
  std::string address;  // the address connected to, when known
  bool local = false;   // a local host: no SSH needed
  CheckCode code = CheckCode::kOk;
  std::string message;
  std::string hint;
  std::string reproduce;  // the exact ssh command line that shows the same failure
  std::chrono::milliseconds elapsed{0};
  std::vector<StageTime> stages;
  HostKeyOutcome host_key = HostKeyOutcome::kNotChecked;
  std::optional<RemoteInfo> remote;

  bool ok() const { return code == CheckCode::kOk; }
};

}  // namespace hvd::ssh
