#include "launcher/native/agent_conn.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

namespace hvd::launcher {

AgentHello parse_hello(const std::string& payload) {
  AgentHello hello;
  const auto json = nlohmann::json::parse(payload, nullptr, false);
  if (json.is_discarded() || !json.is_object()) return hello;
  try {
    // Only an integer that fits: json.value<int>() would convert a float or a bool too, and a
    // float out of int's range is undefined behaviour (as tests/fuzz/probe found in probe.cpp).
    const auto protocol = json.find("protocol");
    const bool fits = protocol != json.end() &&
                      (protocol->is_number_unsigned()
                           ? protocol->get<std::uint64_t>() <= std::numeric_limits<int>::max()
                           : protocol->is_number_integer() &&
                                 protocol->get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                                 protocol->get<std::int64_t>() <= std::numeric_limits<int>::max());
    if (protocol == json.end()) {
      hello.protocol = -1;
    } else if (fits) {
      hello.protocol = protocol->get<int>();
    } else {
      return AgentHello{};  // a field of the wrong type: not an agent of this version
    }
    hello.version = json.value("version", "?");
    hello.hostname = json.value("hostname", "");
    hello.boot_id = json.value("boot_id", "");
    hello.ssh_connection = json.value("ssh_connection", "");
    if (json.contains("interfaces") && json["interfaces"].is_array()) {
      for (const auto& i : json["interfaces"]) {
        if (!i.is_object()) continue;
        agent::NetInterface n;
        n.name = i.value("name", "");
        n.ipv4 = i.value("ipv4", std::vector<std::string>{});
        n.ipv6 = i.value("ipv6", std::vector<std::string>{});
        n.up = i.value("up", false);
        n.loopback = i.value("loopback", false);
        n.is_virtual = i.value("virtual", false);
        hello.interfaces.push_back(std::move(n));
      }
    }
  } catch (const nlohmann::json::exception&) {
    return AgentHello{};  // a field of the wrong type: not an agent of this version
  }
  return hello;
}

}  // namespace hvd::launcher
