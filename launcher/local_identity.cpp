// The only I/O of planning: what this machine's names and addresses are.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <array>

#include "launcher/plan.h"

namespace hvd::launcher {

LocalIdentity local_identity() {
  LocalIdentity self;
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) == 0) self.hostname = name.data();

  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return self;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    std::array<char, INET6_ADDRSTRLEN> text{};
    const int family = it->ifa_addr->sa_family;
    const void* raw = nullptr;
    if (family == AF_INET) {
      raw = &reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr;
    } else if (family == AF_INET6) {
      raw = &reinterpret_cast<const sockaddr_in6*>(it->ifa_addr)->sin6_addr;
    } else {
      continue;
    }
    if (inet_ntop(family, raw, text.data(), text.size()) != nullptr) {
      self.addresses.emplace_back(text.data());
    }
  }
  freeifaddrs(list);
  return self;
}

}  // namespace hvd::launcher
