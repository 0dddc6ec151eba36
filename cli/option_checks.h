// The checks of a parsed command line that need no host list (the plan's are in cli/app.cpp):
// combinations of flags, and values CLI11 cannot check, each a UsageError that says what to do.
#pragma once

#include <optional>
#include <string>

#include "cli/options.h"

namespace hvd::cli {

void validate_options(const Options& o);

// With --rsh-agent: the SSH flags given that it makes moot, as a warning for the plan (the same
// command line may be used with and without it); nullopt when there are none.
std::optional<std::string> rsh_agent_warning(const Options& o);

}  // namespace hvd::cli
