// The only I/O of planning: what this machine's names and addresses are.
#include <unistd.h>

#include <array>

#include "agent/interfaces.h"
#include "launcher/plan/plan.h"

namespace hvd::launcher {

LocalIdentity local_identity() {
  LocalIdentity self;
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) == 0) self.hostname = name.data();
  for (const agent::NetInterface& n : agent::list_interfaces()) {
    self.addresses.insert(self.addresses.end(), n.ipv4.begin(), n.ipv4.end());
    self.addresses.insert(self.addresses.end(), n.ipv6.begin(), n.ipv6.end());
  }
  return self;
}

}  // namespace hvd::launcher
