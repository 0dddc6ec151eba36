// -H host lists and hostfiles (launcher/plan/host_spec.h). The first byte picks the grammar (even:
// -H, odd: hostfile); the rest is the text. UsageError is the documented refusal. What is accepted
// must survive being written back: each host as format_host() writes it in an address position
// (with its user and slots), parsed again, gives the same hosts.
#include <fmt/format.h>

#include "common/error.h"
#include "launcher/plan/host_spec.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using hvd::launcher::HostSpec;

bool same_hosts(const std::vector<HostSpec>& a, const std::vector<HostSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].host != b[i].host || a[i].slots != b[i].slots || a[i].port != b[i].port ||
        a[i].user != b[i].user) {
      return false;
    }
  }
  return true;
}

std::string as_host_list(const std::vector<HostSpec>& hosts) {
  std::string out;
  for (const HostSpec& h : hosts) {
    if (!out.empty()) out += ',';
    if (h.user) out += *h.user + "@";
    out += fmt::format("{}:{}", hvd::launcher::format_host(h.host), h.slots);
  }
  return out;
}

std::string as_hostfile(const std::vector<HostSpec>& hosts) {
  std::string out;
  for (const HostSpec& h : hosts) {
    out += fmt::format("{} slots={}", hvd::launcher::format_host(h.host), h.slots);
    if (h.port) out += fmt::format(" port={}", *h.port);
    if (h.user) out += " user=" + *h.user;
    out += '\n';
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool hostfile = (data[0] & 1) != 0;
  const std::string_view text = hvd::fuzz::as_text(data + 1, size - 1);
  std::vector<HostSpec> hosts;
  try {
    hosts = hostfile ? hvd::launcher::parse_hostfile(text, "fuzz.txt")
                     : hvd::launcher::parse_host_list(text);
  } catch (const hvd::UsageError&) {
    return 0;
  }
  HVD_FUZZ_CHECK(!hosts.empty());
  for (const HostSpec& h : hosts) {
    HVD_FUZZ_CHECK(!h.host.empty() && h.host.front() != '-');
    HVD_FUZZ_CHECK(h.slots >= 1 && h.slots <= hvd::launcher::kMaxSlotsPerHost);
    HVD_FUZZ_CHECK(!h.port || (*h.port >= 1 && *h.port <= 65535));
  }
  const auto again = hostfile ? hvd::launcher::parse_hostfile(as_hostfile(hosts), "again.txt")
                              : hvd::launcher::parse_host_list(as_host_list(hosts));
  HVD_FUZZ_CHECK(same_hosts(hosts, again));
  return 0;
}
