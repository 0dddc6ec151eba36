#include "agent/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <filesystem>

namespace hvd::agent {

std::vector<NetInterface> list_interfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    auto found = std::find_if(out.begin(), out.end(),
                              [&](const NetInterface& n) { return n.name == it->ifa_name; });
    if (found == out.end()) {
      NetInterface n;
      n.name = it->ifa_name;
      n.up = (it->ifa_flags & IFF_UP) != 0;
      n.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
      std::error_code ec;
      n.is_virtual =
          !n.loopback && !std::filesystem::exists("/sys/class/net/" + n.name + "/device", ec);
      out.push_back(n);
      found = out.end() - 1;
    }
    if (it->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (it->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text,
                  sizeof text);
      found->ipv4.emplace_back(text);
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(it->ifa_addr)->sin6_addr, text,
                  sizeof text);
      found->ipv6.emplace_back(text);
    }
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace hvd::agent
