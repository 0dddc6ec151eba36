#include "ssh/reproduce.h"

#include <algorithm>
#include <vector>

#include "common/shell_quote.h"

namespace hvd::ssh {

std::string reproduce_command(const ResolvedTarget& target, const SshOptions& options) {
  std::vector<std::string> words{"ssh"};
  if (options.config_file) words.insert(words.end(), {"-F", *options.config_file});
  if (options.known_hosts_file) {
    words.insert(words.end(), {"-o", "UserKnownHostsFile=" + *options.known_hosts_file});
  }
  words.insert(
      words.end(),
      {"-o",
       options.host_key_policy == HostKeyPolicy::kStrict ? "StrictHostKeyChecking=yes"
                                                         : "StrictHostKeyChecking=accept-new",
       "-o", "BatchMode=yes", "-o",
       "ConnectTimeout=" +
           std::to_string(std::max<long>(
               1, std::chrono::duration_cast<std::chrono::seconds>(options.timeout).count()))});
  if (options.identity_file) {
    words.insert(words.end(), {"-i", *options.identity_file, "-o", "IdentitiesOnly=yes"});
  }
  words.insert(words.end(),
               {"-p", std::to_string(target.port), "-l", target.user, target.host, "true"});
  return shell_join(words);
}

}  // namespace hvd::ssh
