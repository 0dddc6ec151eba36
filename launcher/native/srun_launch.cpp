#include "launcher/native/srun_launch.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include "launcher/native/srun_agents.h"

namespace hvd::launcher {
namespace {

class SrunLaunch final : public AgentLaunch {
 public:
  explicit SrunLaunch(const LaunchOptions& options) : options_(options) {}
  ~SrunLaunch() override { finish(); }

  std::string_view name() const override { return "srun"; }

  std::vector<LaunchCommand> describe(const Plan& plan) const override {
    return {
        {"through Slurm on this machine: one srun step, one agent task per node, which "
         "connects back (HVD_AGENT_CONNECT and HVD_AGENT_TOKEN in its environment)",
         srun_agent_argv(plan, options_)}};
  }

  std::vector<std::string> command(const Plan& plan) const override {
    return srun_agent_argv(plan, options_);
  }

  StartedAgents start(const Plan& plan, Clock::time_point, bool) override {
    StartedAgents out;
    // srun and its agents are the Supervisor's to stop from the start.
    out.held_signals =
        std::make_unique<SignalFd>(std::initializer_list<int>{SIGINT, SIGTERM, SIGHUP});
    SrunAgents srun = start_srun_agents(plan, options_);
    step_.emplace(std::move(srun.srun));
    out.agents = std::move(srun.agents);
    return out;
  }

  std::unique_ptr<AgentStarter> start_one(const HostSpec&, bool) override { return nullptr; }

  // The step ends when its agents do; it is given a few seconds, then killed (which cancels
  // it). hvdrun waits for it: a step still being torn down holds the nodes' whole allocation,
  // and a step started right after (the next hvdrun or srun in the script) waits for it
  // (bench/README.md).
  void finish() override {
    if (!step_) return;
    const auto since = std::chrono::steady_clock::now();
    for (int i = 0; i < 300 && !step_->try_reap(); ++i) ::usleep(1000);
    spdlog::debug(
        "srun ended {:.1f} ms after the job",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
            .count());
    if (!step_->status()) step_->signal_group(SIGKILL);
    step_.reset();
  }

 private:
  LaunchOptions options_;
  std::optional<Process> step_;
};

}  // namespace

std::unique_ptr<AgentLaunch> make_srun_launch(const LaunchOptions& options) {
  return std::make_unique<SrunLaunch>(options);
}

}  // namespace hvd::launcher
