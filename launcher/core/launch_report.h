// What a launch tells the user at the end: a root-cause block on stderr when a rank failed or
// the job could not start, and the --json result document (schema_version 1).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/core/launcher.h"
#include "launcher/plan/plan.h"

namespace hvd::launcher {

inline constexpr int kLaunchSchemaVersion = 1;

// "exited with code 3", "was killed by signal 9 (SIGKILL, exit code 137: often the kernel's OOM
// killer)".
std::string describe_exit(const RankOutcome& rank);

// Empty when the job succeeded.
std::string format_failure_report(const Plan& plan, const LaunchResult& result);

// "SIGKILL" ("signal N" for a number without a name): the --json result's and the record's.
std::string signal_name(int sig);

// The --json result document.
nlohmann::ordered_json launch_json(const Plan& plan, const LaunchResult& result);
// The result's `timings_ms`: {"start": ms or null when not known, "total": ms}.
nlohmann::ordered_json timings_json(const LaunchResult& result);

}  // namespace hvd::launcher
