#include "launcher/plan/network_choice.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "common/error.h"

namespace hvd::launcher {
namespace {

std::optional<std::uint32_t> ipv4_value(const std::string& text) {
  in_addr a{};
  if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

std::uint32_t mask(int prefix) { return prefix == 0 ? 0u : ~std::uint32_t{0} << (32 - prefix); }

bool link_local(const std::string& ipv4) { return ipv4.rfind("169.254.", 0) == 0; }

}  // namespace

bool Cidr::contains(const std::string& ipv4) const {
  const auto v = ipv4_value(ipv4);
  return v && (*v & mask(prefix)) == network;
}

Cidr parse_cidr(const std::string& text) {
  const auto slash = text.find('/');
  const std::string addr = text.substr(0, slash);
  int prefix = -1;
  if (slash != std::string::npos) {
    const std::string p = text.substr(slash + 1);
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), prefix);
    if (ec != std::errc() || end != p.data() + p.size()) prefix = -1;
  }
  const auto value = ipv4_value(addr);
  if (!value || prefix < 0 || prefix > 32) {
    throw UsageError(fmt::format("--network-cidr {}: not an IPv4 CIDR", text),
                     "write ADDRESS/PREFIX, e.g. --network-cidr 10.0.0.0/16");
  }
  return Cidr{*value & mask(prefix), prefix, text};
}

std::vector<std::string> parse_interface_list(const std::string& text) {
  std::vector<std::string> names;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = std::min(text.find(',', at), text.size());
    const std::string name = text.substr(at, comma - at);
    const bool valid =
        !name.empty() && name.size() < 16 && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
                 c == '@' || c == ':';
        });
    if (!valid) {
      throw UsageError(
          fmt::format("--network-interface {}: '{}' is not an interface name", text, name),
          "give names as `ip link` shows them, comma-separated: eth1,ib0");
    }
    names.push_back(name);
    at = comma + 1;
  }
  return names;
}

std::string describe_interfaces(const std::vector<agent::NetInterface>& interfaces) {
  std::vector<std::string> parts;
  for (const agent::NetInterface& n : interfaces) {
    std::vector<std::string> flags{n.up ? "up" : "down"};
    if (n.loopback) flags.emplace_back("loopback");
    if (n.is_virtual) flags.emplace_back("virtual");
    parts.push_back(fmt::format(
        "{} {} ({})", n.name,
        n.ipv4.empty() ? std::string("no IPv4") : fmt::format("{}", fmt::join(n.ipv4, ",")),
        fmt::join(flags, ", ")));
  }
  return parts.empty() ? "none reported" : fmt::format("{}", fmt::join(parts, "; "));
}

HostAddress choose_address(const NetworkChoice& choice,
                           const std::vector<agent::NetInterface>& interfaces,
                           const std::string& host) {
  if (choice.cidr) {
    for (const agent::NetInterface& n : interfaces) {
      if (!n.up) continue;
      for (const std::string& a : n.ipv4) {
        if (choice.cidr->contains(a) && !link_local(a)) return {a, n.name};
      }
    }
    throw Error(fmt::format("--network-cidr {}: host {} has no address in it (its interfaces: "
                            "{})",
                            choice.cidr->text, host, describe_interfaces(interfaces)),
                "give a CIDR that every host has an address in, or use --network-interface");
  }
  for (const std::string& wanted : choice.interfaces) {
    for (const agent::NetInterface& n : interfaces) {
      if (n.name == wanted && n.up && !n.ipv4.empty()) return {n.ipv4.front(), n.name};
    }
  }
  throw Error(fmt::format("--network-interface {}: host {} has none of these up with an IPv4 "
                          "address (its interfaces: {})",
                          fmt::join(choice.interfaces, ","), host, describe_interfaces(interfaces)),
              "list every host's interface name (names may differ per host: eth1,ens5), or use "
              "--network-cidr");
}

}  // namespace hvd::launcher
