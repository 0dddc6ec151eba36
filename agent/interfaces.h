// This host's network interfaces, as an agent reports them in its hello (issue: choose each
// host's interface by name or CIDR instead of Horovod's "same NIC name everywhere" rule).
#pragma once

#include <string>
#include <vector>

namespace hvd::agent {

struct NetInterface {
  std::string name;
  std::vector<std::string> ipv4;  // numeric addresses
  std::vector<std::string> ipv6;
  bool up = false;
  bool loopback = false;
  bool is_virtual = false;  // no backing device under /sys/class/net/NAME/device (bridges, veth,
                            // docker0, tun): never chosen unless named
  bool operator==(const NetInterface&) const = default;
};

// getifaddrs(), grouped by interface, in the kernel's order.
std::vector<NetInterface> list_interfaces();

}  // namespace hvd::agent
