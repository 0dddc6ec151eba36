// The values of hvdrun's flags, parsed strictly: each bad value is a UsageError that names the
// flag as the user typed it, the value, and what to write instead (CLI11's own conversion
// messages name the option's long name and say little more).
#pragma once

#include <string>
#include <string_view>

#include "common/port_range.h"

namespace hvd::cli {

// --log-level in any case, with horovodrun's names too: WARNING is warn, FATAL is spdlog's
// critical (only what ends the launch).
std::string log_level_name(const std::string& given);

// A whole number (`flag` is the spelling the message uses, e.g. -np).
int parse_int(std::string_view flag, const std::string& text);

// Seconds, fractions allowed, from just above 0 (or from 0, when `zero` says what 0 means for the
// flag: a timeout of 0 would fail at once, and an unbounded start-up is the silent hang hvdrun
// avoids) to `max`.
struct SecondsRule {
  std::string_view zero;  // empty: 0 is refused
  double max = 3600;
  std::string_view max_words{};  // `max` in the message, e.g. "30 days"; default the number
  std::string_view example{};    // the hint when 0 is refused; default "e.g. FLAG 10 (...)"
};
double parse_seconds(std::string_view flag, const std::string& text, SecondsRule rule = {});
double parse_seconds(std::string_view flag, const std::string& text, std::string_view zero);

// LOW-HIGH, both ports, LOW <= HIGH.
PortRange parse_port_range_flag(std::string_view flag, const std::string& text);

}  // namespace hvd::cli
