// The run session: what hvdrun does with a command once its flags are parsed, whichever launcher
// runs it. The CLI fills SessionOptions, makes one Session, and prints what it returns.
//
// - The first attempt's plan is made once, in the constructor, and checked there (elastic sizes
//   against -np, --output-ranks against the ranks, the launcher's own check()), before anything
//   is printed: a refused command prints its error alone.
// - describe(): the dry run, the plan and the launcher's commands, with the elastic and restart
//   rules in words (or as JSON).
// - run(): the attempts (--max-restarts; the policy is restarts.h): each attempt its own plan (a
//   new job id, torchrun's restart variables, without the blacklisted hosts; the first is the
//   constructor's), its report on stderr, the wait between attempts; elastic training that starts
//   without the hosts SSH could not reach. Returns hvdrun's exit code.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/core/launcher.h"
#include "launcher/core/plan_output.h"
#include "launcher/core/restarts.h"
#include "launcher/plan/plan.h"

namespace hvd::launcher {

struct SessionOptions {
  PlanRequest request;     // the first attempt's; its job id is the run id of every attempt
  LaunchOptions launch;    // elastic training: launch.elastic (as the flags gave it)
  RestartPolicy restarts;  // --max-restarts, --restart-backoff (capped at kMaxBackoffSeconds)
  // Builds the launcher an attempt runs on (the registry's entry, launcher/registry.h).
  std::function<std::unique_ptr<Launcher>(LaunchOptions)> make_launcher;
  std::function<std::string()> new_job_id;  // each restart's
  // Said before the plan's own warnings (the CLI's: flags accepted without effect).
  std::vector<std::string> warnings;
};

class Session {
 public:
  // Makes and checks the first attempt's plan. Throws UsageError for what cannot run.
  explicit Session(SessionOptions options);

  // The first attempt's plan: its warnings (the CLI's first) and notices are for the CLI to say.
  const Plan& plan() const { return plan_; }

  // --dry-run: plan() as the launcher shows it (Launcher::shown: the native launch's SSH
  // destinations after the SSH config), what it would run, the elastic and restart rules.
  std::string describe_text(const PlanOutputOptions& output) const;
  nlohmann::ordered_json describe_json(const PlanOutputOptions& output) const;

  // Runs the attempts; each one's report goes to stderr, and with `json` the last one's document
  // (with every attempt's summary when restarts are on) to print_json. With `record` (--record),
  // the run's events go there, the same document last. Returns the exit code.
  int run(bool json, const std::function<void(const nlohmann::ordered_json&)>& print_json,
          const std::shared_ptr<RunRecord>& record = nullptr);

 private:
  PlanRequest attempt_request(int attempt) const;
  bool elastic_without_unreachable(const Plan& plan, const LaunchResult& result);
  std::string elastic_words(const Plan& plan) const;

  SessionOptions options_;
  PlanRequest base_;  // elastic: less the hosts that SSH could not reach
  Plan plan_;
  std::unique_ptr<Launcher> launcher_;  // the first attempt's
};

}  // namespace hvd::launcher
