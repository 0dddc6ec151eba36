// The checks of a parsed command line that need no host list (the plan's are in cli/app.cpp):
// combinations of flags, and values CLI11 cannot check, each a UsageError that says what to do.
#pragma once

#include "cli/options.h"

namespace hvd::cli {

void validate_options(const Options& o);

}  // namespace hvd::cli
