#include "cli/flag_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>

#include "common/error.h"

namespace hvd::cli {
namespace {

constexpr std::string_view kLogLevels[] = {"trace", "debug", "info", "warn", "error", "off"};

}  // namespace

std::string log_level_name(const std::string& given) {
  std::string text = given;
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (text == "warning") return "warn";
  if (text == "fatal") return "critical";
  if (text != "critical" &&
      std::find(std::begin(kLogLevels), std::end(kLogLevels), text) == std::end(kLogLevels)) {
    throw UsageError(fmt::format("--log-level {}: unknown level", given),
                     "use trace, debug, info, warn, error or off (or horovodrun's TRACE, DEBUG, "
                     "INFO, WARNING, ERROR, FATAL)");
  }
  return text;
}

int parse_int(std::string_view flag, const std::string& text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw UsageError(fmt::format("{} {}: not a whole number", flag, text),
                     fmt::format("write a number, e.g. {} 4", flag));
  }
  return value;
}

double parse_seconds(std::string_view flag, const std::string& text, SecondsRule rule) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool number = !text.empty() && ec == std::errc() && end == text.data() + text.size();
  const bool low_ok = rule.zero.empty() ? value > 0 : value >= 0;
  if (number && low_ok && value <= rule.max) return value;
  const std::string max =
      rule.max_words.empty() ? fmt::format("{:g}", rule.max) : std::string(rule.max_words);
  if (rule.zero.empty()) {
    throw UsageError(
        fmt::format("{} {}: not a number of seconds above 0 and at most {}", flag, text, max),
        rule.example.empty()
            ? fmt::format("e.g. {} 10 (fractions such as 0.5 work; 0 is not allowed here)", flag)
            : std::string(rule.example));
  }
  throw UsageError(fmt::format("{} {}: not a number of seconds from 0 to {}", flag, text, max),
                   fmt::format("e.g. {} 10 (0: {})", flag, rule.zero));
}

double parse_seconds(std::string_view flag, const std::string& text, std::string_view zero) {
  return parse_seconds(flag, text, SecondsRule{.zero = zero});
}

PortRange parse_port_range_flag(std::string_view flag, const std::string& text) {
  const auto range = parse_port_range(text);
  if (!range) {
    throw UsageError(
        fmt::format("{} {}: not a port range LOW-HIGH (1-65535, LOW <= HIGH)", flag, text),
        fmt::format("e.g. {} 29500-29599: hvdrun needs one port on the launcher, one per host "
                    "entry and one more on rank 0's host (docs/network.md)",
                    flag));
  }
  return *range;
}

}  // namespace hvd::cli
