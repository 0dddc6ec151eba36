#include "launcher/core/discovery_wait.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/error.h"
#include "launcher/core/status_line.h"
#include "launcher/plan/discovery.h"

namespace hvd::launcher {

HostsSource wait_for_discovered_hosts(const ElasticOptions& elastic, int needed,
                                      const std::string& wanted, bool live) {
  using Clock = std::chrono::steady_clock;
  const std::string& script = *elastic.discovery_script;
  const auto timeout = elastic.timeout();
  const auto interval = elastic.discovery_interval();
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto& status = StatusLine::get();
  if (live) status.enable(STDERR_FILENO);
  const auto clear_line = [&] {
    if (live) {
      status.set("");
      status.clear_now();
    }
  };
  bool said = false;
  for (;;) {
    DiscoveryListing listing =
        DiscoveryRunner::run_once(script, elastic.slots(), kDiscoveryTimeout);
    std::vector<HostSpec>& hosts = listing.hosts;
    int slots = 0;
    for (const HostSpec& h : hosts) slots += h.slots;
    if (slots >= needed && !hosts.empty()) {
      clear_line();
      return {"discovery",
              fmt::format("the host discovery script {}: {} host{}, {} slot{}", script,
                          hosts.size(), hosts.size() == 1 ? "" : "s", slots, slots == 1 ? "" : "s"),
              std::move(hosts),
              std::nullopt,
              std::nullopt,
              std::move(listing.output)};
    }
    if (Clock::now() + interval > deadline) {
      clear_line();
      throw UsageError(
          fmt::format("the host discovery script {} listed {} slot{} for {:.0f} s, fewer than "
                      "{}",
                      script, slots, slots == 1 ? "" : "s",
                      std::chrono::duration<double>(timeout).count(), wanted),
          "check what the script prints, or lower -np; --elastic-timeout is how long hvdrun "
          "waits for slots");
    }
    const std::string waiting = fmt::format(
        "elastic: the host discovery script lists {} slot{}; waiting up to {:.0f} s "
        "(--elastic-timeout) for {}",
        slots, slots == 1 ? "" : "s", std::chrono::duration<double>(timeout).count(), wanted);
    if (live) {
      status.set(fmt::format("{} ({:.0f} s)", waiting,
                             std::chrono::duration<double>(Clock::now() - start).count()));
      status.draw_now();
    } else if (!said) {
      spdlog::info("{}", waiting);
    }
    said = true;
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace hvd::launcher
