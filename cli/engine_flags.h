// horovodrun's flags for libhvd's engine, turned into the HOROVOD_* knobs every rank gets
// (both launch modes): --fusion-threshold-mb, --cycle-time-ms, --stall-check-warning-time-seconds,
// --stall-check-shutdown-time-seconds, --no-stall-check, --timeline-filename, --log-level.
// Values are checked here, strictly, so a typo is a usage error naming the flag and the variable
// it sets, not a rank that fails at init().
#pragma once

#include <CLI/CLI.hpp>

#include "contract/env_table.h"

#include <string>
#include <utility>
#include <vector>

namespace hvd::cli {

using Knobs = std::vector<std::pair<std::string, std::string>>;  // name, value; later wins

// A flag's value for the variable `var`, strictly: a UsageError naming the flag, the value and the
// variable when it is not a number in [min, max] (a whole number for parse_whole).
double parse_number(const std::string& flag, const std::string& text, double min, double max,
                    std::string_view var, const std::string& example);
long long parse_whole(const std::string& flag, const std::string& text, long long min,
                      long long max, std::string_view var);

// Adds the flags to `app`; each one given appends its knob to `knobs`.
void define_engine_flags(CLI::App& app, Knobs& knobs);

// HOROVOD_LOG_LEVEL for hvdrun's own --log-level (trace, debug, info, warn, error, off).
std::string libhvd_log_level(const std::string& hvdrun_level);

}  // namespace hvd::cli
