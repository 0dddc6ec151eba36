// Elastic training's start with a host discovery script (--host-discovery-script): the script's
// first list that holds the slots the job starts with, as horovodrun waits for them (its driver's
// wait_for_available_slots), up to --elastic-timeout, with a live line on a terminal. A dry run
// waits the same way: it runs the script too.
#pragma once

#include <string>

#include "launcher/core/launcher.h"
#include "launcher/plan/scheduler_hosts.h"

namespace hvd::launcher {

// The first list from `elastic.discovery_script` (which must be set) that holds `needed` slots
// (-np, else --min-np); `wanted` names the count as the user gave it ("-np 4"). Throws
// UsageError when none did within the elastic timeout. `live`: the wait as a status line on
// stderr (a terminal, no --json).
HostsSource wait_for_discovered_hosts(const ElasticOptions& elastic, int needed,
                                      const std::string& wanted, bool live);

}  // namespace hvd::launcher
