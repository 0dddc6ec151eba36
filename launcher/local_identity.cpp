// The only I/O of planning: what this machine's names and addresses are.
#include <unistd.h>

#include <array>

#include "launcher/plan.h"
#include "worker/interfaces.h"

namespace hvd::launcher {

LocalIdentity local_identity() {
  LocalIdentity self;
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) == 0) self.hostname = name.data();
  for (const worker::NetInterface& n : worker::list_interfaces()) {
    self.addresses.insert(self.addresses.end(), n.ipv4.begin(), n.ipv4.end());
    self.addresses.insert(self.addresses.end(), n.ipv6.begin(), n.ipv6.end());
  }
  return self;
}

}  // namespace hvd::launcher
