// `hvdrun --check-ssh`: the hosts of a host list or hostfile, each probed over SSH (ssh/check.h),
// local hosts reported without SSH; and the report as a table or JSON (docs/check-ssh.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/plan/host_spec.h"
#include "launcher/plan/plan.h"
#include "ssh/host_check.h"
#include "ssh/options.h"

namespace hvd::launcher {

struct CheckReport {
  std::vector<ssh::HostCheck> hosts;  // in input order
  bool ok() const;
  size_t failures() const;
};

// Probes every remote host in parallel. Throws UsageError for bad local input.
CheckReport run_ssh_check(const std::vector<HostSpec>& hosts, const ssh::SshOptions& options,
                          const LocalIdentity& self);

// Sets each remote host's ssh_port and ssh_user to what its SSH connection will use once the
// ssh config (--ssh-config, else ~/.ssh/config) is applied, with the same precedence as a launch
// (hostfile port=/user=, then -p, then the config): for the dry run. Reads files only; connects
// nowhere. Throws UsageError for an unreadable --ssh-config.
void apply_ssh_config(Plan& plan, const ssh::SshOptions& options);

inline constexpr int kCheckSchemaVersion = 1;

std::string format_check_table(const CheckReport& report, bool colour);
nlohmann::ordered_json check_json(const CheckReport& report);

}  // namespace hvd::launcher
