// A launch and, with --max-restarts, the attempts after it: each attempt's plan (a new job id,
// torchrun's restart variables, without the blacklisted hosts), its report, the banner and the
// wait between attempts, and the result. What is retried, the backoff and host health are the
// policy's (launcher/core/restarts.h); this is the loop that applies it.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/options.h"
#include "launcher/core/launcher.h"
#include "launcher/core/restarts.h"
#include "launcher/plan/plan.h"

namespace hvd::cli {

// What an attempt needs from the rest of the CLI.
struct AttemptContext {
  std::function<launcher::LaunchOptions(const launcher::Plan&)> launch_options;
  std::function<std::string()> new_job_id;
  std::function<void(const nlohmann::ordered_json&)> print_json;
};

launcher::RestartPolicy restart_policy(const Options& o);

// Attempt `attempt`'s request (1 is the first): with restarts on, a new job id after the first
// and torchrun's restart variables on every rank; `run_id` stays the same in every attempt.
launcher::PlanRequest attempt_request(const launcher::PlanRequest& base,
                                      const launcher::RestartPolicy& policy, int attempt,
                                      const std::string& run_id, const AttemptContext& context);

// Runs the attempts and prints each one's report (and, with --json, the last one's document);
// returns hvdrun's exit code.
int run_attempts(const Options& o, const launcher::PlanRequest& request,
                 const AttemptContext& context);

}  // namespace hvd::cli
