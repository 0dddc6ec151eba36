// How a Plan is shown: the --dry-run table (human) and JSON (schema_version 1, for scripts).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/core/launcher.h"
#include "launcher/plan/plan.h"

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

// The dry run as one JSON document: the plan, and what the launcher named `launcher` would run
// (`commands`, from Launcher::describe). Strings are bytes (argv, environment values); the
// serialiser (json_text) replaces what is not UTF-8.
nlohmann::ordered_json plan_json(const Plan& plan, const PlanOutputOptions& options,
                                 std::string_view launcher = "native",
                                 const std::vector<LaunchCommand>& commands = {});

// The --dry-run table: the plan, then what the launcher would run.
std::string format_launcher_commands(std::string_view launcher,
                                     const std::vector<LaunchCommand>& commands);

}  // namespace hvd::launcher
