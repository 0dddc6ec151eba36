// Which address each host's ranks use (bind, advertise, MASTER_ADDR), chosen per host from the
// interfaces its agent reported, so hosts whose NICs have different names still agree:
//   --network-cidr 10.0.0.0/16     the host's IPv4 address inside the CIDR, whatever the NIC
//   --network-interface eth1,ib0   the first of these names that the host has, up, with IPv4
// Neither: the address the host was reached at (the default; nothing to choose here).
// Pure; the launch calls choose_address() once every agent said hello.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/interfaces.h"

namespace hvd::launcher {

struct Cidr {
  std::uint32_t network = 0;  // host byte order, masked
  int prefix = 0;
  std::string text;  // as written
  bool contains(const std::string& ipv4) const;
};

// "10.0.0.0/16" (IPv4 only). Throws UsageError naming --network-cidr.
Cidr parse_cidr(const std::string& text);

struct NetworkChoice {
  std::optional<Cidr> cidr;
  std::vector<std::string> interfaces;  // --network-interface, in order
  bool active() const { return cidr.has_value() || !interfaces.empty(); }
};

// "eth1,ib0" -> names; throws UsageError for an empty or invalid name.
std::vector<std::string> parse_interface_list(const std::string& text);

struct HostAddress {
  std::string address;
  std::string interface;
};

// The address for `host` (named in errors) from its interfaces. Throws hvd::Error saying what
// was asked, what the host has, and what to do, when nothing matches.
HostAddress choose_address(const NetworkChoice& choice,
                           const std::vector<agent::NetInterface>& interfaces,
                           const std::string& host);

// "lo 127.0.0.1 (up, loopback); eth0 10.0.0.5 (up)" for messages.
std::string describe_interfaces(const std::vector<agent::NetInterface>& interfaces);

}  // namespace hvd::launcher
