// How a Plan is shown: the --dry-run table (human) and JSON (schema_version 1, for scripts).
#pragma once

#include <string>

#include "launcher/plan.h"

namespace hvd::launcher {

struct PlanOutputOptions {
  bool show_env_values = false;  // show -x values instead of "<redacted>"
  bool show_env = false;         // the human table lists each rank's environment too
};

inline constexpr int kPlanSchemaVersion = 1;

// True when output shows a placeholder instead of the value (secret, deferred, redacted -x).
bool is_placeholder(const EnvEntry& entry, const PlanOutputOptions& options);

// What an entry's value looks like in output: the value, "<redacted>" or "<set at launch: ...>".
std::string display_value(const EnvEntry& entry, const PlanOutputOptions& options);

std::string format_plan_table(const Plan& plan, const PlanOutputOptions& options);

// One JSON document (pretty-printed, newline-terminated). Bytes that are not UTF-8 (argv and
// environment values are bytes) are replaced by U+FFFD here; launches carry them encoded.
std::string format_plan_json(const Plan& plan, const PlanOutputOptions& options);

}  // namespace hvd::launcher
