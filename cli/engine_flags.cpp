#include "cli/engine_flags.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "common/error.h"
#include "contract/env_table.h"

namespace hvd::cli {

double parse_number(const std::string& flag, const std::string& text, double min, double max,
                    std::string_view var, const std::string& example) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value) || value < min || value > max) {
    throw UsageError(fmt::format("{} {}: must be a number from {} to {} (it sets {})", flag, text,
                                 min, max, var),
                     fmt::format("e.g. {} {}", flag, example));
  }
  return value;
}

long long parse_whole(const std::string& flag, const std::string& text, long long min,
                      long long max, std::string_view var) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min ||
      value > max) {
    throw UsageError(fmt::format("{} {}: must be a whole number from {} to {} (it sets {})", flag,
                                 text, min, max, var),
                     fmt::format("e.g. {} 60", flag));
  }
  return value;
}

namespace {

void set(Knobs& knobs, const contract::EnvVar& var, std::string value) {
  knobs.emplace_back(std::string(var.name), std::move(value));
}

}  // namespace

std::string libhvd_log_level(const std::string& hvdrun_level) {
  if (hvdrun_level == "warn") return "warning";
  if (hvdrun_level == "off" || hvdrun_level == "critical") return "fatal";
  return hvdrun_level;
}

void define_engine_flags(CLI::App& app, Knobs& knobs) {
  app.add_option_function<std::string>(
         "--fusion-threshold-mb",
         [&knobs](const std::string& v) {
           const double mb = parse_number("--fusion-threshold-mb", v, 0, 1 << 20,
                                          contract::kFusionThreshold.name, "64");
           set(knobs, contract::kFusionThreshold,
               std::to_string(static_cast<long long>(std::llround(mb * 1024 * 1024))));
         },
         "libhvd: fuse small allreduces up to this many MiB (0: no fusion; default 64)")
      ->type_name("MB");
  app.add_option_function<std::string>(
         "--cycle-time-ms",
         [&knobs](const std::string& v) {
           const double ms =
               parse_number("--cycle-time-ms", v, 0, 1000, contract::kCycleTime.name, "0.2");
           set(knobs, contract::kCycleTime, fmt::format("{}", ms));
         },
         "libhvd: how long a rank batches submissions before negotiating (default 0.2)")
      ->type_name("MS");
  app.add_option_function<std::string>(
         "--cache-capacity",
         [&knobs](const std::string& v) {
           set(knobs, contract::kCacheCapacity,
               std::to_string(
                   parse_whole("--cache-capacity", v, 0, 1 << 20, contract::kCacheCapacity.name)));
         },
         "libhvd: how many tensors the response cache holds, so that a tensor seen before is "
         "agreed by its slot (default 1024; 0: off)")
      ->type_name("N");
  app.add_option_function<std::string>(
         "--stall-check-warning-time-seconds",
         [&knobs](const std::string& v) {
           set(knobs, contract::kStallCheckTime,
               std::to_string(parse_whole("--stall-check-warning-time-seconds", v, 1, 86400,
                                          contract::kStallCheckTime.name)));
         },
         "libhvd: warn when a tensor waits this long for missing ranks; hvdrun then names "
         "them with their hosts, states and Python stacks (docs/why.md) (default 60)")
      ->type_name("SECONDS");
  app.add_option_function<std::string>(
         "--stall-check-shutdown-time-seconds",
         [&knobs](const std::string& v) {
           set(knobs, contract::kStallShutdownTime,
               std::to_string(parse_whole("--stall-check-shutdown-time-seconds", v, 0, 86400,
                                          contract::kStallShutdownTime.name)));
         },
         "libhvd: fail every rank's pending ops after a stall this long; hvdrun then ends the "
         "job with exit 76 and the hang verdict as its cause (default 0: never)")
      ->type_name("SECONDS");
  app.add_flag_callback(
         "--no-stall-check", [&knobs] { set(knobs, contract::kStallCheckDisable, "1"); },
         "libhvd: turn the stall inspector off")
      ->trigger_on_parse();  // against horovodrun's --stall-check: the last one wins
  app.add_option_function<std::string>(
         "--timeline-filename",
         [&knobs](const std::string& v) {
           if (v.empty()) {
             throw UsageError("--timeline-filename: empty file name",
                              "e.g. --timeline-filename /tmp/timeline.json");
           }
           set(knobs, contract::kTimeline, v);
         },
         "libhvd: rank 0 writes a Chrome trace of every tensor to FILE (on rank 0's host)")
      ->type_name("FILE");
}

}  // namespace hvd::cli
