// The flags that keep a job going when something fails: restarts (--max-restarts and its host
// health policy, docs/restarts.md) and elastic training (--min-np and the discovery script,
// docs/elastic.md), with the checks of their combinations that need no host list (the plan's
// part is in cli/app.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/options.h"

namespace hvd::cli {

void define_restart_and_elastic_flags(CLI::App& app, Options& o);

// A UsageError for an elastic flag without --min-np, a bad value, or elastic training with what
// it cannot run under (--mpi, srun, --max-restarts).
void validate_elastic(const Options& o);

}  // namespace hvd::cli
