// Elastic training's host discovery script output, as the launcher reads it every interval
// (launcher/plan/discovery.h, parse_discovery_output). hvd::Error is the documented refusal.
// Properties: an accepted list has each host once, 1..1024 slots per host, at most
// kMaxDiscoveryHosts hosts; written back one `[user@]host:slots` line each, it parses to the same
// hosts and slots.
#include <set>

#include "common/error.h"
#include "launcher/plan/discovery.h"
#include "tests/fuzz/fuzz_support.h"

namespace l = hvd::launcher;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto hosts = hvd::fuzz::accepted<hvd::Error>(
      [&] { return l::parse_discovery_output(hvd::fuzz::as_text(data, size), 3); });
  if (!hosts) return 0;
  HVD_FUZZ_CHECK(hosts->size() <= l::kMaxDiscoveryHosts);
  std::set<std::string> names;
  std::string again;
  for (const l::HostSpec& h : *hosts) {
    HVD_FUZZ_CHECK(!h.host.empty());
    HVD_FUZZ_CHECK(h.slots >= 1 && h.slots <= l::kMaxSlotsPerHost);
    HVD_FUZZ_CHECK(names.insert(h.host).second);
    again += (h.user ? *h.user + "@" : "") + l::format_host(h.host) + ":" +
             std::to_string(h.slots) + "\n";
  }
  const auto reread = l::parse_discovery_output(again, 1);
  HVD_FUZZ_CHECK(reread.size() == hosts->size());
  for (std::size_t i = 0; i < reread.size(); ++i) {
    HVD_FUZZ_CHECK(reread[i].host == (*hosts)[i].host);
    HVD_FUZZ_CHECK(reread[i].slots == (*hosts)[i].slots);
    HVD_FUZZ_CHECK(reread[i].user == (*hosts)[i].user);
  }
  return 0;
}
